/* Pipeline parallelism from the config alone: which layers each (pp rank, virtual chunk) holds,
 * every rank's ordered action list for one iteration, a static check that all ranks' lists
 * pair up and cannot deadlock, the bubble they imply, and a printer (docs/pipeline.md). */
#ifndef TR_PIPELINE_H
#define TR_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "core/diag.h"
#include "core/status.h"

/* ---- layer assignment ---- */

/* The model part held by one virtual stage (pp rank, chunk). Virtual stage index
 * s = chunk * PP + pp_rank: activations flow from s to s + 1, wrapping from the last pp rank
 * to rank 0's next chunk. */
typedef struct tr_pp_stage {
    int first_layer; /* 0-based global index of its first transformer layer */
    int num_layers;  /* transformer layers (may be 0 with a layout or account_for_*) */
    int num_mtp_layers;
    bool has_embedding; /* input embedding: virtual stage 0 */
    bool has_loss;      /* output layer + loss: the last virtual stage */
} tr_pp_stage;

typedef struct tr_pp_layout {
    int pp, vpp;            /* vpp = model chunks per rank (1 without interleaving) */
    tr_pp_stage *stages;    /* [vpp * pp], indexed by chunk * pp + pp_rank */
    bool shared_embedding;  /* tr_pp_shares_embedding */
    int embedding_group[2]; /* pp ranks that all-reduce its grads; [1] == -1 when none */
} tr_pp_layout;

/* The last stage reads the word embedding too (the tied output layer, the MTP depths' lookup), so
 * under PP it holds a copy whose gradient the embedding group sums with the first stage's. */
bool tr_pp_shares_embedding(const tr_config *c);

tr_status tr_pp_layout_build(const tr_config *c, tr_pp_layout *out, tr_diags *d);
void tr_pp_layout_free(tr_pp_layout *l);
const tr_pp_stage *tr_pp_layout_stage(const tr_pp_layout *l, int pp_rank, int chunk);

/* ---- schedules ---- */

typedef enum tr_pp_op {
    TR_PP_NONE = -1, /* placeholder while building; never in a finished list */
    TR_PP_FWD,       /* forward of (mb, chunk) */
    TR_PP_BWD,       /* backward of (mb, chunk) */
    TR_PP_SEND_ACT,  /* output activation of (mb, chunk) to the next stage on `peer` */
    TR_PP_RECV_ACT,  /* input activation of (mb, chunk) from the previous stage on `peer` */
    TR_PP_SEND_GRAD, /* gradient of (mb, chunk)'s input to the previous stage on `peer` */
    TR_PP_RECV_GRAD, /* gradient of (mb, chunk)'s output from the next stage on `peer` */
    TR_PP_WAIT,      /* block until every transfer of post group `group` is done */
    TR_PP_EMBED_GRAD_ALLREDUCE, /* word-embedding grads over the embedding group */
    TR_PP_DP_GRAD_REDUCE        /* finish the data-parallel gradient reduction */
} tr_pp_op;

/* One step. Transfers are only posted (nonblocking) when executed; the transfers with the same
 * `group` are posted together (one batched call with batch_p2p_comm, otherwise one call each in
 * list order), and a later TR_PP_WAIT with that group completes them. Without overlap_p2p_comm
 * the WAIT follows its group at once. */
typedef struct tr_pp_action {
    tr_pp_op op;
    int mb, chunk; /* chunk is this rank's local chunk; -1 for collectives */
    int peer;      /* pp rank of the other side of a transfer; -1 otherwise */
    int group;     /* post group of a transfer, or the group a WAIT completes; -1 otherwise */
    int64_t bytes; /* payload of a transfer */
} tr_pp_action;

typedef enum tr_pp_kind { TR_PP_NO_PIPELINE, TR_PP_1F1B, TR_PP_INTERLEAVED } tr_pp_kind;

typedef struct tr_pp_schedule {
    int pp_rank, pp, vpp, num_microbatches;
    tr_pp_kind kind;
    bool batched, overlapped;
    int64_t message_bytes; /* one activation (or its gradient) */
    /* TR_DTYPE_* the activations and gradients cross stages in (tr_pp_schedule_build; fp32 from
     * a bare plan) */
    int32_t message_dtype;
    tr_pp_action *actions;
    int n, cap;
} tr_pp_schedule;

/* The schedule parameters a config implies (PP, VPP, M, G, p2p switches, message size). */
typedef struct tr_pp_plan {
    int pp, vpp, num_microbatches, group_size;
    bool batched, overlapped;
    bool shared_embedding; /* pp ranks 0 and PP-1 all-reduce the word embedding's grads */
    int64_t message_bytes; /* in tr_pp_message_dtype */
} tr_pp_plan;

/* Megatron's pipeline_dtype: model.pipeline_dtype, or params_dtype when it is not set. */
int32_t tr_pp_message_dtype(const tr_config *c);

tr_status tr_pp_plan_from_config(const tr_config *c, tr_pp_plan *out, tr_diags *d);
tr_status tr_pp_schedule_build_plan(const tr_pp_plan *p, int pp_rank, tr_pp_schedule *out);
tr_status tr_pp_schedule_build(const tr_config *c, int pp_rank, tr_pp_schedule *out, tr_diags *d);
void tr_pp_schedule_free(tr_pp_schedule *s);
tr_status tr_pp_schedule_push(tr_pp_schedule *s, tr_pp_action a);

/* Megatron's interleaved table: forward virtual step k runs (table[k].mb, table[k].chunk). */
typedef struct tr_pp_slot {
    int mb, chunk;
} tr_pp_slot;
tr_status tr_pp_interleaved_table(int m, int vpp, int group_size, tr_pp_slot **out);
/* Warmup length of the interleaved schedule on pp_rank, capped at m * vpp. */
int tr_pp_interleaved_warmup(int pp, int pp_rank, int vpp, int group_size, int m);

/* ---- what a list keeps alive (in_flight.c) ---- */

/* slots[ch] (ch < vpp <= 64): the most microbatches of chunk ch forwarded and not yet
 * backwarded at any point of s (at least 1): the activation sets the executor gives it;
 * *max_slots the largest. */
tr_status tr_pp_slots_in_flight(const tr_pp_schedule *s, int vpp, int *slots, int *max_slots);
/* The stage-transfer buffers the executor holds at once running s: fp32 activations (one
 * message of [mbs, seq (/ TP under SP), hidden] floats each) and, with half-precision messages
 * (half), packed ones; has_embedding / has_loss per local chunk. */
tr_status tr_pp_transfer_buffers(const tr_pp_schedule *s, const bool *has_embedding,
                                 const bool *has_loss, int vpp, bool half, int *fp32_peak,
                                 int *half_peak);
/* Both, one action at a time: init (has_embedding NULL: the slots alone), add each action in
 * list order, finish (the outputs of the two above; any may be NULL). */
typedef struct tr_pp_counts {
    const bool *has_embedding, *has_loss;
    int vpp;
    bool half;
    tr_status st;
    int live[64], slots[64];
    int f, h, pf, ph;           /* fp32 and packed buffers held, and their peaks */
    int back_f[64], back_h[64]; /* per post group modulo 64: what its WAIT gives back */
} tr_pp_counts;
void tr_pp_counts_init(tr_pp_counts *k, const bool *has_embedding, const bool *has_loss, int vpp,
                       bool half);
void tr_pp_counts_add(tr_pp_counts *k, const tr_pp_action *a);
tr_status tr_pp_counts_finish(const tr_pp_counts *k, int *slots, int *max_slots, int *fp32_peak,
                              int *half_peak);
/* tr_pp_schedule_build_plan's list fed to k as it is made, never stored: what the planner
 * reads of a schedule without the list of thousands of actions it would write and read back. */
tr_status tr_pp_schedule_count_plan(const tr_pp_plan *p, int pp_rank, tr_pp_counts *k);

/* ---- static check ---- */

/* Simulates all ranks together with unit costs (forward 1, backward 2, transfers 0). Checks
 * that the k-th send on each (src, dst) channel meets the k-th receive there with the same
 * kind, (mb, virtual stage) and bytes, that nothing is left unmatched, that no state leaves
 * every unfinished rank blocked, and that each rank runs one FWD and one BWD per
 * (mb, owned chunk). Reports the first problem as a "pipeline.schedule_*" error. */
typedef struct tr_pp_sim {
    double makespan;
    double *busy;   /* [pp] compute time per rank */
    double *finish; /* [pp] */
} tr_pp_sim;

tr_status tr_pp_check(const tr_pp_schedule *ranks, int pp, tr_pp_sim *sim, tr_diags *d);
void tr_pp_sim_free(tr_pp_sim *s);
tr_status tr_pp_schedule_check_all(const tr_config *c, tr_diags *d);

/* ---- bubble ---- */

typedef struct tr_pp_bubble {
    double expected;  /* (p - 1) / (v * m) */
    double simulated; /* (makespan - busy) / busy of the busiest rank */
    double per_rank_max, per_rank_min;
} tr_pp_bubble;

double tr_pp_bubble_expected(int pp, int vpp, int m);
void tr_pp_bubble_from_sim(const tr_pp_sim *s, int pp, int vpp, int m, tr_pp_bubble *out);

/* ---- printing ---- */

const char *tr_pp_op_name(tr_pp_op op);
/* One line per rank in compute-only form ("F0c0 B0c0 ...") when `compact`, otherwise one line
 * per action. pp_rank < 0 prints all ranks. */
tr_status tr_pp_schedule_print(FILE *out, const tr_config *c, int pp_rank, bool compact,
                               tr_diags *d);
void tr_pp_schedule_print_one(FILE *out, const tr_pp_schedule *s, bool compact);

#endif
