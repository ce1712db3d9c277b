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
    if (p->sp_partial && t->ddp.last_microbatch)
        TR_TRY(tr_comm_all_reduce_inplace(t->comm, TR_GROUP_TP, t->model->grads + p->offset,
                                          (size_t)p->numel, TR_COMM_F32, TR_COMM_SUM));
    if (p->kv_rep > 1 && t->ddp.last_microbatch && !t->kv_summed[param]) {
        TR_TRY(tr_model_reduce_kv_grad(t->model, param));
        t->kv_summed[param] = 1;
    }
    return tr_ddp_grad_ready(&t->ddp, param);
}

static tr_status on_before_param(void *ctx, int param) {
    tr_train_dp *t = ctx;
    if (!t->overlap_param_gather) return TR_OK;
    return tr_dist_opt_wait_param(&t->opt, t->layout.params[param].bucket);
}

static tr_status build_layout(tr_train_dp *t, const tr_config *c, const tr_model *m,
                              tr_ddp_options *ddp_opt, tr_diags *d) {
    bool pipelined = c->model.pipeline_model_parallel_size > 1;
    tr_grad_param *gp = calloc((size_t)m->n_info, sizeof *gp);
    if (!gp) return TR_ERR_NOMEM;
    int64_t total = 0;
    for (int i = 0; i < m->n_info; i++) {
        snprintf(gp[i].name, sizeof gp[i].name, "%s", m->info[i].name);
        gp[i].numel = m->info[i].numel;
        gp[i].no_weight_decay = m->info[i].no_decay;
        gp[i].frozen = m->info[i].frozen;
        gp[i].tp_replicated = m->tp.size > 1 && m->info[i].split_dim < 0;
        /* Key-value copies (TP larger than the query groups): the group's first rank counts. */
        if (m->info[i].kv_rep > 1 && m->tp.rank % m->info[i].kv_rep != 0)
            tr_param_kv_range(&m->info[i], &gp[i].uncounted_off, &gp[i].uncounted_numel);
        /* As Megatron: a word embedding shared over the pipeline (tied, or MTP's) has a bucket
         * of its own on both stages, so the distributed optimizer's shards of the two copies
         * cover the same rows and the embedding group's all-reduce sums reduced values with
         * reduced values. */
        gp[i].own_bucket = pipelined && tr_model_spec_shares_embedding(&m->spec) &&
                           strcmp(m->info[i].name, "embedding.word_embeddings.weight") == 0;
        total += m->info[i].numel;
    }
    tr_grad_layout_options lo;
    tr_status s = tr_ddp_options_from_config(c, t->size, total, &lo, ddp_opt, d);
    if (s == TR_OK) s = tr_grad_layout_build(&t->layout, gp, m->n_info, &lo, d);
    free(gp);
    if (s != TR_OK) return s == TR_ERR_CONFIG ? s : TR_ERR_CONFIG;
    t->have_layout = true;
    t->sharded = lo.sharded;
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
    tr_ddp_options ddp_opt;
    TR_TRY(build_layout(t, c, m, &ddp_opt, d));
    t->overlap_param_gather = c->ddp.overlap_param_gather;
    int64_t *offsets = malloc((size_t)m->n_info * sizeof *offsets);
    if (!offsets) return TR_ERR_NOMEM;
    for (int i = 0; i < m->n_info; i++) offsets[i] = t->layout.params[i].offset;
    tr_status s = tr_model_relayout(m, offsets, t->layout.numel);
    free(offsets);
    TR_TRY(s);
    TR_TRY(tr_ddp_create(&t->ddp, &t->layout, m->grads, comm, m->ops, &ddp_opt, d));
    t->ddp.dev = m->dev;
    t->have_ddp = true;
    tr_dist_opt_options oo = {.kind = os->sgd ? TR_DIST_OPT_SGD : TR_DIST_OPT_ADAMW,
                              .beta1 = os->beta1,
                              .beta2 = os->beta2,
                              .eps = os->eps,
                              .momentum = os->momentum,
                              .exp_avg_lowp = os->exp_avg_lowp,
                              .exp_avg_sq_lowp = os->exp_avg_sq_lowp,
                              .main_params_lowp = os->main_params_lowp,
                              .group = t->group,
                              .overlap_param_gather = t->overlap_param_gather};
    TR_TRY(tr_dist_opt_create(&t->opt, &t->layout, m->params, m->grads, comm, m->ops, &oo, d));
    t->have_opt = true;
    /* every device but the plain host keeps the state as device memory (cpu-count counts it) */
    if (m->dev && m->dev != tr_device_host()) TR_TRY(tr_dist_opt_use_device(&t->opt, m->dev));
    t->counted = malloc((size_t)m->n_info);
    t->kv_summed = calloc((size_t)m->n_info, 1);
    if (!t->counted || !t->kv_summed) return TR_ERR_NOMEM;
    /* A TP-replicated parameter enters the global norm once, from TP rank 0; a tied copy not at
     * all (its first stage's twin counts, as Megatron's shared-parameter rule). */
    tr_grad_counted_mask(&t->layout, m->tp.rank, t->counted);
    for (int i = 0; i < m->n_info; i++)
        if (m->info[i].tied_copy) t->counted[i] = 0;
    m->hooks =
        (tr_model_hooks){.ctx = t, .before_param = on_before_param, .grad_ready = on_grad_ready};
    return TR_OK;
}

void tr_train_dp_free(tr_train_dp *t) {
    if (t->have_opt) tr_dist_opt_free(&t->opt);
    if (t->have_ddp) tr_ddp_free(&t->ddp);
    if (t->have_layout) tr_grad_layout_free(&t->layout);
    free(t->counted);
    free(t->kv_summed);
    memset(t, 0, sizeof *t);
}

/* A parameter the model does not report ready (LoRA's adapters) is still in no started bucket
 * here, so its sum comes before its DP reduction as well. */
tr_status tr_train_dp_finish_grads(tr_train_dp *t) {
    for (int i = 0; i < t->model->n_info; i++) {
        if (t->model->info[i].kv_rep > 1 && !t->kv_summed[i])
            TR_TRY(tr_model_reduce_kv_grad(t->model, i));
        t->kv_summed[i] = 0;
    }
    return tr_ddp_finish_grad_sync(&t->ddp);
}

tr_status tr_train_dp_sum(tr_train_dp *t, double *v, int n) {
    return tr_device_all_reduce_host(t->model->dev, t->comm, t->group, v, (size_t)n, TR_COMM_F64,
                                     TR_COMM_SUM);
}

tr_status tr_train_dp_check_grads(tr_train_dp *t, const tr_train_precision *p, bool *found_inf) {
    *found_inf = false;
    if (!tr_train_precision_touches_grads(p)) return TR_OK;
    const tr_grad_owned *owned = &t->opt.owned;
    bool local = false;
    TR_TRY(tr_train_precision_grads(p, t->model->dev, t->ddp.grads, owned->ranges, owned->n_ranges,
                                    &local));
    int32_t flag = local;
    TR_TRY(tr_device_all_reduce_host(t->model->dev, t->comm, tr_grad_norm_group(t->sharded), &flag,
                                     1, TR_COMM_I32, TR_COMM_MAX));
    *found_inf = flag != 0;
    return TR_OK;
}

tr_status tr_train_dp_update(tr_train_dp *t, const tr_optimizer_spec *os, double lr, double wd,
                             double *grad_norm, bool *skipped) {
    bool clipped = false;
    TR_TRY(tr_grad_clip_on(t->model->dev, t->comm, tr_grad_norm_group(t->sharded), &t->layout,
                           &t->opt.owned, t->ddp.grads, t->counted, os->clip_grad, grad_norm,
                           &clipped));
    *skipped = !isfinite(*grad_norm) || *grad_norm > os->grad_norm_skip_threshold;
    if (*skipped) return TR_OK;
    return tr_dist_opt_step(&t->opt, (float)lr, (float)wd);
}

tr_status tr_train_dp_params_ready(tr_train_dp *t) {
    return t->have_opt ? tr_dist_opt_wait_all_params(&t->opt) : TR_OK;
}

tr_status tr_train_dp_params_norm(tr_train_dp *t, double *norm) {
    TR_TRY(tr_train_dp_params_ready(t));
    const tr_model *m = t->model;
    double sq = 0.0;
    for (int i = 0; i < m->n_info; i++) {
        const tr_param_info *p = &m->info[i];
        bool replicated_elsewhere = m->tp.size > 1 && p->split_dim < 0 && m->tp.rank != 0;
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
        sq += (double)part + (double)rest;
    }
    /* Every DP rank holds the same parameters: the model-parallel ranks hold the disjoint
     * pieces. */
    TR_TRY(tr_device_all_reduce_host(m->dev, t->comm, TR_GROUP_TP_PP, &sq, 1, TR_COMM_F64,
                                     TR_COMM_SUM));
    *norm = sqrt(sq);
    return TR_OK;
}
