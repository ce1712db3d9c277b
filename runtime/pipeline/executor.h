/* The pipeline-parallel executor: walks this rank's action list from runtime/pipeline (forward
 * and backward of (microbatch, chunk), activation and gradient transfers between stages, waits,
 * the end-of-iteration gradient reductions) over the model's parts, as docs/pipeline.md "What
 * the executor must do" prescribes.
 *
 * The model holds only this rank's chunks (tr_model_create_parts_on with tr_pp_exec.parts): their
 * parameters, gradients and, per chunk, one activation set per microbatch in flight, counted
 * from the action list. A forward stores its activations in the set of (microbatch, chunk); the
 * backward consumes them (no recomputation).
 *
 * Activations and gradients cross stages in the schedule's message dtype (Megatron's
 * pipeline_dtype): fp32 as they are, bf16/fp16 rounded by the sender into a packed half-precision
 * buffer (cast_lowp) and widened back to fp32 by the receiver (widen_lowp) once the transfer is
 * complete, so the receiving stage computes on the rounded values and half the bytes travel. */
#ifndef TR_RUNTIME_PIPELINE_EXEC_H
#define TR_RUNTIME_PIPELINE_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/diag.h"
#include "runtime/comm/comm.h"
#include "runtime/model/loss_buffer.h"
#include "runtime/model/model.h"
#include "runtime/pipeline/pipeline.h"

/* What the training loop does around the model calls. */
typedef struct tr_pp_exec_hooks {
    void *ctx;
    /* Microbatch mb of the current iteration into ids/targets (and its dropout round). */
    tr_status (*load)(void *ctx, int mb, const int32_t **ids, const int32_t **targets);
    /* Before a backward: last is true in a chunk's last backward (mb == M - 1), where its
     * gradients become final (data-parallel reduction may start). */
    tr_status (*before_backward)(void *ctx, bool last);
    /* After the forward of mb on a stage (NULL: nothing). */
    void (*after_forward)(void *ctx, int mb);
    /* DP_GRAD_REDUCE: the data-parallel reduction must be complete on return (NULL: none). */
    tr_status (*finish_grads)(void *ctx);
    /* Forward-only: the loss stage's forward of the microbatch just loaded has queued its loss
     * into `loss` (device memory), which the caller may rescale before it is summed (NULL:
     * nothing). */
    tr_status (*eval_loss)(void *ctx, float *loss);
} tr_pp_exec_hooks;

typedef struct tr_pp_pending {
    int group;
    tr_comm_request *req;
    void *free_after;  /* a send buffer (or a packed receive buffer) given back once done */
    bool packed;       /* free_after is a packed half-precision buffer */
    float *widen_into; /* packed receive: the fp32 slot buffer its values are widened into */
} tr_pp_pending;

/* Given-back transfer buffers of one size, reused before allocating: device arenas release only
 * stack-like, and transfers finish in schedule order. */
typedef struct tr_pp_pool {
    void **items;
    int n, cap;
    size_t bytes;
} tr_pp_pool;

typedef struct tr_pp_exec {
    tr_comm *comm; /* not owned */
    tr_model *m;   /* not owned; set by tr_pp_exec_attach */
    tr_pp_schedule sched;
    tr_pp_layout layout;
    /* [vpp] this rank's chunks, slots = the most microbatches of the chunk in flight in the
     * action list: create the model with these. */
    tr_model_part *parts;
    int pp, pp_rank, vpp, nmb;
    int64_t act_numel; /* one activation: [mbs, seq (/ tp with SP), hidden] */
    int lowp;          /* 0: messages are fp32; else the tr_lowp they are rounded to */
    tr_pp_pool pool;   /* fp32 activation buffers (act_numel floats) */
    tr_pp_pool lpool;  /* packed messages (act_numel half-precision values) */
    bool per_token_loss;
    tr_loss_buffer losses; /* the last stage's microbatch losses, on the device until read */
    /* Per (mb, chunk), index mb * vpp + chunk: the received stage input (until its forward),
     * the output to send, the received output gradient, the input gradient to send. */
    float **input, **output, **grad_in, **grad_out;
    int *slot_mb; /* [vpp][max slots]: the microbatch whose activations a slot holds, or -1 */
    int max_slots;
    tr_pp_pending *pending;
    int n_pending, cap_pending;
    bool poisoned; /* a transfer timed out: MPI may still own the buffers, never free them */
    double wait_s; /* this iteration: seconds blocked in WAIT */
    double iter_s; /* this iteration: seconds in tr_pp_exec_iteration */
} tr_pp_exec;

/* Builds the layout and this rank's schedule for c (PP > 1), refusing a config whose schedules
 * fail the static check, and this rank's parts (with their activation slots). */
tr_status tr_pp_exec_create(tr_pp_exec *e, const tr_config *c, tr_comm *comm, tr_diags *d);
/* The model built from e->parts; checks that its activations match the schedule's messages (in
 * number and, by the message dtype, in bytes), and allocates the loss buffer on the model's
 * device. */
tr_status tr_pp_exec_attach(tr_pp_exec *e, tr_model *m, tr_diags *d);
void tr_pp_exec_free(tr_pp_exec *e);

/* One iteration's forwards and backwards, then (at the list's DP_GRAD_REDUCE) the deferred
 * output-layer weight gradients (tr_model_drain_wgrad) and h->finish_grads
 * and (EMBED_GRAD_ALLREDUCE) the sum of the word embedding's gradient with the other stage's
 * copy over the embedding group. *loss_sum and *tokens are the last stage's loss sum (over
 * tokens with per-token loss, else over microbatch means) and trained tokens; 0 on the other
 * stages. Parameter gradients accumulate into m->grads. */
tr_status tr_pp_exec_iteration(tr_pp_exec *e, const tr_pp_exec_hooks *h, double *loss_sum,
                               int64_t *tokens);

/* Forward only (evaluation) of microbatches 0..nmb-1 through every stage: per microbatch the
 * virtual stages in order, each receiving its input from the previous one and sending its
 * output on, so every rank meets its transfers in one global order (no deadlock). Uses h->load
 * only. *loss_sum is the last stage's sum of microbatch mean losses (0 elsewhere). */
tr_status tr_pp_exec_forward_only(tr_pp_exec *e, const tr_pp_exec_hooks *h, int nmb,
                                  double *loss_sum);

/* The measured bubble of the last iteration: time blocked waiting for transfers over the
 * iteration time. */
double tr_pp_exec_bubble(const tr_pp_exec *e);

#endif
