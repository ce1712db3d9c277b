/* Internal to runtime/moe/: the layer's state and the pieces its forward and backward share. */
#ifndef TR_RUNTIME_MOE_INTERNAL_H
#define TR_RUNTIME_MOE_INTERNAL_H

#include "runtime/moe/moe.h"

/* What the backward of one microbatch needs from its forward. Assignments are (token t, choice
 * j) pairs, a = t * topk + j; expert rows are the routed tokens gathered by expert, expert e's
 * block being rows [off[e], off[e + 1]) (with pad_capacity exactly capacity rows, the unused
 * ones zero). */
/* A block of expert rows sorted by expert: expert e (of n) has rows [off[e], off[e + 1]), the
 * e-th of the rank's own experts. */
typedef struct tr_moe_rows {
    int n;
    const int32_t *off;
    float *xp, *fc1, *act, *ye; /* input, fc1 output, activation, fc2 output */
} tr_moe_rows;

typedef struct tr_moe_state {
    float *x;       /* [T, h] the layer's input */
    float *noise;   /* [T, h] the jitter's factors, or NULL */
    float *logits;  /* [T, E] */
    float *prob;    /* [T, k] routing probabilities of the kept assignments, 0 when dropped */
    float *aux_n;   /* [B, E] (seq_aux) or [E]: the token counts the aux loss weighted */
    int32_t *idx;   /* [T, k] the chosen experts */
    int32_t *pos;   /* [T, k] the expert row of each assignment, -1 when dropped */
    int32_t *row_a; /* [rows] the assignment of each expert row, -1 for padding */
    int32_t *off;   /* [E + 1] */
    float *xp, *fc1, *act, *ye; /* expert rows: input, fc1 output, activation, fc2 output */
    float *s_fc1, *s_act, *s_y, *s_gate; /* the shared expert's [T, ...]; gate [T] */
    bool training; /* the forward computed the balancing losses (their gradients follow) */
    /* EP > 1: cnt [ep * El] rows sent by rank i to local expert le (i * El + le), and the rows
     * this rank's experts received, sorted by local expert (loc.off [El + 1]) */
    int32_t *cnt, *loc_off;
    tr_moe_rows loc;
    /* ETP > 1: etp_cnt [etp * El] the rows expert-TP rank j has for local expert le (j * El +
     * le), and the gathered rows the experts' slices ran on, by rank then local expert (blocks
     * of etp.off [etp * El + 1]; etp.ye is the layer's scratch) */
    int32_t *etp_cnt, *etp_off;
    tr_moe_rows etp;
    /* the allgather dispatcher (EP > 1): the group's routing probabilities [ep * T * k] (rank
     * i's tokens in block i), and the gathered assignment (token g * k + choice) of each of loc's
     * rows */
    float *ag_prob;
    int32_t *ag_a;
} tr_moe_state;

typedef struct tr_moe_view {
    float *router, *bias;
    float **fc1, **fc2; /* per expert */
    float *s_fc1, *s_fc2, *s_gate;
} tr_moe_view;

struct tr_moe_layer {
    tr_moe_spec s;
    tr_moe_dims d;
    const tr_ops *ops;
    int T, E, k, fc1_dim, s_fc1_dim;
    int El, ep, ep_rank; /* experts on this rank, the EP size and this rank's place */
    int ep_rows;         /* EP > 1: the most rows the local experts may receive */
    float *ep_buf;       /* EP > 1: the states' received rows and the exchange scratch */
    int32_t *ep_ibuf;
    float *a2a, *d_loc, *dx_loc; /* [ep_rows, h]: rows by source rank; gradients by expert */
    /* ETP > 1 (runtime/moe/etp.c): the expert-TP size and place (s.ffn and fc1_dim are then
     * this rank's slice), the most rows gathered, the states' gathered rows and the scratch:
     * the gathered fc2 output or gradient, the gathered input gradient, the reduce-scatter's
     * received partial sums */
    int etp, etp_rank, etp_rows;
    float *etp_buf, *etp_y, *etp_dx, *etp_rs;
    int32_t *etp_ibuf;
    /* the allgather dispatcher's scratch: the group's tokens (or their output gradients) [ep T,
     * h], the outputs (or input gradients) to reduce-scatter [ep T, h], the probabilities'
     * gradients [ep T k], the routed expert of each assignment (-1: dropped) [ep T k] and this
     * rank's own [T k] */
    float *ag_x, *ag_out, *ag_dprob;
    int32_t *ag_sel;
    int capacity;               /* 0: dropless */
    int64_t rows_fwd, rows_bwd; /* expert rows of every forward and backward (tr_moe_rows_run) */
    int max_rows;               /* expert rows one microbatch may need */
    tr_moe_view p, g;
    tr_moe_state *st;
    float *buf; /* every float of the states and the scratch */
    int32_t *ibuf;
    /* scratch of the backward */
    float *d_rows, *d_out, *d_act, *d_fc1, *d_x, *d_logits, *d_prob, *s_dy, *s_dact, *s_dfc1, *s_dg;
    /* training statistics and the step's counts */
    double lb_sum, z_sum;
    int n_stats;
    double *counts;    /* [E] routed tokens since the step began (expert bias) */
    double *ga_counts; /* [E] global aux loss: the aux routing counts of the step's microbatches */
    double *seen;      /* [E] tokens routed to each expert since tr_moe_take_tokens (logging) */
    int ga_steps;
    double *aux_N, *aux_P; /* [B, E] the aux loss's counts and score sums */
    /* seconds spent since creation (tr_moe_timing): routing (router GEMMs, scores, top-k, drops,
     * losses), permutation (gather, combine and their backward), routed experts, shared expert */
    double t_route, t_perm, t_experts, t_shared;
    struct tr_moe_lora *lora; /* the adapters (runtime/moe/lora.c), or NULL */
    bool replay;              /* a recomputation's rerun of the forward (tr_moe_recompute) */
};

/* Routing of one microbatch into state st: logits from st->x (jittered), the chosen experts and
 * their probabilities, the capacity drop, the aux loss's counts; returns the balancing and z
 * losses (divided by their coefficients) through lb and z when training. */
tr_status tr_moe_route(tr_moe_layer *L, tr_moe_state *st, bool training, uint64_t seed,
                       uint64_t round, double *lb, double *z);
/* dL/dlogits into L->d_logits from L->d_prob (the routing probabilities' gradient), plus the
 * balancing and z losses' gradients at scale aux_scale. */
tr_status tr_moe_route_bwd(tr_moe_layer *L, const tr_moe_state *st, float aux_scale);

/* The local experts' MLPs, one GEMM per expert over its block of r: forward into r (fc1, act,
 * ye), backward from dy (dL/d ye) into dx (dL/d xp), accumulating the weights' gradients. */
tr_status tr_moe_experts_fwd(tr_moe_layer *L, const tr_moe_rows *r);
/* The activation of r's expert rows from their fc1 output, expert block by expert block as
 * tr_moe_experts_fwd computes it. */
tr_status tr_moe_experts_act(tr_moe_layer *L, const tr_moe_rows *r);
tr_status tr_moe_experts_bwd(tr_moe_layer *L, const tr_moe_rows *r, const float *dy, float *dx);

/* The alltoall dispatcher (EP > 1): st's expert rows (sorted by global expert) to the ranks
 * holding their experts, the local experts, and their outputs back into st->ye; the backward
 * sends L->d_rows the same way and brings dL/d xp back into L->d_x. */
tr_status tr_moe_ep_alloc(tr_moe_layer *L); /* the states' loc and the exchange scratch */
/* The floats and ints tr_moe_ep_alloc allocates (tr_moe_buffer_bytes). */
void tr_moe_ep_sizes(const tr_moe_layer *L, int64_t *floats, int64_t *ints);
/* A zeroed buffer of the layer's: from its device (activations) when dims name one, else the
 * heap; and its release. */
void *tr_moe_buf_alloc(const tr_moe_layer *L, int64_t bytes);
void tr_moe_buf_free(const tr_moe_layer *L, void *p);
tr_status tr_moe_dispatch_fwd(tr_moe_layer *L, tr_moe_state *st);
tr_status tr_moe_dispatch_bwd(tr_moe_layer *L, tr_moe_state *st);
/* The rows this rank's experts run on (r, by local expert: the layer's own rows, or the EP
 * exchange's) through the local experts; with ETP > 1 gathered over the expert-TP group, each
 * rank's slices run on all of them and fc2's partial sums are reduce-scattered back into
 * r->ye; the backward does the same with dy (r's rows) into dx. */
tr_status tr_moe_local_fwd(tr_moe_layer *L, tr_moe_state *st, const tr_moe_rows *r);
tr_status tr_moe_local_bwd(tr_moe_layer *L, tr_moe_state *st, const tr_moe_rows *r, const float *dy,
                           float *dx);
/* ETP > 1: the states' gathered rows and the scratch (tr_moe_buffer_bytes sizes them). */
void tr_moe_etp_sizes(const tr_moe_layer *L, int64_t *floats, int64_t *ints);
tr_status tr_moe_etp_alloc(tr_moe_layer *L);
/* The allgather dispatcher (dispatch_ag.c; EP > 1 with TR_MOE_DISPATCH_ALLGATHER): the EP
 * group (TR_GROUP_TP_EP, expert TP 1) gathers every rank's tokens, probabilities and choices;
 * this rank runs the rows routed to its experts and reduce-scatters their weighted outputs, so
 * y [T, h] (overwritten) is its tokens' routed sum. The backward gathers dy, runs the experts'
 * backward and reduce-scatters dL/dx into dx (overwritten) and dL/dprob into L->d_prob. */
static inline bool tr_moe_allgather(const tr_moe_layer *L) {
    return L->ep > 1 && L->s.dispatcher == TR_MOE_DISPATCH_ALLGATHER;
}
tr_status tr_moe_ag_alloc(tr_moe_layer *L);
void tr_moe_ag_sizes(const tr_moe_layer *L, int64_t *floats, int64_t *ints);
tr_status tr_moe_ag_fwd(tr_moe_layer *L, tr_moe_state *st, float *y);
tr_status tr_moe_ag_bwd(tr_moe_layer *L, tr_moe_state *st, const float *dy, float *dx);
/* The shared expert: adds its (gated) output to y; backward adds its input gradient to dx. */
tr_status tr_moe_shared_fwd(tr_moe_layer *L, tr_moe_state *st, float *y);
tr_status tr_moe_shared_bwd(tr_moe_layer *L, const tr_moe_state *st, const float *dy, float *dx);

/* LoRA on the experts (runtime/moe/lora.c): the adapter tensors after the layer's own ones, the
 * adapters' scratch, and the hooks the experts call after each base GEMM of linear_fc1 / fc2
 * (target 0 / 1) of local expert e, or of the shared expert (e = -1). Forward: y [n, out] +=
 * scale (drop(x) A^T) B^T; backward: dA, dB accumulate and dx [n, in] += the adapter's input
 * gradient. row0 is the block's first expert row (the rows' dropout keys); the shared
 * expert's rows are the tokens. */
enum { TR_MOE_LORA_FC1, TR_MOE_LORA_FC2 };
int tr_moe_lora_param_count(const tr_moe_spec *s);
tr_status tr_moe_lora_params(const tr_moe_spec *s, const char *base, int hidden, bool swiglu,
                             tr_moe_param *out);
tr_status tr_moe_lora_create(tr_moe_layer *L);
void tr_moe_lora_free(tr_moe_layer *L);
void tr_moe_lora_bind(tr_moe_layer *L, float *params, float *grads, const int64_t *offsets);
/* Before a forward (records its dropout round in slot) or a backward (takes the slot's). */
void tr_moe_lora_begin(tr_moe_layer *L, int slot, bool forward, bool training, uint64_t seed,
                       uint64_t round);
tr_status tr_moe_lora_fwd(tr_moe_layer *L, int target, int e, int row0, const float *x, float *y,
                          int n);
tr_status tr_moe_lora_bwd(tr_moe_layer *L, int target, int e, int row0, const float *x,
                          const float *dy, float *dx, int n);

/* C = op(A) op(B) (+ beta C) in fp32, or with the operands rounded to the layer's half precision
 * when lowp is set. */
tr_status tr_moe_gemm(const tr_moe_layer *L, bool lowp, tr_transpose ta, tr_transpose tb, int m,
                      int n, int k, const float *a, int lda, const float *b, int ldb, float beta,
                      float *c, int ldc);

#endif
