/* The pipeline-parallel executor: walks this rank's action list from runtime/pipeline (forward
 * and backward of (microbatch, chunk), activation and gradient transfers between stages, waits)
 * over the model's stage parts, as docs/pipeline.md "What the executor must do" prescribes.
 *
 * Every rank holds the whole model's parameters (so the optimizer, the checkpoint and the
 * comparison with the single-rank run see one layout) but computes only its stages; the
 * gradients of the other stages stay zero here and the training loop sums them over the pipeline
 * group after the data-parallel reduction (docs/parallel.md). Activations are kept as each
 * stage's input per (microbatch, chunk); the backward recomputes the stage's forward from it. */
#ifndef TR_RUNTIME_PIPELINE_EXEC_H
#define TR_RUNTIME_PIPELINE_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/diag.h"
#include "runtime/comm.h"
#include "runtime/model.h"
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
} tr_pp_exec_hooks;

typedef struct tr_pp_pending {
    int group;
    tr_comm_request *req;
    float *free_after; /* a send buffer freed once sent (NULL for receives) */
} tr_pp_pending;

typedef struct tr_pp_exec {
    tr_comm *comm; /* not owned */
    tr_model *m;   /* not owned */
    tr_pp_schedule sched;
    tr_pp_layout layout;
    tr_model_part *parts; /* [vpp] this rank's chunks */
    int pp, pp_rank, vpp, nmb;
    int64_t act_numel; /* one activation: [mbs, seq (/ tp with SP), hidden] */
    bool per_token_loss;
    /* Per (mb, chunk), index mb * vpp + chunk: the stage input (received, kept until the
     * backward), the output to send, the received output gradient, the input gradient to send. */
    float **input, **output, **grad_in, **grad_out;
    tr_pp_pending *pending;
    int n_pending, cap_pending;
    bool poisoned;  /* a transfer timed out: MPI may still own the buffers, never free them */
    double wait_s;  /* this iteration: seconds blocked in WAIT */
    double iter_s;  /* this iteration: seconds in tr_pp_exec_iteration */
    uint8_t *owned; /* [m->n_info]: the parameter belongs to one of this rank's stages */
} tr_pp_exec;

/* Builds the layout and this rank's schedule for c (PP > 1), refusing a config whose schedules
 * fail the static check; marks which of m's parameters this rank's stages own. */
tr_status tr_pp_exec_create(tr_pp_exec *e, const tr_config *c, tr_comm *comm, tr_model *m,
                            tr_diags *d);
void tr_pp_exec_free(tr_pp_exec *e);

/* One iteration's forwards and backwards. *loss_sum and *tokens are the last stage's loss sum
 * (over tokens with per-token loss, else over microbatch means) and trained tokens; 0 on the
 * other stages. Parameter gradients accumulate into m->grads (this rank's stages only). */
tr_status tr_pp_exec_iteration(tr_pp_exec *e, const tr_pp_exec_hooks *h, double *loss_sum,
                               int64_t *tokens);

/* The measured bubble of the last iteration: time blocked waiting for transfers over the
 * iteration time. */
double tr_pp_exec_bubble(const tr_pp_exec *e);

#endif
