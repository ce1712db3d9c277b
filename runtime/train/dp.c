/* See runtime/train/dp.h. */
#include "runtime/train/dp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device/device.h"
#include "runtime/distributed/grad_clip.h"
#include "runtime/model/tensor_parallel.h"

/* A sequence-parallel partial gradient (norms, position embedding) is summed over TP once its
 * accumulation over the microbatches is complete, before its DP reduction (a sum, so the order
 * does not matter; Megatron does it after); so are the key-value rows that the TP ranks sharing
 * a query group hold copies of (TP larger than the groups). */
static tr_status on_grad_ready(void *ctx, int param) {
    tr_train_dp *t = ctx;
    const tr_param_info *p = &t->model->info[param];
    tr_train_dp_buf *b = &t->bufs[t->buf_of[param]];
    if (p->sp_partial && b->ddp.last_microbatch)
        TR_TRY(tr_comm_all_reduce_inplace(t->comm, TR_GROUP_TP, t->model->grads + p->offset,
                                          (size_t)p->numel, TR_COMM_F32, TR_COMM_SUM));
    if (p->kv_rep > 1 && b->ddp.last_microbatch && !t->kv_summed[param]) {
        TR_TRY(tr_model_reduce_kv_grad(t->model, param));
        t->kv_summed[param] = 1;
    }
    return tr_ddp_grad_ready(&b->ddp, t->index_of[param]);
}

static tr_status on_before_param(void *ctx, int param) {
    tr_train_dp *t = ctx;
    if (!t->overlap_param_gather) return TR_OK;
    tr_train_dp_buf *b = &t->bufs[t->buf_of[param]];
    return tr_dist_opt_wait_param(&b->opt, b->layout.params[t->index_of[param]].bucket);
}

/* Buffer k's layout over the model parameters whose buffer_of is k. */
static tr_status build_layout(tr_train_dp *t, int k, const tr_config *c, const tr_model *m,
                              tr_ddp_options *ddp_opt, tr_diags *d) {
    tr_train_dp_buf *b = &t->bufs[k];
    bool pipelined = c->model.pipeline_model_parallel_size > 1;
    tr_grad_param *gp = calloc((size_t)m->n_info, sizeof *gp);
    b->param = malloc((size_t)m->n_info * sizeof *b->param);
    if (!gp || !b->param) {
        free(gp);
        return TR_ERR_NOMEM;
    }
    int64_t total = 0;
    int n = 0;
    for (int i = 0; i < m->n_info; i++) {
        if (t->buf_of[i] != k) continue;
        t->index_of[i] = n;
        b->param[n] = i;
        tr_grad_param *g = &gp[n++];
        snprintf(g->name, sizeof g->name, "%s", m->info[i].name);
        g->numel = m->info[i].numel;
        g->no_weight_decay = m->info[i].no_decay;
        g->frozen = m->info[i].frozen;
        /* An expert is this rank's own under EP (or its expert-TP shard), whatever TP does to
         * the dense layers. */
        g->tp_replicated = m->tp.size > 1 && m->info[i].split_dim < 0 && !m->info[i].expert;
        /* Key-value copies (TP larger than the query groups): the group's first rank counts. */
        if (m->info[i].kv_rep > 1 && m->tp.rank % m->info[i].kv_rep != 0)
            tr_param_kv_range(&m->info[i], &g->uncounted_off, &g->uncounted_numel);
        /* As Megatron: a word embedding shared over the pipeline (tied, or MTP's) has a bucket
         * of its own on both stages, so the distributed optimizer's shards of the two copies
         * cover the same rows and the embedding group's all-reduce sums reduced values with
         * reduced values. */
        g->own_bucket = pipelined && tr_model_spec_shares_embedding(&m->spec) &&
                        strcmp(m->info[i].name, "embedding.word_embeddings.weight") == 0;
        total += m->info[i].numel;
    }
    tr_grad_layout_options lo;
    tr_status s = tr_ddp_options_from_config(c, b->size, total, &lo, ddp_opt, d);
    ddp_opt->group = b->group;
    if (s == TR_OK) s = tr_grad_layout_build(&b->layout, gp, n, &lo, d);
    free(gp);
    if (s != TR_OK) return s == TR_ERR_CONFIG ? s : TR_ERR_CONFIG;
    b->have_layout = true;
    t->sharded = lo.sharded;
    return TR_OK;
}

/* The expert buffer starts on a 64-element boundary, like a sharded bucket's parameters. */
enum { BUF_ALIGN = 64 };

/* Buffer k's reduction and optimizer over its place in the model's (moved) flat buffers. */
static tr_status create_buf(tr_train_dp *t, int k, tr_model *m, const tr_ddp_options *ddp_opt,
                            const tr_optimizer_spec *os, tr_diags *d) {
    tr_train_dp_buf *b = &t->bufs[k];
    TR_TRY(tr_ddp_create(&b->ddp, &b->layout, m->grads + b->base, t->comm, m->ops, ddp_opt, d));
    b->ddp.dev = m->dev;
    b->have_ddp = true;
    tr_dist_opt_options oo = {.kind = os->sgd ? TR_DIST_OPT_SGD : TR_DIST_OPT_ADAMW,
                              .beta1 = os->beta1,
                              .beta2 = os->beta2,
                              .eps = os->eps,
                              .momentum = os->momentum,
                              .exp_avg_lowp = os->exp_avg_lowp,
                              .exp_avg_sq_lowp = os->exp_avg_sq_lowp,
                              .main_params_lowp = os->main_params_lowp,
                              .group = b->group,
                              .overlap_param_gather = t->overlap_param_gather};
    TR_TRY(tr_dist_opt_create(&b->opt, &b->layout, m->params + b->base, m->grads + b->base, t->comm,
                              m->ops, &oo, d));
    b->have_opt = true;
    /* every device but the plain host keeps the state as device memory (cpu-count counts it) */
    if (m->dev && m->dev != tr_device_host()) TR_TRY(tr_dist_opt_use_device(&b->opt, m->dev));
    b->counted = malloc((size_t)b->layout.n_params);
    if (!b->counted) return TR_ERR_NOMEM;
    /* A TP-replicated parameter enters the global norm once, from TP rank 0; a tied copy not at
     * all (its first stage's twin counts, as Megatron's shared-parameter rule). */
    tr_grad_counted_mask(&b->layout, m->tp.rank, b->counted);
    for (int i = 0; i < b->layout.n_params; i++)
        if (m->info[b->param[i]].tied_copy) b->counted[i] = 0;
    return TR_OK;
}

tr_status tr_train_dp_setup(tr_train_dp *t, const tr_config *c, tr_comm *comm, tr_model *m,
                            const tr_optimizer_spec *os, tr_diags *d) {
    memset(t, 0, sizeof *t);
    t->comm = comm;
    t->model = m;
    t->group = TR_GROUP_DP_CP;
    t->size = tr_comm_group_size(comm, t->group);
    t->rank = tr_comm_group_rank(comm, t->group);
    t->overlap_param_gather = c->ddp.overlap_param_gather;
    t->buf_of = calloc((size_t)m->n_info, sizeof *t->buf_of);
    t->index_of = calloc((size_t)m->n_info, sizeof *t->index_of);
    t->kv_summed = calloc((size_t)m->n_info, 1);
    if (!t->buf_of || !t->index_of || !t->kv_summed) return TR_ERR_NOMEM;
    t->n_bufs = 1;
    for (int i = 0; i < m->n_info; i++)
        if (m->info[i].expert) {
            t->buf_of[i] = 1;
            t->n_bufs = 2;
        }
    for (int l = 0; t->n_bufs == 1 && (m->spec.moe.ep_size > 1 || m->spec.moe.etp_size > 1) &&
                    l < m->full.num_layers + m->full.mtp_layers;
         l++)
        t->experts_elsewhere |= tr_model_is_moe_layer(&m->full, l);
    bool sharded = c->ddp.use_distributed_optimizer || c->optimizer.use_distributed_optimizer;
    /* Megatron's grad-stats groups: the dense ones (grad_clip.h), and for the experts the
     * intra-expert-dist-opt group (the whole world with one instance) or expert TP x EP x PP. */
    int groups[2][2] = {{TR_GROUP_DP_CP, tr_grad_norm_group(sharded)},
                        {TR_GROUP_EXPERT_DP, sharded ? TR_COMM_WORLD : TR_GROUP_TP_EP_PP}};
    tr_ddp_options ddp_opt[2];
    int64_t at = 0;
    int64_t *offsets = malloc((size_t)m->n_info * sizeof *offsets);
    if (!offsets) return TR_ERR_NOMEM;
    tr_status s = TR_OK;
    for (int k = 0; k < t->n_bufs && s == TR_OK; k++) {
        tr_train_dp_buf *b = &t->bufs[k];
        b->group = groups[k][0];
        b->norm_group = groups[k][1];
        b->size = tr_comm_group_size(comm, b->group);
        s = build_layout(t, k, c, m, &ddp_opt[k], d);
        if (s != TR_OK) break;
        b->base = at;
        for (int i = 0; i < b->layout.n_params; i++)
            offsets[b->param[i]] = at + b->layout.params[i].offset;
        at += b->layout.numel;
        if (k + 1 < t->n_bufs) at = (at + BUF_ALIGN - 1) / BUF_ALIGN * BUF_ALIGN;
    }
    if (s == TR_OK) s = tr_model_relayout(m, offsets, at);
    free(offsets);
    TR_TRY(s);
    for (int k = 0; k < t->n_bufs; k++) TR_TRY(create_buf(t, k, m, &ddp_opt[k], os, d));
    m->hooks =
        (tr_model_hooks){.ctx = t, .before_param = on_before_param, .grad_ready = on_grad_ready};
    return TR_OK;
}

void tr_train_dp_free(tr_train_dp *t) {
    for (int k = 0; k < 2; k++) {
        tr_train_dp_buf *b = &t->bufs[k];
        if (b->have_opt) tr_dist_opt_free(&b->opt);
        if (b->have_ddp) tr_ddp_free(&b->ddp);
        if (b->have_layout) tr_grad_layout_free(&b->layout);
        free(b->counted);
        free(b->param);
    }
    free(t->buf_of);
    free(t->index_of);
    free(t->kv_summed);
    memset(t, 0, sizeof *t);
}

tr_status tr_train_dp_start_iteration(tr_train_dp *t, float grad_scale) {
    for (int k = 0; k < t->n_bufs; k++) TR_TRY(tr_ddp_start_iteration(&t->bufs[k].ddp, grad_scale));
    return TR_OK;
}

void tr_train_dp_set_last_microbatch(tr_train_dp *t, bool last) {
    for (int k = 0; k < t->n_bufs; k++) tr_ddp_set_last_microbatch(&t->bufs[k].ddp, last);
}

tr_status tr_train_dp_scale_grads(tr_train_dp *t, float s) {
    for (int k = 0; k < t->n_bufs; k++) TR_TRY(tr_ddp_scale_grads(&t->bufs[k].ddp, s));
    return TR_OK;
}

int tr_train_dp_started_early(const tr_train_dp *t) {
    int n = 0;
    for (int k = 0; k < t->n_bufs; k++) n += t->bufs[k].ddp.started_early;
    return n;
}

/* A parameter the model does not report ready (LoRA's adapters) is still in no started bucket
 * here, so its sum comes before its DP reduction as well. */
tr_status tr_train_dp_finish_grads(tr_train_dp *t) {
    for (int i = 0; i < t->model->n_info; i++) {
        if (t->model->info[i].kv_rep > 1 && !t->kv_summed[i])
            TR_TRY(tr_model_reduce_kv_grad(t->model, i));
        t->kv_summed[i] = 0;
    }
    for (int k = 0; k < t->n_bufs; k++) TR_TRY(tr_ddp_finish_grad_sync(&t->bufs[k].ddp));
    return TR_OK;
}

tr_status tr_train_dp_sum(tr_train_dp *t, double *v, int n) {
    return tr_device_all_reduce_host(t->model->dev, t->comm, t->group, v, (size_t)n, TR_COMM_F64,
                                     TR_COMM_SUM);
}

tr_status tr_train_dp_sum_tokens(tr_train_dp *t, double *v, int n) {
    return tr_device_all_reduce_host(t->model->dev, t->comm, TR_GROUP_TP_DP_CP, v, (size_t)n,
                                     TR_COMM_F64, TR_COMM_SUM);
}

tr_status tr_train_dp_check_grads(tr_train_dp *t, const tr_train_precision *p, bool *found_inf) {
    *found_inf = false;
    if (!tr_train_precision_touches_grads(p)) return TR_OK;
    int32_t flag = 0;
    for (int k = 0; k < t->n_bufs; k++) {
        const tr_train_dp_buf *b = &t->bufs[k];
        bool local = false;
        TR_TRY(tr_train_precision_grads(p, t->model->dev, b->ddp.grads, b->opt.owned.ranges,
                                        b->opt.owned.n_ranges, &local));
        flag |= local;
    }
    /* With an expert buffer the dense and expert grad-stats groups differ: the world decides. */
    int group =
        t->n_bufs > 1 || t->experts_elsewhere ? TR_COMM_WORLD : tr_grad_norm_group(t->sharded);
    TR_TRY(tr_device_all_reduce_host(t->model->dev, t->comm, group, &flag, 1, TR_COMM_I32,
                                     TR_COMM_MAX));
    *found_inf = flag != 0;
    return TR_OK;
}

tr_status tr_train_dp_update(tr_train_dp *t, const tr_optimizer_spec *os, double lr, double wd,
                             double *grad_norm, bool *skipped) {
    tr_device *dev = t->model->dev;
    double sq = 0.0;
    for (int k = 0; k < t->n_bufs; k++) {
        tr_train_dp_buf *b = &t->bufs[k];
        TR_TRY(tr_grad_norm_sq_on(dev, t->comm, b->norm_group, &b->layout, &b->opt.owned,
                                  b->ddp.grads, b->counted, &sq));
    }
    if (t->experts_elsewhere) {
        double none = 0.0;
        TR_TRY(tr_device_all_reduce_host(dev, t->comm,
                                         t->sharded ? TR_COMM_WORLD : TR_GROUP_TP_EP_PP, &none, 1,
                                         TR_COMM_F64, TR_COMM_SUM));
        sq += none;
    }
    *grad_norm = sqrt(sq);
    double coeff = os->clip_grad / (*grad_norm + 1e-6);
    if (os->clip_grad > 0.0 && isfinite(*grad_norm) && coeff < 1.0)
        for (int k = 0; k < t->n_bufs; k++)
            TR_TRY(tr_grad_scale_owned_on(dev, &t->bufs[k].opt.owned, t->bufs[k].ddp.grads,
                                          (float)coeff));
    *skipped = !isfinite(*grad_norm) || *grad_norm > os->grad_norm_skip_threshold;
    if (*skipped) return TR_OK;
    for (int k = 0; k < t->n_bufs; k++)
        TR_TRY(tr_dist_opt_step(&t->bufs[k].opt, (float)lr, (float)wd));
    return TR_OK;
}

tr_status tr_train_dp_params_ready(tr_train_dp *t) {
    for (int k = 0; k < t->n_bufs; k++)
        if (t->bufs[k].have_opt) TR_TRY(tr_dist_opt_wait_all_params(&t->bufs[k].opt));
    return TR_OK;
}

tr_status tr_train_dp_params_norm(tr_train_dp *t, double *norm) {
    TR_TRY(tr_train_dp_params_ready(t));
    const tr_model *m = t->model;
    double sq[2] = {0.0, 0.0}; /* dense, experts */
    for (int i = 0; i < m->n_info; i++) {
        const tr_param_info *p = &m->info[i];
        bool replicated_elsewhere =
            m->tp.size > 1 && p->split_dim < 0 && !p->expert && m->tp.rank != 0;
        if (p->tied_copy || replicated_elsewhere) continue;
        /* A key-value copy is counted on its group's first TP rank. */
        int64_t kv_off = 0, kv_n = 0;
        if (p->kv_rep > 1 && m->tp.rank % p->kv_rep != 0) tr_param_kv_range(p, &kv_off, &kv_n);
        float part = 0.0f, rest = 0.0f;
        int64_t tail = kv_off + kv_n;
        TR_TRY(
            tr_device_sum_squares(m->dev, m->params + p->offset, kv_n ? kv_off : p->numel, &part));
        if (kv_n && tail < p->numel)
            TR_TRY(tr_device_sum_squares(m->dev, m->params + p->offset + tail, p->numel - tail,
                                         &rest));
        sq[p->expert] += (double)part + (double)rest;
    }
    /* Every DP rank holds the same parameters: the model-parallel ranks hold the disjoint
     * pieces (for the experts, expert TP x EP x PP). */
    TR_TRY(tr_device_all_reduce_host(m->dev, t->comm, TR_GROUP_TP_PP, &sq[0], 1, TR_COMM_F64,
                                     TR_COMM_SUM));
    if (t->n_bufs > 1)
        TR_TRY(tr_device_all_reduce_host(m->dev, t->comm, TR_GROUP_TP_EP_PP, &sq[1], 1, TR_COMM_F64,
                                         TR_COMM_SUM));
    *norm = sqrt(sq[0] + sq[1]);
    return TR_OK;
}
