/* Data parallelism in the training loop: the model's parameters placed in the flat layout of
 * runtime/distributed (buckets, shards), gradient synchronisation driven by the model's
 * per-parameter events (overlap_grad_reduce), the distributed optimizer or a replicated one,
 * global clipping, and the parameter all-gather the next forward waits on per bucket
 * (overlap_param_gather). The wiring follows docs/distributed.md; the loop is in train.c. */
#ifndef TR_RUNTIME_TRAIN_DP_H
#define TR_RUNTIME_TRAIN_DP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/diag.h"
#include "runtime/comm/comm.h"
#include "runtime/distributed/ddp.h"
#include "runtime/distributed/dist_optimizer.h"
#include "runtime/distributed/grad_buffer.h"
#include "runtime/model/model.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/train/precision.h"

/* One flat gradient buffer with its reduction and optimizer (Megatron's buffers): the dense
 * parameters, reduced over DP x CP, or with expert parallelism the routed experts', reduced over
 * the expert-data-parallel group (world / (PP x EP x ETP), which absorbs CP and TP). Its
 * elements sit at [base, base + layout.numel) of the model's flat buffers. */
typedef struct tr_train_dp_buf {
    int group, size;
    int norm_group; /* the ranks whose owned elements together count each one once */
    int64_t base;
    int *param; /* per layout index: the model's parameter index */
    tr_grad_layout layout;
    tr_ddp ddp;
    tr_dist_opt opt;
    uint8_t *counted; /* per layout index: enters the global grad norm on this rank */
    bool have_layout, have_ddp, have_opt;
} tr_train_dp_buf;

typedef struct tr_train_dp {
    tr_comm *comm;         /* not owned */
    const tr_model *model; /* not owned */
    int group;             /* the DP group (dp x cp) */
    int size, rank;
    bool sharded, overlap_param_gather;
    /* bufs[0] the dense parameters; bufs[1] the experts' when the model has expert parameters
     * (tr_param_info.expert, EP > 1); n_bufs 1 or 2. */
    tr_train_dp_buf bufs[2];
    int n_bufs;
    /* Other ranks hold expert parameters and this one none (a pipeline stage of dense layers
     * under EP): it still joins the experts' grad-stats collectives, with nothing to add. */
    bool experts_elsewhere;
    int *buf_of, *index_of; /* per model parameter: its buffer and its index in that layout */
    uint8_t *kv_summed;     /* per parameter: its key-value copies summed this iteration */
} tr_train_dp;

/* Builds the layout for m's parameters, moves them there (values kept) and installs m's hooks.
 * Unsupported DDP settings are diagnostics. */
tr_status tr_train_dp_setup(tr_train_dp *t, const tr_config *c, tr_comm *comm, tr_model *m,
                            const tr_optimizer_spec *os, tr_diags *d);
void tr_train_dp_free(tr_train_dp *t);

/* After the last microbatch's backward: the key-value gradient copies (TP above the query
 * groups) whose readiness the model never reported are summed (tr_model_reduce_kv_grad), then
 * the data-parallel reduction is finished (tr_ddp_finish_grad_sync). */
tr_status tr_train_dp_finish_grads(tr_train_dp *t);

/* Every buffer's tr_ddp_start_iteration (scale multiplies the summed gradients of both: Megatron
 * scales the experts' by 1/DP of the dense group too), tr_ddp_set_last_microbatch and
 * tr_ddp_scale_grads; and the buckets started during backward. */
tr_status tr_train_dp_start_iteration(tr_train_dp *t, float grad_scale);
void tr_train_dp_set_last_microbatch(tr_train_dp *t, bool last);
tr_status tr_train_dp_scale_grads(tr_train_dp *t, float s);
int tr_train_dp_started_early(const tr_train_dp *t);

/* Element-wise sum over the DP group of n doubles, in place (loss and token counts). */
tr_status tr_train_dp_sum(tr_train_dp *t, double *v, int n);
/* The same over TP x DP x CP, Megatron's group for the MoE token counts (the expert bias's and
 * the logged tokens per expert): under sequence parallelism each TP rank routes its own chunk. */
tr_status tr_train_dp_sum_tokens(tr_train_dp *t, double *v, int n);

/* After finish, before update (mixed precision, runtime/train/precision.h): this rank's owned
 * gradients rounded and/or unscaled, and the inf/NaN verdict of the whole world: the flag is
 * all-reduced (MAX) over the grad-norm group, whose ranks together hold every gradient, and
 * every DP rank of that group reduced the same values, so all ranks skip together. */
tr_status tr_train_dp_check_grads(tr_train_dp *t, const tr_train_precision *p, bool *found_inf);

/* After finish: the global norm (clipping as configured), and the step unless skipped. With an
 * expert buffer the norm is Megatron's ChainedOptimizer's: each buffer's squared norm reduced
 * over its own group, summed. */
tr_status tr_train_dp_update(tr_train_dp *t, const tr_optimizer_spec *os, double lr, double wd,
                             double *grad_norm, bool *skipped);

/* The L2 norm of the whole model's parameters (logger.log_params_norm): each rank's stages and
 * TP shards, the tied copy and TP-replicated tensors counted once, summed over tp-pp. */
tr_status tr_train_dp_params_norm(tr_train_dp *t, double *norm);

/* Waits for parameter all-gathers still in flight (before reading all parameters at once). */
tr_status tr_train_dp_params_ready(tr_train_dp *t);

#endif
