/* Global gradient-norm clipping over data-parallel shards (and, later, tensor-parallel ranks).
 *
 * Every parameter element must enter the global sum of squares exactly once. Each rank sums the
 * squares of the gradient elements it owns (tr_grad_owned: its shard with the distributed
 * optimizer, everything without), skipping parameters the `counted` mask excludes (a
 * TP-replicated parameter is counted on TP rank 0 only), and the sums are all-reduced over the
 * group whose ranks together own every element exactly once (tr_grad_norm_group). Then, as
 * Megatron does, gradients are scaled by max_norm / (norm + 1e-6) when that is below 1. */
#ifndef TR_DISTRIBUTED_GRAD_CLIP_H
#define TR_DISTRIBUTED_GRAD_CLIP_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "runtime/comm/comm.h"
#include "runtime/distributed/grad_buffer.h"

/* Megatron's grad-stats group: with the distributed optimizer the ranks holding disjoint shards
 * (intra-dist-opt: DP x CP x TP x PP with one optimizer instance); without it every DP rank holds
 * the same full gradient, so only model-parallel ranks (tp-pp) hold different parts. */
int tr_grad_norm_group(bool distributed_optimizer);

/* counted[p] for every parameter: 0 for a TP-replicated parameter on a TP rank other than 0, else
 * 1. counted must hold layout->n_params bytes. Where counted is given, a counted parameter's
 * uncounted elements (tr_grad_param) are left out as well. */
void tr_grad_counted_mask(const tr_grad_layout *layout, int tp_rank, uint8_t *counted);

/* This rank's sum of squares over its owned, counted elements (counted NULL: all), accumulated in
 * double over ranges. */
tr_status tr_grad_local_sum_squares(const tr_grad_layout *layout, const tr_grad_owned *owned,
                                    const float *grads, const uint8_t *counted, const tr_ops *ops,
                                    double *sum_sq);

/* The global L2 norm (all-reduce of the local sums over `group`) in *norm; when max_norm > 0 and
 * the norm exceeds it, scales the owned gradients by max_norm / (norm + 1e-6). *clipped says
 * whether it did (may be NULL). A non-finite norm scales nothing and is returned as is: the
 * caller decides to skip the step. */
tr_status tr_grad_clip(tr_comm *comm, int group, const tr_grad_layout *layout,
                       const tr_grad_owned *owned, float *grads, const uint8_t *counted,
                       const tr_ops *ops, double max_norm, double *norm, bool *clipped);

/* The same on gradients in dev's memory with dev's ops: the local sums come back as scalars
 * and are reduced through device scratch (runtime/device/device.h). */
struct tr_device;
tr_status tr_grad_clip_on(struct tr_device *dev, tr_comm *comm, int group,
                          const tr_grad_layout *layout, const tr_grad_owned *owned, float *grads,
                          const uint8_t *counted, double max_norm, double *norm, bool *clipped);

/* The pieces of tr_grad_clip_on for several buffers (Megatron's ChainedOptimizer: dense and
 * expert gradients, each reduced over its own group): this buffer's squared norm, reduced over
 * `group`, added to *sum_sq; and the owned gradients times coeff. */
tr_status tr_grad_norm_sq_on(struct tr_device *dev, tr_comm *comm, int group,
                             const tr_grad_layout *layout, const tr_grad_owned *owned,
                             const float *grads, const uint8_t *counted, double *sum_sq);
tr_status tr_grad_scale_owned_on(struct tr_device *dev, const tr_grad_owned *owned, float *grads,
                                 float coeff);

#endif
