/* Global grad-norm over owned shards and Megatron's clipping rule. */
#include "runtime/distributed/grad_clip.h"

#include <math.h>

#include "runtime/device/device.h"

int tr_grad_norm_group(bool distributed_optimizer) {
    return distributed_optimizer ? TR_GROUP_INTRA_DIST_OPT : TR_GROUP_TP_PP;
}

void tr_grad_counted_mask(const tr_grad_layout *layout, int tp_rank, uint8_t *counted) {
    for (int p = 0; p < layout->n_params; p++)
        counted[p] = !layout->params[p].param.tp_replicated || tp_rank == 0;
}

/* dev NULL: host buffers and the caller's ops (the original interface). */
static tr_status local_sum_squares(tr_device *dev, const tr_grad_owned *owned, const float *grads,
                                   const uint8_t *counted, const tr_ops *ops, double *sum_sq) {
    double s = 0.0;
    for (int i = 0; i < owned->n_ranges; i++) {
        const tr_grad_range *r = &owned->ranges[i];
        if (counted && !counted[r->param]) continue;
        float part = 0.0f;
        if (dev)
            TR_TRY(tr_device_sum_squares(dev, grads + r->offset, r->numel, &part));
        else
            TR_TRY(ops->sum_squares(&part, grads + r->offset, r->numel));
        s += (double)part;
    }
    *sum_sq = s;
    return TR_OK;
}

tr_status tr_grad_local_sum_squares(const tr_grad_layout *layout, const tr_grad_owned *owned,
                                    const float *grads, const uint8_t *counted, const tr_ops *ops,
                                    double *sum_sq) {
    (void)layout;
    return local_sum_squares(NULL, owned, grads, counted, ops, sum_sq);
}

static tr_status clip(tr_device *dev, tr_comm *comm, int group, const tr_grad_owned *owned,
                      float *grads, const uint8_t *counted, const tr_ops *ops, double max_norm,
                      double *norm, bool *clipped) {
    double sq = 0.0;
    if (clipped) *clipped = false;
    TR_TRY(local_sum_squares(dev, owned, grads, counted, ops, &sq));
    if (dev)
        TR_TRY(tr_device_all_reduce_host(dev, comm, group, &sq, 1, TR_COMM_F64, TR_COMM_SUM));
    else
        TR_TRY(tr_comm_all_reduce_inplace(comm, group, &sq, 1, TR_COMM_F64, TR_COMM_SUM));
    *norm = sqrt(sq);
    if (!(max_norm > 0.0) || !isfinite(*norm)) return TR_OK;
    double coeff = max_norm / (*norm + 1e-6);
    if (coeff >= 1.0) return TR_OK;
    for (int i = 0; i < owned->n_ranges; i++) {
        const tr_grad_range *r = &owned->ranges[i];
        TR_TRY(ops->scale(grads + r->offset, r->numel, (float)coeff));
    }
    if (clipped) *clipped = true;
    return TR_OK;
}

tr_status tr_grad_clip(tr_comm *comm, int group, const tr_grad_layout *layout,
                       const tr_grad_owned *owned, float *grads, const uint8_t *counted,
                       const tr_ops *ops, double max_norm, double *norm, bool *clipped) {
    (void)layout;
    return clip(NULL, comm, group, owned, grads, counted, ops, max_norm, norm, clipped);
}

tr_status tr_grad_clip_on(tr_device *dev, tr_comm *comm, int group, const tr_grad_layout *layout,
                          const tr_grad_owned *owned, float *grads, const uint8_t *counted,
                          double max_norm, double *norm, bool *clipped) {
    (void)layout;
    return clip(dev, comm, group, owned, grads, counted, tr_device_ops(dev), max_norm, norm,
                clipped);
}
