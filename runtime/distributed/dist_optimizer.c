/* Optimizer step over owned ranges + per-bucket parameter all-gather. */
#include "runtime/distributed/dist_optimizer.h"

#include <stdlib.h>
#include <string.h>

tr_status tr_dist_opt_create(tr_dist_opt *o, const tr_grad_layout *layout, float *params,
                             float *grads, tr_comm *comm, const tr_ops *ops,
                             const tr_dist_opt_options *opt, tr_diags *diags) {
    memset(o, 0, sizeof *o);
    if (!layout || !params || !grads || !comm || !ops || !opt) return TR_ERR_INVALID;
    int size = tr_comm_group_size(comm, opt->group), rank = tr_comm_group_rank(comm, opt->group);
    if (size != layout->opt.dp_size || rank < 0)
        return tr_diag_add(diags, TR_SEV_ERROR, "ddp.group", NULL, "optimizer",
                           "build the layout with the size of the group that shards the optimizer",
                           "optimizer layout is for %d data-parallel ranks but group %s has %d on "
                           "this rank",
                           layout->opt.dp_size, tr_comm_group_name(opt->group), size);
    if (opt->overlap_param_gather && !layout->opt.sharded)
        return tr_diag_add(diags, TR_SEV_ERROR, "ddp.overlap_param_gather", NULL,
                           "ddp.overlap_param_gather,ddp.use_distributed_optimizer",
                           "set ddp.use_distributed_optimizer=true or "
                           "ddp.overlap_param_gather=false",
                           "parameter all-gather overlap needs the distributed optimizer");
    o->layout = layout;
    o->params = params;
    o->grads = grads;
    o->comm = comm;
    o->ops = ops;
    o->diags = diags;
    o->opt = *opt;
    tr_status st = tr_grad_owned_build(&o->owned, layout, layout->opt.sharded ? rank : 0);
    if (st != TR_OK) return st;
    size_t n = (size_t)(o->owned.state_numel ? o->owned.state_numel : 1);
    o->m = calloc(n, sizeof *o->m);
    o->v = calloc(n, sizeof *o->v);
    o->gathers = calloc((size_t)layout->n_buckets, sizeof *o->gathers);
    if (!o->m || !o->v || !o->gathers) {
        tr_dist_opt_free(o);
        return TR_ERR_NOMEM;
    }
    return TR_OK;
}

void tr_dist_opt_free(tr_dist_opt *o) {
    if (!o) return;
    if (o->gathers) tr_dist_opt_wait_all_params(o);
    tr_grad_owned_free(&o->owned);
    if (o->dev) {
        tr_dist_opt_free_state_on_device(o);
    } else {
        free(o->m);
        free(o->v);
    }
    free(o->gathers);
    memset(o, 0, sizeof *o);
}

static tr_status step_range(tr_dist_opt *o, const tr_grad_range *r, float lr, float wd,
                            int64_t step) {
    const tr_grad_slot *s = &o->layout->params[r->param];
    if (s->param.frozen) return TR_OK;
    float decay = s->param.no_weight_decay ? 0.0f : wd;
    float *p = o->params + r->offset, *m = o->m + r->state_offset, *v = o->v + r->state_offset;
    const float *g = o->grads + r->offset;
    if (o->opt.kind == TR_DIST_OPT_SGD) {
        tr_sgd_params sp = {.lr = lr,
                            .momentum = o->opt.momentum,
                            .weight_decay = decay,
                            .nesterov = o->opt.nesterov};
        return o->ops->sgd(p, g, m, r->numel, &sp);
    }
    tr_adamw_params ap = {.lr = lr,
                          .beta1 = o->opt.beta1,
                          .beta2 = o->opt.beta2,
                          .eps = o->opt.eps,
                          .weight_decay = decay,
                          .step = step};
    TR_TRY(o->ops->adamw(p, g, m, v, r->numel, &ap));
    const tr_dist_opt_options *x = &o->opt;
    if (x->exp_avg_lowp) TR_TRY(o->ops->round_lowp((tr_lowp)x->exp_avg_lowp, m, r->numel));
    if (x->exp_avg_sq_lowp) TR_TRY(o->ops->round_lowp((tr_lowp)x->exp_avg_sq_lowp, v, r->numel));
    if (x->main_params_lowp) TR_TRY(o->ops->round_lowp((tr_lowp)x->main_params_lowp, p, r->numel));
    return TR_OK;
}

static tr_status start_gather(tr_dist_opt *o, int b) {
    const tr_grad_bucket *bk = &o->layout->buckets[b];
    return tr_comm_iall_gather(o->comm, o->opt.group, NULL, o->params + bk->offset,
                               (size_t)bk->shard_numel, TR_COMM_F32, &o->gathers[b]);
}

tr_status tr_dist_opt_step(tr_dist_opt *o, float lr, float wd) {
    TR_TRY(tr_dist_opt_wait_all_params(o));
    int64_t step = o->step + 1;
    for (int i = 0; i < o->owned.n_ranges; i++)
        TR_TRY(step_range(o, &o->owned.ranges[i], lr, wd, step));
    o->step = step;
    if (!o->layout->opt.sharded) return TR_OK;
    /* Bucket order puts the last layers first; the forward needs the first layers first, so the
     * gathers are issued from the last bucket down. */
    for (int b = o->layout->n_buckets - 1; b >= 0; b--) TR_TRY(start_gather(o, b));
    if (o->opt.overlap_param_gather) return TR_OK;
    return tr_dist_opt_wait_all_params(o);
}

tr_status tr_dist_opt_wait_param(tr_dist_opt *o, int bucket) {
    if (bucket < 0 || bucket >= o->layout->n_buckets)
        return tr_diag_add(o->diags, TR_SEV_ERROR, "ddp.wait_param", NULL, "ddp", NULL,
                           "parameter wait for bucket %d, but the layout has %d buckets", bucket,
                           o->layout->n_buckets);
    return tr_comm_wait(o->comm, &o->gathers[bucket]);
}

tr_status tr_dist_opt_wait_all_params(tr_dist_opt *o) {
    for (int b = o->layout->n_buckets - 1; b >= 0; b--)
        if (o->gathers[b]) TR_TRY(tr_comm_wait(o->comm, &o->gathers[b]));
    return TR_OK;
}
