/* The training loop's side of distributed checkpoints (docs/checkpoints.md, "How the runtime uses
 * it"): what a rank registers under the current layout (stacked layer tensors, TP slices, SwiGLU
 * gate/up, optimizer state in model space, scalars, the RNG seed), loading at setup
 * (checkpoint.load, else pretrained_checkpoint) and saving at iteration boundaries
 * (save_interval, exit_interval/duration, a signal, the end), with async_save, fully_parallel_save
 * and most_recent_k retention. The storage is runtime/checkpoint/; this file only decides what
 * goes in and runs the collectives between its steps. */
#ifndef TR_RUNTIME_TRAIN_CHECKPOINTING_H
#define TR_RUNTIME_TRAIN_CHECKPOINTING_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "core/diag.h"
#include "runtime/checkpoint/ckpt.h"
#include "runtime/checkpoint/reader.h"
#include "runtime/comm/comm.h"
#include "runtime/optimizer/loss_scaler.h"
#include "runtime/model/model.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/pipeline/executor.h"
#include "runtime/train/dp.h"

/* Where the loop stands after an iteration (or where a resumed loop starts). */
typedef struct tr_train_ckpt_pos {
    int64_t iteration;          /* iterations completed */
    int64_t consumed_samples;   /* the data cursor: global samples read */
    int64_t scheduler_samples;  /* samples the LR schedule has advanced by (skips excluded) */
    int64_t skipped_iterations; /* optimizer steps skipped so far */
} tr_train_ckpt_pos;

/* What the trainer holds; exactly one of opt (one rank, no comm) and dp is set. */
typedef struct tr_train_ckpt_env {
    const tr_config *c;
    tr_comm *comm; /* NULL: one rank */
    tr_model *model;
    tr_optimizer *opt;
    tr_train_dp *dp;
    const tr_pp_exec *pp;   /* NULL without pipeline parallelism */
    tr_loss_scaler *scaler; /* fp16/static loss scaling state (NULL or disabled: none) */
    FILE *log;              /* notices (rank 0); NULL for silence */
} tr_train_ckpt_env;

typedef struct tr_train_ckpt {
    tr_train_ckpt_env env;
    tr_diags *d;
    int world, rank, tp, tp_rank, dp, dp_rank, pp, pp_rank;
    /* Expert parallelism: the EP size and the expert-DP group holding copies of this rank's
     * experts (1, 0 without). */
    int ep, edp, edp_rank;
    tr_train_ckpt_pos resume; /* the position the loop starts from (zero when fresh) */
    int64_t last_saved;       /* iteration of the last save started, -1 for none */
    /* An async save in flight: its writer, and the iteration it belongs to. */
    tr_ckpt_save *pending_save;
    tr_ckpt_async *pending_write;
    int64_t pending_iteration;
    /* LoRA: saves and resumes list only the trainable tensors (the adapters and their optimizer
     * state); the frozen base comes from checkpoint.pretrained_checkpoint. */
    bool trainable_only;
    /* A weights-only load found no DoRA magnitudes (a base model's checkpoint): they are set
     * from the loaded weights. */
    bool magnitudes_missing;
} tr_train_ckpt;

/* Loads the checkpoint the config asks for into the model, optimizer and k->resume (all ranks
 * agree on success); call after the model and optimizer exist. Without checkpoint settings it
 * only records env. */
tr_status tr_train_ckpt_setup(tr_train_ckpt *k, const tr_train_ckpt_env *env, tr_diags *d);

/* At an iteration boundary: saves when checkpoint.save is set and the iteration is a multiple of
 * save_interval, or `stopping` (the last iteration of this run: train_iters, exit_interval,
 * exit_duration or a signal). Collective over the run. */
tr_status tr_train_ckpt_after_iteration(tr_train_ckpt *k, const tr_train_ckpt_pos *pos,
                                        bool stopping);

/* Completes an async save still in flight (collective); call once after the loop. */
tr_status tr_train_ckpt_finish(tr_train_ckpt *k);

/* Releases what a failed run left (an uncommitted async save is joined and dropped). */
void tr_train_ckpt_free(tr_train_ckpt *k);

/* Parameter i of m, a whole one-rank model (its parameter list is enough: no buffers are read),
 * from checkpoint r into dst (the parameter's numel floats): the slices a load registers for it,
 * so a checkpoint saved under any layout reads back; rows the checkpoint does not hold (the
 * vocabulary padding) are zero. For converters that stream a model a tensor at a time. */
tr_status tr_train_ckpt_read_param(tr_ckpt_reader *r, const tr_model *m, int i, float *dst,
                                   tr_diags *d);

#endif
