/* Bucketed gradient reduction over the DP group, optionally overlapped with backward. */
#include "runtime/distributed/ddp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device/device.h"

tr_status tr_ddp_create(tr_ddp *d, const tr_grad_layout *layout, float *grads, tr_comm *comm,
                        const tr_ops *ops, const tr_ddp_options *opt, tr_diags *diags) {
    memset(d, 0, sizeof *d);
    if (!layout || !grads || !comm || !ops || !opt) return TR_ERR_INVALID;
    int size = tr_comm_group_size(comm, opt->group), rank = tr_comm_group_rank(comm, opt->group);
    if (size != layout->opt.dp_size || rank < 0)
        return tr_diag_add(diags, TR_SEV_ERROR, "ddp.group", NULL, "ddp",
                           "build the layout with the size of the group the gradients are reduced "
                           "over",
                           "gradient layout is for %d data-parallel ranks but group %s has %d on "
                           "this rank",
                           layout->opt.dp_size, tr_comm_group_name(opt->group), size);
    d->layout = layout;
    d->grads = grads;
    d->comm = comm;
    d->ops = ops;
    d->diags = diags;
    d->opt = *opt;
    d->dp_size = size;
    d->dp_rank = rank;
    d->param_ready = calloc((size_t)layout->n_params, 1);
    d->bucket_waiting = calloc((size_t)layout->n_buckets, sizeof *d->bucket_waiting);
    d->requests = calloc((size_t)layout->n_buckets, sizeof *d->requests);
    d->started = calloc((size_t)layout->n_buckets, sizeof *d->started);
    if (!d->param_ready || !d->bucket_waiting || !d->requests || !d->started) {
        tr_ddp_free(d);
        return TR_ERR_NOMEM;
    }
    return tr_ddp_start_iteration(d, 1.0f);
}

static bool in_flight(const tr_ddp *d) {
    for (int b = 0; b < d->layout->n_buckets; b++)
        if (d->requests[b]) return true;
    return false;
}

void tr_ddp_free(tr_ddp *d) {
    if (!d) return;
    if (d->requests && d->comm)
        for (int b = 0; d->layout && b < d->layout->n_buckets; b++)
            if (d->requests[b]) tr_comm_wait(d->comm, &d->requests[b]);
    free(d->param_ready);
    free(d->bucket_waiting);
    free(d->requests);
    free(d->started);
    memset(d, 0, sizeof *d);
}

tr_status tr_ddp_start_iteration(tr_ddp *d, float grad_scale) {
    if (in_flight(d))
        return tr_diag_add(d->diags, TR_SEV_ERROR, "ddp.sequence", NULL, "ddp",
                           "call tr_ddp_finish_grad_sync before starting the next iteration",
                           "gradient collectives of the previous iteration are still in flight");
    const tr_grad_layout *L = d->layout;
    TR_TRY(d->ops->fill(d->grads, L->numel, 0.0f));
    memset(d->param_ready, 0, (size_t)L->n_params);
    for (int b = 0; b < L->n_buckets; b++) {
        d->bucket_waiting[b] = L->buckets[b].last_param - L->buckets[b].first_param + 1;
        d->started[b] = false;
    }
    d->grad_scale = grad_scale;
    d->last_microbatch = true;
    d->next_bucket = 0;
    d->started_early = 0;
    d->bad_bucket = -1;
    d->synced = false;
    return TR_OK;
}

void tr_ddp_set_last_microbatch(tr_ddp *d, bool last) {
    d->last_microbatch = last;
}

/* The elements of bucket b whose reduced values this rank keeps. */
static void owned_region(const tr_ddp *d, int b, int64_t *off, int64_t *n) {
    *off = tr_grad_bucket_shard_offset(d->layout, b, d->dp_rank);
    *n = d->layout->buckets[b].shard_numel;
}

static void note_nonfinite(tr_ddp *d, int b) {
    const tr_grad_bucket *bk = &d->layout->buckets[b];
    float ss = 0.0f;
    tr_status st = d->dev ? tr_device_sum_squares(d->dev, d->grads + bk->offset, bk->numel, &ss)
                          : d->ops->sum_squares(&ss, d->grads + bk->offset, bk->numel);
    if (st == TR_OK && isfinite(ss)) return;
    if (d->bad_bucket < 0) d->bad_bucket = b;
}

static tr_status start_bucket(tr_ddp *d, int b) {
    const tr_grad_bucket *bk = &d->layout->buckets[b];
    float *data = d->grads + bk->offset;
    if (d->opt.check_for_nan_in_grad) note_nonfinite(d, b);
    if (!d->opt.average_in_collective && d->grad_scale != 1.0f)
        TR_TRY(d->ops->scale(data, bk->numel, d->grad_scale));
    d->started[b] = true;
    if (d->layout->opt.sharded)
        return tr_comm_ireduce_scatter(d->comm, d->opt.group, NULL, data, (size_t)bk->shard_numel,
                                       TR_COMM_F32, TR_COMM_SUM, &d->requests[b]);
    return tr_comm_iall_reduce(d->comm, d->opt.group, NULL, data, (size_t)bk->numel, TR_COMM_F32,
                               TR_COMM_SUM, &d->requests[b]);
}

/* Starts ready buckets in bucket order, so every rank issues its collectives in the same order
 * even if it reports parameters in a different one. */
static tr_status start_ready_buckets(tr_ddp *d) {
    while (d->next_bucket < d->layout->n_buckets && d->bucket_waiting[d->next_bucket] == 0) {
        TR_TRY(start_bucket(d, d->next_bucket));
        d->next_bucket++;
        d->started_early++;
    }
    return TR_OK;
}

static tr_status progress(tr_ddp *d) {
    for (int b = 0; b < d->next_bucket; b++) {
        bool done = false;
        if (d->requests[b]) TR_TRY(tr_comm_test(d->comm, &d->requests[b], &done));
    }
    return TR_OK;
}

tr_status tr_ddp_grad_ready(tr_ddp *d, int param) {
    if (!d->last_microbatch) return TR_OK;
    const tr_grad_layout *L = d->layout;
    if (param < 0 || param >= L->n_params)
        return tr_diag_add(d->diags, TR_SEV_ERROR, "ddp.grad_ready", NULL, "ddp", NULL,
                           "gradient reported ready for parameter %d, but the layout has %d", param,
                           L->n_params);
    if (d->param_ready[param] || d->synced)
        return tr_diag_add(d->diags, TR_SEV_ERROR, "ddp.grad_ready", NULL, "ddp",
                           "report each parameter once per iteration, during the last "
                           "microbatch's backward, before tr_ddp_finish_grad_sync",
                           "gradient of '%s' reported ready %s", L->params[param].param.name,
                           d->param_ready[param] ? "twice in one iteration"
                                                 : "after the gradients were synchronised");
    d->param_ready[param] = 1;
    d->bucket_waiting[L->params[param].bucket]--;
    if (!d->opt.overlap_grad_reduce) return TR_OK;
    TR_TRY(start_ready_buckets(d));
    return progress(d);
}

tr_status tr_ddp_finish_grad_sync(tr_ddp *d) {
    const tr_grad_layout *L = d->layout;
    if (d->synced) return TR_OK;
    while (d->next_bucket < L->n_buckets) TR_TRY(start_bucket(d, d->next_bucket++));
    for (int b = 0; b < L->n_buckets; b++) {
        TR_TRY(tr_comm_wait(d->comm, &d->requests[b]));
        if (d->opt.average_in_collective && d->grad_scale != 1.0f) {
            int64_t off, n;
            owned_region(d, b, &off, &n);
            TR_TRY(d->ops->scale(d->grads + off, n, d->grad_scale));
        }
    }
    d->synced = true;
    if (d->bad_bucket >= 0) {
        const tr_grad_bucket *bk = &L->buckets[d->bad_bucket];
        return tr_diag_add(d->diags, TR_SEV_ERROR, "ddp.nan_in_grad", NULL,
                           "ddp.check_for_nan_in_grad",
                           "lower the learning rate or find the operation that overflows; "
                           "ddp.check_for_nan_in_grad=false skips this check",
                           "data-parallel rank %d: gradient of bucket %d (parameters '%s' .. "
                           "'%s') is NaN or infinite before reduction",
                           d->dp_rank, d->bad_bucket, L->params[bk->first_param].param.name,
                           L->params[bk->last_param].param.name);
    }
    return TR_OK;
}

tr_status tr_ddp_scale_grads(tr_ddp *d, float s) {
    if (!d->synced)
        return tr_diag_add(d->diags, TR_SEV_ERROR, "ddp.sequence", NULL, "ddp",
                           "call tr_ddp_finish_grad_sync first",
                           "gradients scaled before their synchronisation finished");
    for (int b = 0; b < d->layout->n_buckets; b++) {
        int64_t off, n;
        owned_region(d, b, &off, &n);
        TR_TRY(d->ops->scale(d->grads + off, n, s));
    }
    return TR_OK;
}
