/* What tests/equiv/equiv_check.c keeps of a run, and the checks it shares with
 * tests/equiv/equiv_parts.c (what each rank holds: its stages, its experts). */
#ifndef TR_TESTS_EQUIV_H
#define TR_TESTS_EQUIV_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "runtime/comm/comm.h"
#include "runtime/model/model.h"

enum { MAX_KEYS = 64, MAX_ITERS = 64 };

typedef struct run_out {
    const tr_config *c;
    /* The run's model-parallel (tp-pp) and pipeline groups, and with expert parallelism the
     * expert model-parallel group (expert TP x EP x PP; MPI_COMM_NULL: one rank). */
    MPI_Comm mp, pp, emp;
    MPI_Comm ep;        /* the EP group (MPI_COMM_NULL without expert parallelism) */
    int64_t moe_layers; /* the MoE layers this rank runs (MTP depths' included) */
    int64_t moe_rows;   /* their expert rows, every forward's and backward's (tr_moe_rows_run) */
    float losses[MAX_ITERS];
    int64_t iters, early;
    int64_t overflows;     /* steps skipped for inf/NaN gradients (loss scaling) */
    double loss_scale;     /* at the end (NaN without a scaler) */
    double eval_loss;      /* the last validation loss (NaN without evaluation) */
    int64_t buffer_numel;  /* the flat parameter buffer (the DP layout, padding included) */
    int64_t grad_numel[2]; /* the dense and expert gradient buffers (tr_train_result) */
    float *params;         /* every logical parameter tensor, model order, concatenated */
    int64_t n;
    char (*names)[128];
    int64_t *starts; /* per tensor, into params; n_tensors + 1 entries */
    int n_tensors;
    /* Pipeline parallel with a shared word embedding (tied, or MTP's): the last stage's copy,
     * assembled like params (NULL without a copy anywhere). */
    float *tied_copy;
    /* What this rank computes, for the comm volume: its layers, embedding, loss, and the
     * elements of its sequence-parallel partial gradients, and of the q/k norms' (partial over
     * the heads: summed over TP with or without sequence parallelism). */
    int64_t local_layers, sp_grads, head_grads;
    /* MoE: the expert-bias elements this rank holds (their token counts are summed over DP) */
    int64_t expert_bias;
    bool has_embedding, has_loss;
    /* TP larger than the query groups: elements of this rank's key-value copies that differ
     * from the group's first rank's (they must stay equal bit for bit). */
    int64_t kv_drift;
    int memory_bad;    /* the memory check failed on this rank */
    int64_t act_numel; /* the model's activation floats on this rank (MoE buffers included) */
} run_out;

/* The memory saving is real: the stages (and, with EP, the expert ranks) partition the model,
 * and a rank keeps activations only for its own layers, one set per microbatch in flight in its
 * schedule. Returns the number of mismatches (printed). */
int equiv_check_memory(const run_out *o, const tr_model *m);

/* With expert parallelism, the alltoall dispatcher's bytes on the EP group against the theory
 * from the token counts: per MoE layer and microbatch forward, the E per-expert counts (int32)
 * to every peer, then the T x topk routed rows of width h out and those the rank's experts
 * received back (all-to-all-v, booked by what each rank sends), and backward the rows' gradients
 * both ways again (T the rank's tokens: mbs x seq / CP, / TP under sequence parallelism). Every
 * row leaves one rank and reaches one, so over the EP group the rows moved are 4 x EP x T x
 * topk per layer and microbatch (2 x forward only, in evaluation). With a capacity factor and
 * padding each rank's rows are E x capacity instead (capacity = ceil(T topk / E x factor), the
 * padded rows travel too); without padding the rows kept are data-dependent, so they come from
 * the layers' counts of their rows (moe_rows: twice each forward's and backward's rows, no more
 * than the dropless or capacity bound). eval_mbs: this rank's evaluation microbatches. Returns
 * the number of mismatches (printed). */
int equiv_check_ep_volume(const tr_config *c, const tr_comm *comm, const run_out *run,
                          int64_t eval_mbs);

/* With expert TP, the expert-TP group's bytes against the theory from the token counts: per MoE
 * layer and forward the El local experts' row counts (int32, all-gathered), then the rows the
 * rank's experts received (n: T x topk without EP, its share of EP x T x topk with it) gathered
 * to every expert-TP peer and fc2's partial sums reduce-scattered back, and backward the same
 * with the gradients: four row collectives per layer and training microbatch, two in evaluation.
 * Both go through all-to-all-v: a gather is booked etp x n rows by each rank, a reduce-scatter
 * the group's gathered rows, so over the expert model-parallel group (o->emp) every rank's own
 * T x topk rows count etp times a collective. With drops the rows are the layers' counts
 * (moe_rows), as for EP. No recomputation (its reruns gather again). Returns the number of
 * mismatches (printed). */
int equiv_check_etp_volume(const tr_config *c, const tr_comm *comm, const run_out *run,
                           int64_t eval_mbs);

/* With expert parallelism: the logical expert tensors (names, starts: o's) in o->params from the
 * ranks holding them, every rank's own experts summed over o->emp (each expert held once there).
 */
tr_status equiv_gather_experts(run_out *o, const tr_model *m);

#endif
