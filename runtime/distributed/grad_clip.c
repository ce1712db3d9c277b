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

static tr_status sum_squares(tr_device *dev, const float *x, int64_t n, const tr_ops *ops,
                             double *acc) {
    if (n <= 0) return TR_OK;
    float part = 0.0f;
    if (dev)
        TR_TRY(tr_device_sum_squares(dev, x, n, &part));
    else
        TR_TRY(ops->sum_squares(&part, x, n));
    *acc += (double)part;
    return TR_OK;
}

/* dev NULL: host buffers and the caller's ops (the original interface). A range that overlaps
 * its parameter's uncounted elements is summed around them. */
static tr_status local_sum_squares(tr_device *dev, const tr_grad_layout *layout,
                                   const tr_grad_owned *owned, const float *grads,
                                   const uint8_t *counted, const tr_ops *ops, double *sum_sq) {
    double s = 0.0;
    for (int i = 0; i < owned->n_ranges; i++) {
        const tr_grad_range *r = &owned->ranges[i];
        if (counted && !counted[r->param]) continue;
        int64_t lo = r->offset, hi = r->offset + r->numel, skip_lo = 0, skip_hi = 0;
        if (counted && layout) {
            const tr_grad_slot *slot = &layout->params[r->param];
            skip_lo = slot->offset + slot->param.uncounted_off;
            skip_hi = skip_lo + slot->param.uncounted_numel;
        }
        if (skip_hi <= skip_lo || skip_hi <= lo || skip_lo >= hi) {
            TR_TRY(sum_squares(dev, grads + lo, hi - lo, ops, &s));
            continue;
        }
        if (skip_lo > lo) TR_TRY(sum_squares(dev, grads + lo, skip_lo - lo, ops, &s));
        if (skip_hi < hi) TR_TRY(sum_squares(dev, grads + skip_hi, hi - skip_hi, ops, &s));
    }
    *sum_sq = s;
    return TR_OK;
}

tr_status tr_grad_local_sum_squares(const tr_grad_layout *layout, const tr_grad_owned *owned,
                                    const float *grads, const uint8_t *counted, const tr_ops *ops,
                                    double *sum_sq) {
    return local_sum_squares(NULL, layout, owned, grads, counted, ops, sum_sq);
}

static tr_status norm_sq(tr_device *dev, tr_comm *comm, int group, const tr_grad_layout *layout,
                         const tr_grad_owned *owned, const float *grads, const uint8_t *counted,
                         const tr_ops *ops, double *sum_sq) {
    double sq = 0.0;
    TR_TRY(local_sum_squares(dev, layout, owned, grads, counted, ops, &sq));
    if (dev)
        TR_TRY(tr_device_all_reduce_host(dev, comm, group, &sq, 1, TR_COMM_F64, TR_COMM_SUM));
    else
        TR_TRY(tr_comm_all_reduce_inplace(comm, group, &sq, 1, TR_COMM_F64, TR_COMM_SUM));
    *sum_sq += sq;
    return TR_OK;
}

static tr_status scale_owned(const tr_ops *ops, const tr_grad_owned *owned, float *grads,
                             float coeff) {
    for (int i = 0; i < owned->n_ranges; i++) {
        const tr_grad_range *r = &owned->ranges[i];
        TR_TRY(ops->scale(grads + r->offset, r->numel, coeff));
    }
    return TR_OK;
}

static tr_status clip(tr_device *dev, tr_comm *comm, int group, const tr_grad_layout *layout,
                      const tr_grad_owned *owned, float *grads, const uint8_t *counted,
                      const tr_ops *ops, double max_norm, double *norm, bool *clipped) {
    double sq = 0.0;
    if (clipped) *clipped = false;
    TR_TRY(norm_sq(dev, comm, group, layout, owned, grads, counted, ops, &sq));
    *norm = sqrt(sq);
    if (!(max_norm > 0.0) || !isfinite(*norm)) return TR_OK;
    double coeff = max_norm / (*norm + 1e-6);
    if (coeff >= 1.0) return TR_OK;
    TR_TRY(scale_owned(ops, owned, grads, (float)coeff));
    if (clipped) *clipped = true;
    return TR_OK;
}

tr_status tr_grad_norm_sq_on(tr_device *dev, tr_comm *comm, int group, const tr_grad_layout *layout,
                             const tr_grad_owned *owned, const float *grads, const uint8_t *counted,
                             double *sum_sq) {
    return norm_sq(dev, comm, group, layout, owned, grads, counted, tr_device_ops(dev), sum_sq);
}

tr_status tr_grad_scale_owned_on(tr_device *dev, const tr_grad_owned *owned, float *grads,
                                 float coeff) {
    return scale_owned(tr_device_ops(dev), owned, grads, coeff);
}

tr_status tr_grad_clip(tr_comm *comm, int group, const tr_grad_layout *layout,
                       const tr_grad_owned *owned, float *grads, const uint8_t *counted,
                       const tr_ops *ops, double max_norm, double *norm, bool *clipped) {
    return clip(NULL, comm, group, layout, owned, grads, counted, ops, max_norm, norm, clipped);
}

tr_status tr_grad_clip_on(tr_device *dev, tr_comm *comm, int group, const tr_grad_layout *layout,
                          const tr_grad_owned *owned, float *grads, const uint8_t *counted,
                          double max_norm, double *norm, bool *clipped) {
    return clip(dev, comm, group, layout, owned, grads, counted, tr_device_ops(dev), max_norm, norm,
                clipped);
}
