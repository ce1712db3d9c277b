/* Data-parallel gradient synchronisation over a flat gradient buffer laid out by grad_buffer.h.
 *
 * Per bucket, one collective over the DP group: an all-reduce (plain DDP: every rank ends with
 * the whole reduced gradient) or a reduce-scatter into the rank's shard (distributed optimizer:
 * each rank ends with the reduced gradient of the slice it owns). With overlap_grad_reduce the
 * model calls tr_ddp_grad_ready() as each parameter's gradient becomes final during the last
 * microbatch's backward, and a bucket's collective starts, nonblocking, as soon as all of its
 * parameters are ready. tr_ddp_finish_grad_sync() starts whatever has not started and waits.
 *
 * Per iteration:
 *   tr_ddp_start_iteration(d, scale)          zero the gradients, reset readiness
 *   for each microbatch m of M:
 *     tr_ddp_set_last_microbatch(d, m == M-1) earlier microbatches only accumulate
 *     forward, backward (backward calls tr_ddp_grad_ready(d, p) after adding p's gradient)
 *   tr_ddp_finish_grad_sync(d)
 * Collectives start in bucket order on every rank, so ranks must report the same parameters.
 * Details: docs/distributed.md. */
#ifndef TR_DISTRIBUTED_DDP_H
#define TR_DISTRIBUTED_DDP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/diag.h"
#include "kernels/ops.h"
#include "runtime/comm/comm.h"
#include "runtime/distributed/grad_buffer.h"

typedef struct tr_ddp_options {
    int group;                  /* comm group: TR_GROUP_DP_CP (dense), TR_GROUP_EXPERT_DP */
    bool overlap_grad_reduce;   /* start buckets from tr_ddp_grad_ready */
    bool average_in_collective; /* apply the gradient scale after the sum instead of before */
    bool check_for_nan_in_grad; /* fail when a bucket's local gradient is not finite */
} tr_ddp_options;

/* The DDP settings of a validated config, for a run with dp_size ranks in the DP group:
 * layout options (bucket_size, or Megatron's default when overlapping; num_buckets is turned
 * into a bucket size from total_numel; sharding when the distributed optimizer is on) and the
 * collective options. Settings this runtime does not implement (several distributed-optimizer
 * instances) are diagnostics. */
tr_status tr_ddp_options_from_config(const tr_config *c, int dp_size, int64_t total_numel,
                                     tr_grad_layout_options *layout, tr_ddp_options *ddp,
                                     tr_diags *diags);

typedef struct tr_ddp {
    const tr_grad_layout *layout;
    float *grads; /* layout->numel elements, not owned */
    tr_comm *comm;
    const tr_ops *ops;
    tr_diags *diags;
    tr_ddp_options opt;
    int dp_size, dp_rank;

    float grad_scale;
    bool last_microbatch;
    uint8_t *param_ready;       /* per parameter, this iteration */
    int *bucket_waiting;        /* per bucket: parameters not yet ready */
    tr_comm_request **requests; /* per bucket: in flight, or NULL */
    bool *started;              /* per bucket: started this iteration */
    int next_bucket;            /* buckets start in order: the first not yet started */
    int started_early;          /* buckets started from grad_ready this iteration */
    int bad_bucket;             /* first bucket whose local gradient was not finite, or -1 */
    bool synced;                /* finish_grad_sync completed for this iteration */
    /* Where grads live (runtime/device/device.h), for the scalars read back; NULL: host memory. */
    struct tr_device *dev;
} tr_ddp;

/* grads must hold layout->numel floats and outlive d; so must layout, comm, ops and diags. The
 * comm group's size must equal layout->opt.dp_size ("ddp.group" otherwise). Starts the first
 * iteration with scale 1, which zeroes grads. */
tr_status tr_ddp_create(tr_ddp *d, const tr_grad_layout *layout, float *grads, tr_comm *comm,
                        const tr_ops *ops, const tr_ddp_options *opt, tr_diags *diags);
/* Frees d. Requests still in flight are waited for first. */
void tr_ddp_free(tr_ddp *d);

/* Zeroes the gradient buffer (padding included) and readiness. grad_scale multiplies the summed
 * gradients: 1/dp for Megatron's mean over DP ranks, 1 for a per-token loss whose division by
 * the global token count follows with tr_ddp_scale_grads. Refused while collectives are in
 * flight. */
tr_status tr_ddp_start_iteration(tr_ddp *d, float grad_scale);

/* Megatron's no_sync(): grad_ready is ignored unless the current microbatch is the last one. */
void tr_ddp_set_last_microbatch(tr_ddp *d, bool last);

/* Parameter param's gradient is final for this iteration. Reporting one twice, or an index out of
 * range, is a "ddp.grad_ready" diagnostic. Also lets in-flight collectives progress. */
tr_status tr_ddp_grad_ready(tr_ddp *d, int param);

/* Starts every bucket not yet started, waits for all. Afterwards the rank's reduced gradients
 * are final: the whole buffer (all-reduce) or the slices listed by tr_grad_owned (sharded). */
tr_status tr_ddp_finish_grad_sync(tr_ddp *d);

/* Multiplies the reduced gradients this rank owns by s (after finish). */
tr_status tr_ddp_scale_grads(tr_ddp *d, float s);

#endif
