/* Internal to the files of runtime/train/: the state of one training run and the pieces of the
 * loop (train.c) that live in their own files: setup and teardown (setup.c), one iteration's
 * forward, backward and optimizer step (step.c), evaluation (eval.c). */
#ifndef TR_RUNTIME_TRAINER_H
#define TR_RUNTIME_TRAINER_H

#include "runtime/context_parallel/cp.h"
#include "runtime/data/train_data.h"
#include "runtime/device/device.h"
#include "runtime/model/loss_buffer.h"
#include "runtime/model/model.h"
#include "runtime/optimizer/lr_schedule.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/pipeline/executor.h"
#include "runtime/train/checkpointing.h"
#include "runtime/train/dp.h"
#include "runtime/train/log.h"
#include "runtime/train/precision.h"
#include "runtime/train/train.h"

typedef struct trainer {
    const tr_config *c;
    const tr_train_opts *o;
    tr_diags *d;
    tr_device *dev; /* o->device, or the host */
    tr_model model;
    tr_optimizer_spec opt_spec;
    tr_optimizer opt; /* the plain single-rank path */
    tr_train_dp dp;   /* the parallel path: DP, TP and/or PP over o->comm */
    tr_pp_exec pp;    /* pipeline parallel: the executor (have_pp) */
    bool have_pp;
    int64_t cur_iteration, cur_consumed; /* the iteration the executor's loads belong to */
    int64_t *pp_idx;                     /* [mbs]: the executor's sample indices */
    int eval_split;                      /* evaluation under PP: the split, the first global */
    int64_t eval_first;                  /* microbatch of the batch, and this rank's share of */
    int64_t eval_stride, eval_offset;    /* it (global microbatch first + mb*stride + offset) */
    bool distributed;                    /* the parallel path is in use */
    int dp_size, dp_rank;                /* the DP x CP group the gradients are reduced over */
    /* Context parallelism: this rank's place in the CP group, the data-parallel rank the
     * sampler reads for, the ring, whole sequences before the split (full_seq tokens). */
    int cp_size, cp_rank, data_dp_size, data_dp_rank, full_seq;
    tr_cp cp;
    int32_t *full_ids, *full_tgt, *full_ds, *full_pos, *cp_index;
    /* The loaded microbatch's trained tokens on this rank over those of the whole microbatch:
     * its loss (the mean over this rank's tokens) times this, summed over the CP group, is the
     * whole microbatch's mean (1 without CP). */
    double cp_weight;
    tr_lr_schedule sched;
    tr_token_dataset data;
    tr_train_log log;
    int mbs, nmb, gbs, seq;
    int32_t *sample, *ids, *tgt;
    int32_t *doc_start, *pos; /* fine-tuning data: the microbatch's documents and positions */
    int eod_mask;
    int per_token_loss; /* model.calculate_per_token_loss */
    int64_t buckets_started_early;
    tr_train_ckpt ckpt;      /* checkpoint load (setup) and saves (iteration boundaries) */
    tr_train_precision prec; /* loss scaling and half-precision gradient rounding */
    tr_loss_buffer losses;   /* the step's microbatch losses on the device, read once */
} trainer;

typedef struct step_out {
    double loss, grad_norm, lr, wd;
    bool skipped;
    bool overflow; /* skipped for inf/NaN gradients (loss scaling) */
    /* MoE: the step's load-balancing and z losses as Megatron logs them (NaN: none) */
    double moe_lb, moe_z;
} step_out;

/* Reads c into t and builds the model, data, optimizer, parallel state and checkpoint state;
 * teardown releases whatever setup made, also after a failure halfway. */
tr_status tr_trainer_setup(trainer *t, const tr_config *c, tr_diags *d);
void tr_trainer_teardown(trainer *t);
/* Loads the mbs samples index[0..mbs) of `split` (consecutive from `first` when index is NULL)
 * into t's microbatch buffers. */
tr_status tr_trainer_load_microbatch(trainer *t, int split, int64_t first, const int64_t *index);
/* One training iteration at `consumed` samples (scheduler position sched_samples). */
tr_status tr_trainer_step(trainer *t, int64_t iteration, int64_t consumed, int64_t sched_samples,
                          step_out *out);
/* Mean loss over the first eval_iters batches of `split`; the test split's evaluation and log
 * line. */
tr_status tr_trainer_evaluate(trainer *t, int split, int64_t eval_iters, double *loss);
tr_status tr_trainer_test_eval(trainer *t, int64_t iteration);

#endif
