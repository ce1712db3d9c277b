/* AdamW / SGD on the slice of the flat buffers this rank owns, then the parameter all-gather.
 *
 * Sharded (distributed optimizer, ZeRO-1): each DP rank steps the elements of its slice of every
 * bucket and keeps optimizer state (exp_avg, exp_avg_sq or the momentum) for those only; after
 * the step every bucket's parameters are all-gathered over the DP group. With
 * overlap_param_gather the all-gathers are started and the forward waits per bucket with
 * tr_dist_opt_wait_param right before it reads that bucket's parameters.
 * Unsharded (plain DDP): every rank owns and steps every parameter; nothing is gathered.
 *
 * Parameters are fp32 on CPU, so the fp32 "main" parameters are the model parameters themselves
 * (as Megatron does for fp32 params); a half-precision model would keep an fp32 copy of the shard
 * here. Weight decay is skipped for parameters marked no_weight_decay. */
#ifndef TR_DISTRIBUTED_DIST_OPTIMIZER_H
#define TR_DISTRIBUTED_DIST_OPTIMIZER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/diag.h"
#include "kernels/ops.h"
#include "runtime/comm/comm.h"
#include "runtime/distributed/grad_buffer.h"

typedef enum tr_dist_opt_kind { TR_DIST_OPT_ADAMW = 0, TR_DIST_OPT_SGD } tr_dist_opt_kind;

typedef struct tr_dist_opt_options {
    tr_dist_opt_kind kind;
    float beta1, beta2, eps; /* AdamW */
    float momentum;          /* SGD */
    bool nesterov;
    /* 0, or the tr_lowp the moments and the main parameters are stored in (rounded after each
     * update: the precision-aware optimizer, runtime/optimizer/optimizer.h) */
    int exp_avg_lowp, exp_avg_sq_lowp, main_params_lowp;
    int group;                 /* the DP group the layout was built for */
    bool overlap_param_gather; /* leave the all-gathers in flight after the step */
} tr_dist_opt_options;

typedef struct tr_dist_opt {
    const tr_grad_layout *layout;
    float *params, *grads; /* layout->numel each, not owned */
    tr_comm *comm;
    const tr_ops *ops;
    tr_diags *diags;
    tr_dist_opt_options opt;
    tr_grad_owned owned;
    float *m, *v;              /* owned.state_numel each (v unused by SGD) */
    int64_t step;              /* steps taken: drives Adam's bias correction */
    tr_comm_request **gathers; /* per bucket, in flight or NULL */
    struct tr_device *dev;     /* where m and v live (tr_dist_opt_use_device); NULL: host */
} tr_dist_opt;

/* Layout, buffers, comm, ops and diags must outlive o. The comm group's size must equal the
 * layout's dp_size. State starts at zero. */
tr_status tr_dist_opt_create(tr_dist_opt *o, const tr_grad_layout *layout, float *params,
                             float *grads, tr_comm *comm, const tr_ops *ops,
                             const tr_dist_opt_options *opt, tr_diags *diags);
/* Frees o; all-gathers still in flight are waited for first. */
void tr_dist_opt_free(tr_dist_opt *o);
/* Moves the (still zero) state to dev's memory and the step to dev's ops; call right after
 * tr_dist_opt_create, when params and grads are dev's buffers (runtime/distributed/
 * dist_opt_device.c). */
tr_status tr_dist_opt_use_device(tr_dist_opt *o, struct tr_device *dev);
void tr_dist_opt_free_state_on_device(tr_dist_opt *o);

/* One update of the owned elements with learning rate lr and weight decay wd, then the parameter
 * all-gather (sharded): blocking, or left in flight with overlap_param_gather. Waits first for
 * gathers of the previous step still in flight. The gradients must be final (after
 * tr_ddp_finish_grad_sync and clipping). */
tr_status tr_dist_opt_step(tr_dist_opt *o, float lr, float wd);

/* Waits for bucket b's parameter all-gather (no-op when none is in flight). The forward calls it
 * before reading any parameter of bucket b; buckets are used in descending order in forward. */
tr_status tr_dist_opt_wait_param(tr_dist_opt *o, int bucket);
tr_status tr_dist_opt_wait_all_params(tr_dist_opt *o);

#endif
