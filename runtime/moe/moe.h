/* A mixture-of-experts MLP (Megatron-Core's MoELayer, with the alltoall or allgather dispatcher
 * over EP): the
 * TopKRouter, the balancing losses, capacity and token dropping, the routed experts and the shared
 * experts, written against the op table with explicit forward and backward.
 *
 * It knows no tr_model: the model lists the layer's parameters (tr_moe_params) in its flat
 * buffer, binds their offsets (tr_moe_bind) and calls forward/backward with the output of
 * pre_mlp_layernorm. Each layer keeps `slots` saved states (one per microbatch in flight), like
 * the model's activation sets. Call sequence per training step: forward(slot) ... backward(slot)
 * for each microbatch, then tr_moe_take_stats (logging) and tr_moe_step_end (expert bias, the
 * global aux loss's running counts). Memory is host memory: the layer runs on host-visible
 * devices only (docs/runtime.md, "Mixture of experts"). */
#ifndef TR_RUNTIME_MOE_H
#define TR_RUNTIME_MOE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/diag.h"
#include "kernels/ops.h"

struct tr_comm;
struct tr_device;

enum { TR_MOE_SOFTMAX, TR_MOE_SIGMOID, TR_MOE_SQRTSOFTPLUS };
enum { TR_MOE_LB_NONE, TR_MOE_LB_AUX, TR_MOE_LB_SEQ_AUX, TR_MOE_LB_GLOBAL_AUX };
/* How tokens reach the experts under EP (moe_token_dispatcher_type; flex runs the alltoall
 * exchange): rows to their experts' ranks and back (dispatch.c), or every rank gathering the
 * group's tokens and reduce-scattering its experts' outputs (dispatch_ag.c). */
enum { TR_MOE_DISPATCH_ALLTOALL, TR_MOE_DISPATCH_ALLGATHER };
#define TR_MOE_MAX_LAYERS 256
/* The most experts (and top-k) one layer routes to: per-token work arrays live on the stack. */
#define TR_MOE_MAX_EXPERTS 1024

typedef struct tr_moe_spec {
    int experts; /* 0: a dense model */
    int topk, ffn;
    int shared_ffn;   /* 0: no shared expert */
    bool shared_gate; /* the shared expert's output times sigmoid(x . gate_weight) */
    int score;        /* TR_MOE_SOFTMAX / SIGMOID / SQRTSOFTPLUS */
    bool pre_softmax;
    int groups, group_topk; /* group-limited routing; 0: off */
    float topk_scale;       /* moe_router_topk_scaling_factor, 1 when unset */
    bool expert_bias;
    float bias_rate;
    int balance; /* TR_MOE_LB_* */
    float aux_coeff, z_coeff;
    float capacity; /* moe_expert_capacity_factor; 0: dropless */
    bool drop_position, pad_capacity;
    float jitter;     /* moe_input_jitter_eps; 0: none */
    bool router_lowp; /* the router's GEMM in the model's half precision (moe_router_dtype null) */
    bool per_token;   /* calculate_per_token_loss: the aux losses' gradient scale */
    uint64_t layers[TR_MOE_MAX_LAYERS / 64]; /* bit i: layer i is MoE */
    /* The expert layout the model builds (not from the config: tr_moe_spec_from_config leaves
     * 1 and 0): this rank holds experts [ep_rank * experts / ep_size, ...) of experts / ep_size,
     * and tokens travel to them over the EP group by `dispatcher` (TR_MOE_DISPATCH_*, which
     * tr_moe_spec_from_config does set). */
    int ep_size, ep_rank;
    /* Expert tensor parallelism (Megatron's ETP; set by the model like ep_size, 1 and 0 from the
     * config): each of this rank's experts is split over the TR_GROUP_EXPERT_TP group, fc1's
     * columns (SwiGLU: gate and up each) and fc2's rows, ffn / etp_size of them here; the rows
     * the experts run on are gathered over that group and fc2's partial sums reduce-scattered
     * back (runtime/moe/etp.c). */
    int etp_size, etp_rank;
    int dispatcher;
    /* LoRA (runtime/moe/lora.c): 0, or the rank of the adapters on every expert's and the shared
     * expert's linear_fc1 / linear_fc2 (where lora_fc1 / lora_fc2 say); every base tensor of the
     * layer, the router included, is then frozen. */
    int lora_rank;
    bool lora_fc1, lora_fc2;
    float lora_scale;   /* alpha / rank */
    float lora_dropout; /* on the adapter's input, training only */
} tr_moe_spec;

/* What the model fixes for a layer. */
typedef struct tr_moe_dims {
    int hidden, batch, seq, slots, layer;
    bool swiglu, gelu_tanh;
    int lowp; /* 0 or the tr_lowp of the expert GEMMs' operands */
    /* The EP group's transfers when the spec's ep_size > 1 (TR_GROUP_EP; host memory). Every
     * rank of the group must call forward and backward the same number of times. May be given
     * later (tr_moe_set_comm), before the first forward. */
    struct tr_comm *comm;
    /* Sequence and context parallelism: the layer's batch x seq tokens are this rank's part of
     * each sequence, the sp ranks of comm's TR_GROUP_TP_CP (Megatron's tp-cp group) holding the
     * others; the aux loss's counts are summed over them and its token count and the z-loss's
     * mean cover every part, so the parts' losses add up to the whole sequences'. 0 or 1: none.
     */
    int sp;
    /* Activation recomputation (TR_MOE_RC_*): what the slots' states share in one recompute
     * state instead of keeping per slot; the backward of such a slot needs tr_moe_recompute
     * first. 0: everything kept. The recompute state lives in the caller's rc_buf / rc_ibuf
     * (tr_moe_rc_bytes each; device activations as dev's), which layers may share when no
     * layer's recomputation falls between another's and its backward. */
    unsigned rc;
    float *rc_buf;
    int32_t *rc_ibuf;
    /* Where the states and scratch live: a host-visible device's activations (its peaks count
     * them), or NULL for the heap. */
    struct tr_device *dev;
} tr_moe_dims;

/* Megatron's MoE recompute modules: `moe` the whole layer (router, dispatch, experts, shared
 * expert) from its kept input, `moe_act` the routed experts' activation from their fc1 output,
 * `shared_experts` the shared expert from the layer's input. */
enum { TR_MOE_RC_ALL = 1, TR_MOE_RC_ACT = 2, TR_MOE_RC_SHARED = 4 };

/* The buffers tr_moe_create allocates for its states and scratch, bytes each in allocation order
 * (the states' floats and the backward's scratch, the states' ints; with EP > 1 the exchange's
 * floats and ints; with ETP > 1 the gathered rows' floats and ints; not the recompute state): the
 * one sizing the runtime allocates with and the planner plans with. The expert rows are dropless'
 * worst case (every token's top-k rows; with EP, EP times that on one rank) unless a capacity
 * factor pads them (E x capacity rows); with EP and a capacity a rank receives from each peer at
 * most its experts x capacity rows (padded: exactly that). Returns how many (0: invalid). */
#define TR_MOE_MAX_BUFFERS 6
int tr_moe_buffer_bytes(const struct tr_moe_spec *s, const tr_moe_dims *d,
                        int64_t out[TR_MOE_MAX_BUFFERS]);
/* The bytes of the recompute state's floats (returned) and ints (*int_bytes) for dims.rc; 0
 * without recomputation. Not in tr_moe_buffer_bytes: the caller allocates them. */
int64_t tr_moe_rc_bytes(const struct tr_moe_spec *s, const tr_moe_dims *d, int64_t *int_bytes);

/* A zeroed buffer in dev's activations (NULL dev: the heap), and its release (p NULL: none). */
void *tr_moe_dev_alloc(struct tr_device *dev, int64_t bytes);
void tr_moe_dev_free(struct tr_device *dev, void *p);

enum { TR_MOE_INIT_NORMAL, TR_MOE_INIT_SCALED, TR_MOE_INIT_ZERO };

/* A LoRA adapter's A and B (runtime/moe/lora.c): peft.lora_A_init_method / lora_B_init_method. */
enum { TR_MOE_INIT_LORA_A = TR_MOE_INIT_ZERO + 1, TR_MOE_INIT_LORA_B };

/* One parameter tensor of the layer, in the order the layer binds them. */
typedef struct tr_moe_param {
    char name[128];
    bool adapter; /* a LoRA tensor: trained while the rest of the model is frozen */
    int rows, cols;
    int init; /* TR_MOE_INIT_* */
    bool no_decay, frozen;
    /* A routed expert's weight: it lives on one EP rank, so its gradient is reduced over the
     * expert-data-parallel group (Megatron's expert buffers), not the dense DP group. */
    bool expert;
    /* With ETP > 1 an expert weight is this rank's shard of the logical [rows * etp, cols]
     * (split_dim 0, fc1; swiglu_split: its slice of gate and of up) or [rows, cols * etp]
     * (split_dim 1, fc2) tensor; -1: whole. */
    int split_dim;
    bool swiglu_split;
} tr_moe_param;

typedef struct tr_moe_layer tr_moe_layer;

/* The MoE part of the model section; experts 0 for a dense model. TR_ERR_INVALID when a
 * value the runtime refuses (core/rules/runtime.c) slipped through. */
tr_status tr_moe_spec_from_config(const tr_config *c, tr_moe_spec *s);
bool tr_moe_is_layer(const tr_moe_spec *s, int layer);

/* How many tensors layer `layer` has on this expert rank, and their names and shapes (out: that
 * many entries); a rank's experts keep their global numbers in the names. */
int tr_moe_param_count(const tr_moe_spec *s);
tr_status tr_moe_params(const tr_moe_spec *s, int layer, int hidden, bool swiglu,
                        tr_moe_param *out);
/* The same under any layer prefix (an MTP depth's layer: mtp.layers.<d>.mtp_model_layer). */
tr_status tr_moe_params_at(const tr_moe_spec *s, const char *base, int hidden, bool swiglu,
                           tr_moe_param *out);

tr_status tr_moe_create(tr_moe_layer **out, const tr_moe_spec *s, const tr_moe_dims *d,
                        const tr_ops *ops);
void tr_moe_free(tr_moe_layer *L);
/* The comm whose TR_GROUP_EP (alltoall) or TR_GROUP_TP_EP (allgather) carries the dispatcher's
 * transfers (EP > 1), and TR_GROUP_EXPERT_TP the expert-TP gathers (ETP > 1). */
void tr_moe_set_comm(tr_moe_layer *L, struct tr_comm *comm);
/* The tensors of tr_moe_params at params + offsets[i] and their gradients at grads + the same. */
void tr_moe_bind(tr_moe_layer *L, float *params, float *grads, const int64_t *offsets);

/* y [rows, hidden] = the layer on x [rows, hidden] (rows = batch * seq). training: the jitter,
 * the balancing losses, the expert-bias counts; seed and round key the jitter's noise. y may be x.
 */
tr_status tr_moe_forward(tr_moe_layer *L, int slot, const float *x, float *y, bool training,
                         uint64_t seed, uint64_t round);
/* Before the backward of `slot` of a layer with dims.rc: what the slot did not keep, again from
 * the same inputs with the same ops, so the same bits. TR_MOE_RC_ALL reruns the forward on x
 * (the layer's input again; y its output, or NULL) with the slot's seed and round, counting
 * no statistic, expert-bias count or balancing loss a second time; the others read the slot's
 * kept tensors (x, y unused). */
tr_status tr_moe_recompute(tr_moe_layer *L, int slot, const float *x, float *y, uint64_t seed,
                           uint64_t round);
/* dx (overwritten; may be dy) from dy, the gradient of the forward stored in `slot`; parameter
 * gradients accumulate. loss_scale multiplies the balancing losses' gradients: the main loss's
 * backward scale (Megatron's MoEAuxLossAutoScaler), the fp16 loss scale included. */
tr_status tr_moe_backward(tr_moe_layer *L, int slot, const float *dy, float *dx, float loss_scale);

/* Per-step statistics since the last call, summed over training microbatches: the balancing
 * loss and the z-loss divided by their coefficients (Megatron's logged values), and how many
 * microbatches they cover; then zeroed. */
void tr_moe_take_stats(tr_moe_layer *L, double *lb, double *z, int *n);
/* Tokens routed to each expert since the last step end (experts floats), for the expert-bias
 * update; a caller with data parallelism sums them over its group first. */
double *tr_moe_step_counts(tr_moe_layer *L);
int tr_moe_experts(const tr_moe_layer *L);
/* The expert rows (kept assignments; padded: capacity per expert) of every forward (training,
 * evaluation, recomputation alike) and every backward since creation: the rows the dispatcher
 * moves (tests/equiv: the EP exchange's bytes with drops). */
void tr_moe_rows_run(const tr_moe_layer *L, int64_t *fwd, int64_t *bwd);
/* Tokens routed to each expert (after drops) by the training forwards since the last call, into
 * out [experts]; then zeroed (the log's tokens per expert). */
void tr_moe_take_tokens(tr_moe_layer *L, double *out);
/* Seconds the layer spent since its creation in routing (router GEMMs, scores, top-k, drops,
 * balancing losses), permutation (gathering tokens by expert, the weighted combine, both
 * backwards), the routed experts and the shared expert (forward and backward each). */
void tr_moe_timing(const tr_moe_layer *L, double *route, double *perm, double *experts,
                   double *shared);
/* The end of an optimizer step: expert bias += rate * sign(mean - count) from the counts, which
 * then restart, as do the global aux loss's running counts. */
tr_status tr_moe_step_end(tr_moe_layer *L);

#endif
