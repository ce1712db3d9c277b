/* See runtime/train/checkpointing.h; the sequence of steps is docs/checkpoints.md "How the runtime
 * uses it". */
#include "runtime/train/checkpointing.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/checkpoint/reader.h"
#include "runtime/hf/hf.h"
#include "runtime/device/device.h"
#include "runtime/peft/lora.h"
#include "runtime/train/state_dict.h"

#ifndef TRESTLE_VERSION
#define TRESTLE_VERSION "unknown"
#endif

/* The scalars of a checkpoint, in the order they are registered. */
enum { S_ITERATION, S_CONSUMED, S_SCHED, S_SKIPPED, S_OPT_STEP, S_SEED, S_COUNT };
static const char *const scalar_names[S_COUNT] = {"iteration",
                                                  "data.consumed_samples",
                                                  "scheduler.num_samples",
                                                  "scheduler.skipped_iterations",
                                                  "optimizer.step",
                                                  "rng.dropout_seed"};

/* The loss scaler's state travels with the optimizer state: an exact fp16 resume needs the
 * scale and both of its counters. */
#define SCALER_TENSOR "optimizer.grad_scaler"
enum { SCALER_STATE = 3 };

static bool has_scaler(const tr_train_ckpt *k) {
    return k->env.scaler && k->env.scaler->enabled;
}

static void scaler_pack(const tr_loss_scaler *s, double *v) {
    v[0] = s->scale;
    v[1] = (double)s->growth_tracker;
    v[2] = (double)s->hysteresis_tracker;
}

static void scaler_unpack(tr_loss_scaler *s, const double *v) {
    s->scale = v[0];
    s->growth_tracker = (int64_t)v[1];
    s->hysteresis_tracker = (int)v[2];
}

static bool sgd(const tr_train_ckpt *k) {
    return k->env.opt ? k->env.opt->spec.sgd : k->env.dp->bufs[0].opt.opt.kind == TR_DIST_OPT_SGD;
}

static int64_t *opt_step(tr_train_ckpt *k) {
    return k->env.opt ? &k->env.opt->step : &k->env.dp->bufs[0].opt.step;
}

/* Every gradient buffer's optimizer has taken the same steps (Adam's bias correction). */
static void set_opt_step(tr_train_ckpt *k, int64_t step) {
    *opt_step(k) = step;
    for (int b = 1; !k->env.opt && b < k->env.dp->n_bufs; b++) k->env.dp->bufs[b].opt.step = step;
}

static tr_device *dev_of(const tr_train_ckpt *k) {
    return k->env.model->dev ? k->env.model->dev : tr_device_host();
}

/* ------------------------------------------------------------------------------------------ */
/* Collectives: the storage layer has none, so the ranks agree on every outcome here. */

/* Every rank's status: the first failure wins; a rank that did not fail itself says so. */
static tr_status agree(tr_train_ckpt *k, tr_status s) {
    if (!k->env.comm) return s;
    int32_t bad = s != TR_OK;
    TR_TRY(tr_device_all_reduce_host(dev_of(k), k->env.comm, TR_COMM_WORLD, &bad, 1, TR_COMM_I32,
                                     TR_COMM_MAX));
    if (bad && s == TR_OK)
        return tr_diag_add(k->d, TR_SEV_ERROR, "checkpoint.other_rank", NULL, NULL,
                           "see the diagnostics of the other ranks",
                           "another rank failed during the checkpoint step");
    return s;
}

static tr_status bcast_u64(tr_train_ckpt *k, uint64_t *v) {
    if (!k->env.comm) return TR_OK;
    /* A sum with zeros elsewhere is rank 0's value, exactly, on any backend. */
    int64_t x = k->rank == 0 ? (int64_t)*v : 0;
    TR_TRY(tr_device_all_reduce_host(dev_of(k), k->env.comm, TR_COMM_WORLD, &x, 1, TR_COMM_I64,
                                     TR_COMM_SUM));
    *v = (uint64_t)x;
    return TR_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Optimizer state in model space: a buffer laid out like the parameters. The single-rank
 * optimizer keeps it that way already; the data-parallel one keeps the ranges it owns, so saving
 * assembles them over the DP group (each element is owned once, the others add zeros) and loading
 * takes the owned ranges back out. Any DP size and either optimizer can therefore load it. */

/* Device buffers are staged through host memory when the host cannot read them (CUDA). */
typedef struct host_view {
    float *host; /* what the checkpoint layer reads or fills */
    float *device;
    size_t n;
    bool staged; /* host is a copy allocated here */
} host_view;

static tr_status host_view_open(tr_train_ckpt *k, host_view *h, float *device, size_t n,
                                bool fetch) {
    tr_device *dev = dev_of(k);
    *h = (host_view){device, device, n, false};
    if (!device || tr_device_host_visible(dev)) return TR_OK;
    h->host = calloc(n ? n : 1, sizeof(float));
    if (!h->host) return TR_ERR_NOMEM;
    h->staged = true;
    return fetch ? tr_device_to_host(dev, h->host, device, n * sizeof(float)) : TR_OK;
}

/* Writes a staged copy back to the device (after a load). */
static tr_status host_view_store(tr_train_ckpt *k, const host_view *h) {
    if (!h->staged) return TR_OK;
    return tr_device_to_device(dev_of(k), h->device, h->host, h->n * sizeof(float));
}

static void host_view_close(host_view *h) {
    if (h->staged) free(h->host);
    memset(h, 0, sizeof *h);
}

typedef struct opt_state {
    float *dm, *dv;   /* model-space moments in device memory (v NULL for SGD) */
    bool dev_owned;   /* dm/dv allocated here (the data-parallel optimizer's assembly) */
    host_view hm, hv; /* what the checkpoint layer sees */
} opt_state;

static void opt_state_free(tr_train_ckpt *k, opt_state *o) {
    host_view_close(&o->hm);
    host_view_close(&o->hv);
    if (o->dev_owned) {
        tr_device_free(dev_of(k), TR_MEM_OPTIMIZER, o->dv);
        tr_device_free(dev_of(k), TR_MEM_OPTIMIZER, o->dm);
    }
    memset(o, 0, sizeof *o);
}

/* The single-rank optimizer keeps its moments in model space already; the data-parallel one
 * gets zeroed model-space buffers to assemble into (save) or to scatter from (load). */
static tr_status opt_state_alloc(tr_train_ckpt *k, opt_state *o) {
    memset(o, 0, sizeof *o);
    if (k->env.opt) {
        o->dm = k->env.opt->m;
        o->dv = k->env.opt->v;
        return TR_OK;
    }
    size_t bytes = (size_t)k->env.model->n_params * sizeof(float);
    o->dev_owned = true;
    TR_TRY(tr_device_alloc(dev_of(k), TR_MEM_OPTIMIZER, bytes, (void **)&o->dm));
    if (!sgd(k)) TR_TRY(tr_device_alloc(dev_of(k), TR_MEM_OPTIMIZER, bytes, (void **)&o->dv));
    return TR_OK;
}

/* Host views of the moments: with their current values (save) or to be filled (load). */
static tr_status opt_state_views(tr_train_ckpt *k, opt_state *o, bool fetch) {
    size_t n = (size_t)k->env.model->n_params;
    TR_TRY(host_view_open(k, &o->hm, o->dm, n, fetch));
    return host_view_open(k, &o->hv, o->dv, n, fetch);
}

/* Each gradient buffer's owned ranges between the optimizer's state and model space (its
 * elements start at the buffer's base there). */
static tr_status copy_owned(tr_train_ckpt *k, opt_state *o, bool to_model) {
    tr_device *dev = dev_of(k);
    for (int b = 0; b < k->env.dp->n_bufs; b++) {
        const tr_train_dp_buf *buf = &k->env.dp->bufs[b];
        const tr_dist_opt *d = &buf->opt;
        for (int r = 0; r < d->owned.n_ranges; r++) {
            const tr_grad_range *g = &d->owned.ranges[r];
            size_t bytes = (size_t)g->numel * sizeof(float);
            float *m = o->dm + buf->base + g->offset, *v = o->dv + buf->base + g->offset;
            if (to_model) {
                TR_TRY(tr_device_copy(dev, m, d->m + g->state_offset, bytes));
                if (o->dv) TR_TRY(tr_device_copy(dev, v, d->v + g->state_offset, bytes));
            } else {
                TR_TRY(tr_device_copy(dev, d->m + g->state_offset, m, bytes));
                if (o->dv) TR_TRY(tr_device_copy(dev, d->v + g->state_offset, v, bytes));
            }
        }
    }
    return TR_OK;
}

static tr_status opt_state_gather(tr_train_ckpt *k, opt_state *o) {
    if (k->env.opt) return TR_OK;
    TR_TRY(copy_owned(k, o, true));
    if (!k->env.dp->sharded) return TR_OK;
    /* Each buffer's shards meet over its own group (the experts' over expert DP). */
    for (int b = 0; b < k->env.dp->n_bufs; b++) {
        const tr_train_dp_buf *buf = &k->env.dp->bufs[b];
        size_t n = (size_t)buf->layout.numel;
        TR_TRY(tr_comm_all_reduce_inplace(k->env.comm, buf->group, o->dm + buf->base, n,
                                          TR_COMM_F32, TR_COMM_SUM));
        if (o->dv)
            TR_TRY(tr_comm_all_reduce_inplace(k->env.comm, buf->group, o->dv + buf->base, n,
                                              TR_COMM_F32, TR_COMM_SUM));
    }
    return TR_OK;
}

/* After a load into the host views: back into the optimizer's own buffers. */
static tr_status opt_state_scatter(tr_train_ckpt *k, opt_state *o) {
    TR_TRY(host_view_store(k, &o->hm));
    TR_TRY(host_view_store(k, &o->hv));
    if (k->env.opt) return TR_OK;
    return copy_owned(k, o, false);
}

static tr_status add_opt_tensors(tr_ckpt_list *l, tr_train_ckpt *k, opt_state *o, bool for_save) {
    if (sgd(k))
        return tr_ckpt_list_add_params(l, k, "optimizer.momentum.", o->hm.host, 1, for_save);
    TR_TRY(tr_ckpt_list_add_params(l, k, "optimizer.exp_avg.", o->hm.host, 1, for_save));
    return tr_ckpt_list_add_params(l, k, "optimizer.exp_avg_sq.", o->hv.host, 2, for_save);
}

/* ------------------------------------------------------------------------------------------ */
/* Saving. */

static tr_ckpt_layout layout_of(const tr_train_ckpt *k) {
    tr_ckpt_layout l;
    tr_ckpt_layout_init(&l);
    l.tp = k->tp;
    l.pp = k->pp;
    l.dp = k->dp;
    l.ep = k->ep;
    l.vpp = k->env.pp ? k->env.pp->vpp : 1;
    l.dist_opt = k->env.dp && k->env.dp->sharded;
    return l;
}

/* Rank 0 publishes the checkpoint once every rank's shards are on disk; then retention. */
static tr_status commit(tr_train_ckpt *k, tr_ckpt_save *s, tr_status written) {
    const tr_checkpoint_config *cc = &k->env.c->checkpoint;
    tr_status st = agree(k, written);
    if (st == TR_OK && k->rank == 0) {
        st = tr_ckpt_save_finalize(s, k->d);
        if (st == TR_OK) st = tr_ckpt_save_commit(s, k->d);
        if (st == TR_OK && cc->most_recent_k >= 1)
            st = tr_ckpt_retain(
                cc->save, cc->most_recent_k,
                cc->save_retain_interval == TR_NULL_INT ? 0 : cc->save_retain_interval, k->d);
    }
    return agree(k, st);
}

static tr_status join_pending(tr_train_ckpt *k) {
    if (!k->pending_save) return TR_OK;
    tr_status st = tr_ckpt_async_join(k->pending_write, k->d);
    k->pending_write = NULL;
    st = commit(k, k->pending_save, st);
    tr_ckpt_save_free(k->pending_save);
    k->pending_save = NULL;
    if (st == TR_OK && k->rank == 0 && k->env.log)
        fprintf(k->env.log, "checkpoint: saved iteration %lld to %s (async)\n",
                (long long)k->pending_iteration, k->env.c->checkpoint.save);
    return st;
}

static tr_status save(tr_train_ckpt *k, const tr_train_ckpt_pos *pos) {
    const tr_checkpoint_config *cc = &k->env.c->checkpoint;
    TR_TRY(join_pending(k));
    if (k->env.dp) TR_TRY(tr_train_dp_params_ready(k->env.dp));
    int64_t scalars[S_COUNT] = {pos->iteration,         pos->consumed_samples,
                                pos->scheduler_samples, pos->skipped_iterations,
                                *opt_step(k),           (int64_t)k->env.model->dropout_seed};
    opt_state os = {0};
    host_view params = {0};
    tr_ckpt_list l = {0};
    tr_status st = TR_OK;
    if (cc->save_optim) {
        st = opt_state_alloc(k, &os);
        if (st == TR_OK) st = opt_state_gather(k, &os);
        if (st == TR_OK) st = opt_state_views(k, &os, true);
    }
    if (st == TR_OK)
        st = host_view_open(k, &params, k->env.model->params, (size_t)k->env.model->n_params, true);
    if (st == TR_OK) st = tr_ckpt_list_add_params(&l, k, "", params.host, 0, true);
    if (st == TR_OK && cc->save_optim) st = add_opt_tensors(&l, k, &os, true);
    for (int i = 0; i < S_COUNT && st == TR_OK; i++) {
        if ((i == S_OPT_STEP && !cc->save_optim) || (i == S_SEED && !cc->save_rng)) continue;
        st = tr_ckpt_list_add_scalar(&l, k, scalar_names[i], &scalars[i]);
    }
    double scaler[SCALER_STATE];
    if (st == TR_OK && cc->save_optim && has_scaler(k)) {
        scaler_pack(k->env.scaler, scaler);
        st = tr_ckpt_list_add_f64(&l, k, SCALER_TENSOR, scaler, SCALER_STATE);
    }
    tr_ckpt_save_opts o;
    tr_ckpt_save_opts_init(&o, cc->save, pos->iteration);
    o.rank = k->rank;
    o.world = k->world;
    o.nonce = k->rank == 0 ? tr_ckpt_new_nonce() : 0;
    o.layout = layout_of(k);
    o.config_fingerprint = tr_config_fingerprint(k->env.c);
    o.code_version = TRESTLE_VERSION;
    o.fsync = true;
    tr_status bs = bcast_u64(k, &o.nonce);
    if (bs != TR_OK) st = bs;
    tr_ckpt_save *s = NULL;
    if (st == TR_OK) st = tr_ckpt_save_begin(&o, &s, k->d);
    if (cc->async_save) {
        /* The snapshot is taken before this returns: training may overwrite the buffers. */
        tr_ckpt_async *a = NULL;
        if (st == TR_OK) st = tr_ckpt_async_start(s, l.t, l.n, &a, k->d);
        opt_state_free(k, &os);
        host_view_close(&params);
        tr_ckpt_list_free(&l);
        st = agree(k, st);
        if (st != TR_OK) {
            if (a) tr_ckpt_async_join(a, k->d);
            tr_ckpt_save_free(s);
            return st;
        }
        k->pending_save = s;
        k->pending_write = a;
        k->pending_iteration = pos->iteration;
        return TR_OK;
    }
    if (st == TR_OK) st = tr_ckpt_save_write_shards(s, l.t, l.n, k->d);
    opt_state_free(k, &os);
    host_view_close(&params);
    tr_ckpt_list_free(&l);
    st = commit(k, s, st);
    tr_ckpt_save_free(s);
    if (st == TR_OK && k->rank == 0 && k->env.log)
        fprintf(k->env.log, "checkpoint: saved iteration %lld to %s\n", (long long)pos->iteration,
                cc->save);
    return st;
}

tr_status tr_train_ckpt_after_iteration(tr_train_ckpt *k, const tr_train_ckpt_pos *pos,
                                        bool stopping) {
    const tr_checkpoint_config *cc = &k->env.c->checkpoint;
    if (!cc->save || pos->iteration == k->last_saved) return TR_OK;
    bool due =
        stopping || (cc->save_interval != TR_NULL_INT && pos->iteration % cc->save_interval == 0);
    if (!due) return TR_OK;
    k->last_saved = pos->iteration;
    return save(k, pos);
}

tr_status tr_train_ckpt_finish(tr_train_ckpt *k) {
    return join_pending(k);
}

void tr_train_ckpt_free(tr_train_ckpt *k) {
    if (k->pending_write) tr_ckpt_async_join(k->pending_write, k->d);
    if (k->pending_save) tr_ckpt_save_free(k->pending_save);
    k->pending_write = NULL;
    k->pending_save = NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Loading. */

typedef enum source { SRC_NONE, SRC_RESUME, SRC_WEIGHTS, SRC_HF } source;

/* The directory to load and how much of it: checkpoint.load (everything, or weights only with
 * finetune), else pretrained_checkpoint (weights only). A checkpoint.load without a tracker
 * starts fresh unless exit_on_missing_checkpoint; a tracker naming a missing iteration is an
 * error (tr_ckpt_find returns TR_ERR_INVALID, not TR_ERR_NOTFOUND). */
static tr_status find_source(tr_train_ckpt *k, char **dir, int64_t *iteration, source *src) {
    const tr_checkpoint_config *cc = &k->env.c->checkpoint;
    *src = SRC_NONE;
    if (cc->load) {
        tr_diags scratch;
        tr_diags_init(&scratch);
        int64_t step = cc->ckpt_step == TR_NULL_INT ? -1 : cc->ckpt_step;
        tr_status s = tr_ckpt_find(cc->load, step, dir, iteration, &scratch);
        bool missing = s == TR_ERR_NOTFOUND && !cc->exit_on_missing_checkpoint;
        if (!missing)
            for (int i = 0; i < scratch.n; i++)
                tr_diag_add(k->d, scratch.items[i].severity, scratch.items[i].id, NULL,
                            cc->exit_on_missing_checkpoint && s == TR_ERR_NOTFOUND
                                ? "checkpoint.load,checkpoint.exit_on_missing_checkpoint"
                                : "checkpoint.load",
                            scratch.items[i].hint, "%s", scratch.items[i].message);
        tr_diags_free(&scratch);
        if (s == TR_OK) {
            *src = cc->finetune ? SRC_WEIGHTS : SRC_RESUME;
            return TR_OK;
        }
        if (!missing) return s;
        if (k->rank == 0 && k->env.log)
            fprintf(k->env.log, "checkpoint: no checkpoint in %s%s\n", cc->load,
                    cc->pretrained_checkpoint ? "" : "; starting from scratch");
    }
    if (cc->pretrained_checkpoint && tr_hf_is_model_dir(cc->pretrained_checkpoint)) {
        *dir = strdup(cc->pretrained_checkpoint);
        *src = SRC_HF;
        return *dir ? TR_OK : TR_ERR_NOMEM;
    }
    if (cc->pretrained_checkpoint) {
        TR_TRY(tr_ckpt_find(cc->pretrained_checkpoint, -1, dir, iteration, k->d));
        *src = SRC_WEIGHTS;
    }
    return TR_OK;
}

/* A Hugging Face model directory as the pretrained weights: config.json must describe the
 * model the config builds, and each rank reads its own slices of the safetensors files. */
static tr_status load_hf(tr_train_ckpt *k, const char *dir) {
    TR_TRY(tr_hf_config_check(k->env.c, dir, k->d));
    tr_hf_weights w;
    TR_TRY(tr_hf_weights_open(&w, dir, k->d));
    tr_status st = tr_hf_import(k->env.model, &w, k->d);
    tr_hf_weights_close(&w);
    if (st == TR_OK && k->rank == 0 && k->env.log)
        fprintf(k->env.log, "checkpoint: loaded Hugging Face weights from %s\n", dir);
    return st;
}

static bool has_tensor(tr_ckpt_reader *r, const char *name) {
    return tr_ckpt_manifest_find(tr_ckpt_reader_manifest(r), name) != NULL;
}

static tr_status read_scalars(tr_train_ckpt *k, tr_ckpt_reader *r, bool with_opt, bool with_rng,
                              int64_t *v) {
    for (int i = 0; i < S_COUNT; i++) {
        if ((i == S_OPT_STEP && !with_opt) || (i == S_SEED && !with_rng)) continue;
        tr_ckpt_slice whole = {0};
        TR_TRY(tr_ckpt_read(r, scalar_names[i], TR_CKPT_I64, &whole, &v[i], k->d));
    }
    return TR_OK;
}

/* LoRA from pretrained weights: the base checkpoint has no adapters, which keep their initial
 * values (B = 0: the model starts as the base model). */
static void skip_new_adapters(tr_train_ckpt *k, tr_ckpt_list *l, tr_ckpt_reader *r) {
    int kept = 0;
    for (int i = 0; i < l->n; i++) {
        if (tr_lora_is_adapter(l->names[i]) && !has_tensor(r, l->names[i])) {
            if (strstr(l->names[i], ".weight_magnitude")) k->magnitudes_missing = true;
            free(l->names[i]);
            continue;
        }
        l->t[kept] = l->t[i];
        l->names[kept++] = l->names[i];
    }
    l->n = kept;
}

/* Reads everything this rank needs; nothing is applied to the loop position unless the whole
 * load succeeded on every rank (the caller agrees first). */
static tr_status load_from(tr_train_ckpt *k, const char *dir, source src, int64_t *scalars,
                           bool *with_opt, bool *with_rng) {
    const tr_checkpoint_config *cc = &k->env.c->checkpoint;
    tr_ckpt_reader *r = NULL;
    TR_TRY(tr_ckpt_open(dir, &r, k->d));
    tr_status st = TR_OK;
    if (cc->verify_integrity && k->rank == 0) st = tr_ckpt_verify(r, NULL, k->d);
    bool resume = src == SRC_RESUME;
    /* Pretrained weights are the whole base model; anything else holds what a save wrote. */
    k->trainable_only = resume && k->env.model->spec.lora_rank > 0;
    *with_opt = resume && cc->load_optim && has_tensor(r, "optimizer.step");
    *with_rng = resume && cc->load_rng && has_tensor(r, "rng.dropout_seed");
    if (resume && cc->load_optim && !*with_opt)
        tr_diag_add(k->d, TR_SEV_WARNING, "checkpoint.no_optimizer_state", NULL,
                    "checkpoint.load_optim", "set checkpoint.load_optim=false to silence this",
                    "%s holds no optimizer state (saved with save_optim false): the optimizer "
                    "starts fresh",
                    dir);
    opt_state os = {0};
    host_view params = {0};
    tr_ckpt_list l = {0};
    /* Fetched first: the alignment padding between tensors goes back to the device unchanged. */
    if (st == TR_OK)
        st = host_view_open(k, &params, k->env.model->params, (size_t)k->env.model->n_params, true);
    if (st == TR_OK) st = tr_ckpt_list_add_params(&l, k, "", params.host, 0, false);
    if (st == TR_OK && !resume) skip_new_adapters(k, &l, r);
    if (st == TR_OK && *with_opt) st = opt_state_alloc(k, &os);
    if (st == TR_OK && *with_opt) st = opt_state_views(k, &os, k->env.opt != NULL);
    if (st == TR_OK && *with_opt) st = add_opt_tensors(&l, k, &os, false);
    if (st == TR_OK) st = tr_ckpt_load_tensors(r, l.t, l.n, k->d);
    if (st == TR_OK && resume) st = read_scalars(k, r, *with_opt, *with_rng, scalars);
    double scaler[SCALER_STATE];
    bool with_scaler = *with_opt && has_scaler(k) && has_tensor(r, SCALER_TENSOR);
    if (st == TR_OK && with_scaler) {
        tr_ckpt_slice whole = {.ndim = 1, .shape = {SCALER_STATE}};
        st = tr_ckpt_read(r, SCALER_TENSOR, TR_CKPT_F64, &whole, scaler, k->d);
    }
    if (st == TR_OK && with_scaler) scaler_unpack(k->env.scaler, scaler);
    if (st == TR_OK) st = host_view_store(k, &params);
    if (st == TR_OK) tr_model_params_changed(k->env.model);
    if (st == TR_OK && *with_opt) st = opt_state_scatter(k, &os);
    host_view_close(&params);
    opt_state_free(k, &os);
    tr_ckpt_list_free(&l);
    tr_ckpt_close(r);
    return st;
}

/* Resuming LoRA: the checkpoint holds the adapters only, so the frozen base is read first from
 * checkpoint.pretrained_checkpoint (which validation requires for PEFT). */
static tr_status load_lora_base(tr_train_ckpt *k) {
    const char *base = k->env.c->checkpoint.pretrained_checkpoint;
    if (!base)
        return tr_diag_add(k->d, TR_SEV_ERROR, "checkpoint.peft_needs_pretrained", NULL,
                           "checkpoint.pretrained_checkpoint",
                           "set checkpoint.pretrained_checkpoint to the base model's checkpoint",
                           "a LoRA checkpoint holds only the adapters: resuming needs the base");
    if (tr_hf_is_model_dir(base)) return load_hf(k, base);
    char *dir = NULL;
    int64_t iteration = 0, scalars[S_COUNT] = {0};
    bool with_opt = false, with_rng = false;
    tr_status st = tr_ckpt_find(base, -1, &dir, &iteration, k->d);
    if (st == TR_OK) st = load_from(k, dir, SRC_WEIGHTS, scalars, &with_opt, &with_rng);
    if (st == TR_OK && k->rank == 0 && k->env.log)
        fprintf(k->env.log, "checkpoint: loaded base weights from %s (iteration %lld)\n", dir,
                (long long)iteration);
    free(dir);
    return st;
}

/* Megatron-Bridge's default name (torch_dist) means Trestle's sharded format here; the PyTorch
 * formats are refused before this by tr_runtime_check (runtime.ckpt_format). */
static tr_status check_format(tr_train_ckpt *k) {
    const tr_checkpoint_config *cc = &k->env.c->checkpoint;
    if (!cc->save && !cc->load && !cc->pretrained_checkpoint) return TR_OK;
    if (cc->ckpt_format == TR_CKPTFMT_TORCH_DIST && k->rank == 0 && k->env.log)
        fprintf(k->env.log, "checkpoint: ckpt_format torch_dist is read and written as "
                            "Trestle's sharded format (docs/checkpoints.md)\n");
    return TR_OK;
}

tr_status tr_train_ckpt_setup(tr_train_ckpt *k, const tr_train_ckpt_env *env, tr_diags *d) {
    memset(k, 0, sizeof *k);
    k->env = *env;
    k->d = d;
    k->last_saved = -1;
    k->world = k->tp = k->dp = k->pp = k->ep = k->edp = 1;
    if (env->comm) {
        k->world = tr_comm_group_size(env->comm, TR_COMM_WORLD);
        k->rank = tr_comm_group_rank(env->comm, TR_COMM_WORLD);
        k->tp = tr_comm_group_size(env->comm, TR_GROUP_TP);
        k->tp_rank = tr_comm_group_rank(env->comm, TR_GROUP_TP);
        k->dp = tr_comm_group_size(env->comm, TR_GROUP_DP_CP);
        k->dp_rank = tr_comm_group_rank(env->comm, TR_GROUP_DP_CP);
        k->pp = tr_comm_group_size(env->comm, TR_GROUP_PP);
        k->pp_rank = tr_comm_group_rank(env->comm, TR_GROUP_PP);
        if (env->model->spec.moe.ep_size > 1 || env->model->spec.moe.etp_size > 1) {
            k->ep = env->model->spec.moe.ep_size;
            k->edp = tr_comm_group_size(env->comm, TR_GROUP_EXPERT_DP);
            k->edp_rank = tr_comm_group_rank(env->comm, TR_GROUP_EXPERT_DP);
        }
    }
    TR_TRY(agree(k, check_format(k)));
    char *dir = NULL;
    int64_t iteration = 0;
    source src = SRC_NONE;
    tr_status st = agree(k, find_source(k, &dir, &iteration, &src));
    /* LoRA saves its trainable tensors only, whatever it starts from (a Hugging Face base too;
     * load_from narrows this for a resume's reads and it is set again after them). */
    k->trainable_only = env->model->spec.lora_rank > 0;
    if (st != TR_OK || src == SRC_NONE) {
        free(dir);
        return st;
    }
    int64_t scalars[S_COUNT] = {0};
    bool with_opt = false, with_rng = false;
    if (src == SRC_HF) {
        st = agree(k, load_hf(k, dir));
        free(dir);
        /* DoRA's magnitudes start as the loaded base's row norms. */
        return st == TR_OK ? agree(k, tr_model_init_dora_magnitudes(env->model)) : st;
    }
    if (src == SRC_RESUME && env->model->spec.lora_rank > 0) st = agree(k, load_lora_base(k));
    if (st == TR_OK) st = agree(k, load_from(k, dir, src, scalars, &with_opt, &with_rng));
    /* (A resume read its magnitudes after the base it loaded first.) */
    if (st == TR_OK && k->magnitudes_missing && src != SRC_RESUME)
        st = agree(k, tr_model_init_dora_magnitudes(env->model));
    k->trainable_only = env->model->spec.lora_rank > 0;
    if (st == TR_OK && src == SRC_RESUME) {
        k->resume = (tr_train_ckpt_pos){.iteration = scalars[S_ITERATION],
                                        .consumed_samples = scalars[S_CONSUMED],
                                        .scheduler_samples = scalars[S_SCHED],
                                        .skipped_iterations = scalars[S_SKIPPED]};
        k->last_saved = k->resume.iteration;
        if (with_opt) set_opt_step(k, scalars[S_OPT_STEP]);
        /* Dropout masks are drawn from this key and the (global) iteration and microbatch, so
         * the key is the whole RNG state. */
        if (with_rng) {
            uint64_t saved = (uint64_t)scalars[S_SEED];
            if (saved != k->env.model->dropout_seed)
                tr_diag_add(d, TR_SEV_WARNING, "checkpoint.rng_seed_changed", NULL, "rng.seed",
                            "keep rng.seed when resuming, or set checkpoint.load_rng=false",
                            "rng.seed differs from the run that saved the checkpoint: dropout "
                            "continues the checkpoint's stream");
            k->env.model->dropout_seed = saved;
        }
    }
    if (st == TR_OK && k->rank == 0 && k->env.log)
        fprintf(k->env.log, "checkpoint: loaded %s from %s (iteration %lld)%s\n",
                src == SRC_RESUME ? "model, optimizer and position" : "weights", dir,
                (long long)iteration,
                src == SRC_RESUME && !with_opt ? " without optimizer state" : "");
    free(dir);
    return st;
}

tr_status tr_train_ckpt_read_param(tr_ckpt_reader *r, const tr_model *m, int i, float *dst,
                                   tr_diags *d) {
    if (m->tp.size != 1 || i < 0 || i >= m->n_info) return TR_ERR_INVALID;
    /* One rank of one: every slice is its own, so the list is the parameter's logical pieces. */
    tr_train_ckpt k = {.env = {.model = (tr_model *)(uintptr_t)m},
                       .d = d,
                       .world = 1,
                       .tp = 1,
                       .dp = 1,
                       .pp = 1,
                       .ep = 1,
                       .edp = 1};
    const tr_param_info *p = &m->info[i];
    tr_ckpt_list l = {0};
    tr_status st = tr_ckpt_list_add_param(&l, &k, "", i, dst, 0, false);
    /* The slices tile the parameter but for the vocabulary padding: zeroed only then. */
    int64_t covered = 0;
    for (int j = 0; j < l.n; j++) covered += tr_ckpt_slice_volume(&l.t[j].slice);
    if (st == TR_OK && covered < p->numel) memset(dst, 0, (size_t)p->numel * sizeof *dst);
    if (st == TR_OK) st = tr_ckpt_load_tensors(r, l.t, l.n, d);
    tr_ckpt_list_free(&l);
    return st;
}
