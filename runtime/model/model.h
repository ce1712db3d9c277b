/* The decoder-only transformer (GPT and Llama families) written once against the op table.
 *
 * Parameters and gradients are views into one flat buffer each, so data-parallel buckets and
 * distributed-optimizer shards are plain ranges. A model holds either the whole network or the
 * parts (pipeline stages) one rank runs: only their parameters, gradients and activations exist.
 * Each part keeps `slots` sets of activations (the microbatches it has in flight): forward fills
 * one, backward consumes it and ACCUMULATES parameter gradients, so gradient accumulation is
 * "forward/backward per microbatch, one optimizer step".
 *
 * Parallelism stays out of the maths: every linear layer is a tr_linear that knows which shard
 * of the logical weight it holds (tensor-parallel rank/size), and a pipeline rank's model is
 * built from its parts. See docs/runtime.md and docs/pipeline.md. */
#ifndef TR_RUNTIME_MODEL_H
#define TR_RUNTIME_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/diag.h"
#include "kernels/ops.h"
#include "runtime/mla/mla.h"
#include "runtime/mtp/mtp.h"
#include "runtime/moe/moe.h"

/* model.tp_comm_overlap's options as the runtime applies them (tr_model_spec.tp_overlap):
 *   AG: the all-gather of a column-parallel layer's input (qkv, fc1) split into pieces, each
 *     piece's GEMM running while the later ones travel, and the same for the output-gradient
 *     all-gather before a row-parallel layer's data-gradient GEMM (proj, fc2);
 *   RS: a row-parallel layer's output reduce-scatter started piece by piece behind its GEMM;
 *   RS_DGRAD: the same for a column-parallel layer's input-gradient reduce-scatter;
 *   BULK_WGRAD: that reduce-scatter in flight, whole, during the weight-gradient GEMM;
 *   NO_QKV / NO_FC1: no AG for that layer (tp_comm_overlap_disable_qkv / _fc1). */
enum {
    TR_TPO_AG = 1u << 0,
    TR_TPO_RS = 1u << 1,
    TR_TPO_RS_DGRAD = 1u << 2,
    TR_TPO_BULK_WGRAD = 1u << 3,
    TR_TPO_NO_QKV = 1u << 4,
    TR_TPO_NO_FC1 = 1u << 5
};

/* Everything the maths needs, read once from a validated config (tr_model_spec_from_config) or
 * filled directly by tests and benchmarks. */
typedef struct tr_model_spec {
    int num_layers, hidden, heads, groups, head_dim, ffn;
    int vocab;      /* padded vocabulary: rows of the embedding and of the output layer */
    int vocab_real; /* model.vocab_size: ids from here to vocab are padding, never in the
                     * softmax, so the loss is the unpadded model's (0: no padding) */
    int seq;        /* model.seq_length (divided by cp): the rows of a sequence this rank holds */
    /* Context parallelism (runtime/context_parallel/cp.h): > 1 when seq is this rank's two
     * chunks of sequences of seq * cp tokens; the position tables cover the whole sequence. */
    int cp;
    int layernorm; /* 1: LayerNorm (GPT), 0: RMSNorm (Llama) */
    int swiglu;    /* gated MLP with silu; else a plain GeLU MLP */
    int gelu_tanh; /* tanh-approximated GeLU ("gelu_new") instead of the erf form */
    int learned_pos;
    int rope; /* rotary embedding on q and k (rope_p is used only then) */
    tr_rope_params rope_p;
    int bias_linear; /* biases on every linear layer */
    int bias_qkv;    /* a bias on the QKV projection only */
    int tied;        /* output layer reuses the word embedding */
    int zero_centered;
    /* Megatron's qk_layernorm: q and k normalised per head (over head_dim) after the QKV split,
     * before RoPE, by the model's norm type with weights q_layernorm / k_layernorm [head_dim]. */
    int qk_norm;
    int qk_norm_wd; /* optimizer.apply_wd_to_qk_layernorm: those norms' tensors are decayed */
    /* Multi-latent attention (runtime/mla/mla.h) in every layer instead of the QKV attention:
     * head_dim is then v_dim (linear_proj's input per head), groups == heads, rope 0. */
    tr_mla_spec mla;
    /* Multi-token prediction (runtime/mtp/mtp.h): mtp_layers depths on the loss part, their
     * transformer layers numbered num_layers.. after the decoder's; mtp_scale is
     * mtp_loss_scaling_factor / mtp_layers. */
    int mtp_layers;
    float mtp_scale;
    float eps;
    double init_std, embed_init_std;
    float hidden_dropout;    /* on the embedding output and both residual branches */
    float attention_dropout; /* on the attention probabilities */
    /* Megatron's sequence parallelism (used with TP > 1): outside the TP regions activations are
     * split along the sequence; all-gathers and reduce-scatters replace the all-reduces. */
    int sequence_parallel;
    /* Megatron's tp_comm_overlap (with sequence parallelism, TP > 1): TR_TPO_* bits of which TP
     * exchanges are pipelined with, or hidden behind, the layers' GEMMs (runtime/model/linear.c).
     */
    unsigned tp_overlap;
    /* Mixed precision: 0 for fp32, else the tr_lowp the linear layers' GEMM operands are rounded
     * to (docs/runtime.md, "Mixed precision"). */
    int lowp;
    /* Mixed precision without the half-precision weight copy: every linear-layer GEMM rounds the
     * fp32 weights itself (gemm_lowp), as before the copy existed. Bitwise the same results; for
     * tests that prove it (tr_train_opts.no_weight_copy sets it). */
    int no_weight_copy;
    /* Sizing only (the planner's predicted plans): tr_model_param_list and tr_model_shape lay
     * out combinations the runtime refuses to build (its runtime.* rules: MoE with TP, MLA and
     * MTP with SP or half precision) as the runtime's code would lay them out; never set for a
     * model that runs. */
    bool sizing_only;
    /* Mixed precision with every saved activation in fp32: the inputs of the linear layers (norm
     * outputs, the MLP activation) are then rounded by each GEMM that reads them instead of
     * being stored rounded once. Bitwise the same results, twice the memory of those tensors;
     * for tests that prove it (tr_train_opts.no_half_acts sets it). */
    int no_half_acts;
    /* LoRA (runtime/peft/lora.h): 0, or the adapters' rank on the linear layers whose bit
     * (1 << TR_LORA_*) is set in lora_targets; every other parameter is then frozen. */
    int lora_rank;
    unsigned lora_targets;
    /* DoRA (peft.scheme=dora; runtime/model/adapters/dora.h): each adapted layer also has a
     * magnitude vector m [out], and its output (before the bias) is scaled per output by m / ||W +
     * scale B A|| (row norms, treated as constants in backward). */
    int lora_dora;
    float lora_scale;             /* alpha / rank */
    int lora_a_init, lora_b_init; /* TR_INIT_* of the adapters' A [rank, in] and B [out, rank] */
    float lora_dropout;           /* dropout on the adapter's input (training only) */
    /* Activation recomputation (model.recompute_*, Megatron's semantics; docs/runtime.md,
     * "Recomputation"): what a (part, slot) keeps of each layer and what its backward recomputes
     * into one shared scratch set. Bitwise the same losses and gradients as without. */
    int recompute;        /* TR_RECOMPUTE_* */
    int recompute_block;  /* full: 1 the first recompute_layers of each part, 0 uniform runs */
    int recompute_layers; /* full: recompute_num_layers */
    unsigned recompute_modules; /* selective: bits 1 << TR_RC_MOD_* */
    /* model.defer_embedding_wgrad_compute (pipeline parallel; runtime/model/defer_wgrad.c): how
     * many microbatches of an iteration (the first ones; Megatron's wgrad_deferral_limit, all of
     * them when it is 0) leave the output layer's weight gradient to tr_model_drain_wgrad
     * instead of computing it in their backward; 0: none. Ignored when the output layer is
     * frozen (LoRA). */
    int defer_wgrad;
    /* Mixture of experts (runtime/moe/moe.h): the layers moe.layers marks have an MoE layer
     * after pre_mlp_layernorm instead of the MLP; moe.experts 0: a dense model. */
    tr_moe_spec moe;
} tr_model_spec;

enum { TR_RECOMPUTE_NONE, TR_RECOMPUTE_FULL, TR_RECOMPUTE_SELECTIVE };
/* Megatron's recompute_modules the runtime implements. */
enum {
    TR_RC_MOD_CORE_ATTN,
    TR_RC_MOD_MLP,
    TR_RC_MOD_LAYERNORM,
    TR_RC_MOD_MLA_UP_PROJ,
    TR_RC_MOD_MOE,
    TR_RC_MOD_MOE_ACT,
    TR_RC_MOD_SHARED_EXPERTS
};

/* The adaptable linear layers of a transformer layer (Megatron's module names). */
enum { TR_LORA_QKV, TR_LORA_PROJ, TR_LORA_FC1, TR_LORA_FC2, TR_LORA_TARGETS };

/* Which shard of the logical tensors this rank holds (tensor parallelism). */
typedef struct tr_tp_shard {
    int rank, size;
} tr_tp_shard;

/* One parameter tensor: a named range of the flat buffer. Under tensor parallelism it is this
 * rank's shard of a logical [full_rows, full_cols] tensor, split along split_dim. */
typedef struct tr_param_info {
    char name[128]; /* Megatron's names, e.g. decoder.layers.0.self_attention.linear_qkv.weight */
    int64_t offset, numel;
    int rows, cols; /* 2-D view of the shard; vectors have rows == 1 */
    bool no_decay;  /* biases and norm weights: Megatron applies no weight decay to them */
    int init;       /* TR_INIT_* */
    int split_dim;  /* -1: the same on every TP rank; 0: rows split; 1: columns split */
    /* SwiGLU's fc1: the split dimension is [gate; up] and each rank holds its slice of both. */
    bool swiglu_split;
    /* Each TP rank's gradient covers a part only, and the sum over the TP group is the gradient:
     * its sequence chunk under sequence parallelism (norms, position embedding), or its heads
     * (the q/k norms, replicated while the heads are split, with or without SP). */
    bool sp_partial;
    /* Pipeline parallel: the loss stage's own copy of the word embedding, held when that stage
     * reads it (tr_model_spec_shares_embedding: the tied output layer's weight, the MTP depths'
     * lookup table). The first stage's tensor is the one that counts once (grad norm,
     * checkpoint); the copy is kept equal by the embedding group's gradient all-reduce. */
    bool tied_copy;
    /* LoRA: a base weight that is never trained (no gradient, no update, no weight decay). */
    bool frozen;
    /* TP larger than the query groups (linear_qkv, its bias and its LoRA B): along the split
     * dimension the shard is this rank's kv_q query rows, then kv_len rows holding a copy of its
     * group's key and value heads, which kv_rep consecutive TP ranks share. Their gradients are
     * partial per rank (tr_model_reduce_kv_grad sums them); kv_rep 1: nothing replicated. */
    int kv_rep, kv_q, kv_len;
    int full_rows, full_cols; /* the logical tensor */
    /* A routed expert's weight held by this EP rank only (spec.moe.ep_size > 1), or this
     * expert-TP rank's shard of it (spec.moe.etp_size > 1: split_dim over the expert-TP group,
     * tr_model_param_shard): its gradient goes to the expert buffer, reduced over the
     * expert-data-parallel group. */
    bool expert;
} tr_param_info;

enum {
    TR_INIT_NORMAL,
    TR_INIT_SCALED_NORMAL,
    TR_INIT_EMBEDDING,
    TR_INIT_ZERO,
    TR_INIT_ONE,
    TR_INIT_XAVIER,   /* normal, std sqrt(2 / (fan_in + fan_out)) (LoRA "xavier") */
    TR_INIT_NORMAL02, /* normal, std 0.2 (LoRA "normal") */
    TR_INIT_KAIMING   /* uniform in +-1/sqrt(fan_in) (LoRA "kaiming", a = sqrt(5)) */
};

typedef struct tr_layer_views {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    float *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
    float *qn_w, *qn_b, *kn_w, *kn_b; /* qk_norm: the q_layernorm and k_layernorm */
    float *lora_a[TR_LORA_TARGETS], *lora_b[TR_LORA_TARGETS]; /* NULL: no adapter */
    float *lora_m[TR_LORA_TARGETS];                           /* DoRA's magnitudes, or NULL */
    tr_mla_weights mla;                                       /* spec.mla.on */
    /* An MTP depth's own tensors, on the views of its transformer layer (NULL elsewhere). */
    float *mtp_enorm_w, *mtp_enorm_b, *mtp_hnorm_w, *mtp_hnorm_b, *mtp_eh_w;
    float *mtp_fnorm_w, *mtp_fnorm_b;
} tr_layer_views;

/* Pointers into one flat buffer (parameters or their gradients); NULL where absent. */
typedef struct tr_model_views {
    float *word_emb, *pos_emb, *final_w, *final_b, *out_w;
    float *mtp_emb;         /* the word embedding MTP reads (the last stage's copy under PP) */
    tr_layer_views *layers; /* decoder layers, then the MTP depths' transformer layers */
} tr_model_views;

/* One layer's saved activations. In mixed precision the inputs of QKV, fc1 and fc2 are kept
 * only as their bf16/fp16 bit patterns (the *_h fields; the gathered rows under sequence
 * parallelism), because those GEMMs are their only consumers and round them anyway; the fp32
 * fields they replace are then NULL (docs/runtime.md, "Saved activations"). An input a LoRA
 * adapter also reads (fp32) stays fp32. Under recomputation the pointers of what a layer does not
 * keep point into the model's shared recompute sets (rc_sets), the same for every slot. */
typedef struct tr_layer_acts {
    float *x_in, *ln1, *ln1_mean, *ln1_rstd, *q, *k, *v, *attn, *lse;
    float *x_mid, *ln2, *ln2_mean, *ln2_rstd, *fc1, *act;
    float *ln1_full, *ln2_full; /* sequence parallel: the gathered norm outputs */
    uint16_t *ln1_h, *ln2_h, *act_h;
    /* qk_norm: q and k before their norm (q and k above are normalised and rotated), and the
     * per-head statistics (mean for LayerNorm only); NULL without it. */
    float *q_raw, *k_raw, *qn_mean, *qn_rstd, *kn_mean, *kn_rstd;
    tr_mla_acts mla; /* spec.mla.on: what MLA keeps (q, k, v above are then NULL) */
} tr_layer_acts;

/* A contiguous part of the model (a pipeline stage): layers [first_layer, first_layer +
 * num_layers) with their GLOBAL numbers, plus the embedding in front (first_layer 0) and/or the
 * final norm, output layer and loss behind (the last layer). slots: how many microbatches of
 * the part are in flight at once (forwarded, not yet backwarded), one activation set each;
 * 0 counts as 1. */
typedef struct tr_model_part {
    int first_layer, num_layers;
    bool has_embedding, has_loss;
    int slots;
} tr_model_part;

/* What the backward of one (part, slot) needs from its forward. Head fields are NULL unless
 * the part has the loss, ids unless it has the embedding. */
typedef struct tr_slot_acts {
    tr_layer_acts *layers; /* the part's layers, first_layer first */
    float *x_final, *lnf, *lnf_mean, *lnf_rstd, *lnf_full, *logits, *ce_stats, *losses, *dloss;
    uint16_t *lnf_h; /* mixed precision: the output layer's input, half precision (lnf NULL) */
    int32_t *ids, *targets;
    int64_t n_valid;
    uint64_t dropout_round;
    /* The microbatch's packed-sequence layout (tr_model_set_sequences), kept for its backward;
     * unused (NULL in m->doc_start / m->pos_ids) when has_doc / has_pos is false. */
    int32_t *doc_start, *pos_ids;
    bool has_doc, has_pos;
    tr_mtp_acts *mtp; /* [spec.mtp_layers] on the loss part, else NULL */
} tr_slot_acts;

/* Per-parameter events for the training loop's communication (index = position in info, the
 * model order). before_param: the forward is about to read the parameter (a pending parameter
 * all-gather must finish). grad_ready: the backward has added this microbatch's last
 * contribution to its gradient (a tied embedding after both of its uses; a deferred output
 * weight from tr_model_drain_wgrad, once per iteration). NULL: no event. */
typedef struct tr_model_hooks {
    void *ctx;
    tr_status (*before_param)(void *ctx, int param);
    tr_status (*grad_ready)(void *ctx, int param);
} tr_model_hooks;

typedef struct tr_model {
    /* This rank's sizes: heads, groups, ffn and vocab are the logical ones divided by tp.size. */
    tr_model_spec spec;
    tr_model_spec full; /* the logical model */
    tr_tp_shard tp;
    /* Context parallelism: the ring that replaces the attention op (set by the caller before
     * the first forward when spec.cp > 1); NULL otherwise. */
    struct tr_cp *cp;
    /* The TP group's collectives (tensor_parallel.h); NULL when tp.size == 1. */
    struct tr_comm *comm;
    int tp_group;
    const tr_ops *ops;
    /* Where params, grads, activations and token ids live (runtime/device/device.h); the host
     * device unless created with tr_model_create_parts_on. Host code never dereferences them unless
     * tr_device_host_visible(dev). */
    struct tr_device *dev;
    int batch; /* micro batch size the activations are sized for */
    int qkv_dim, fc1_dim;

    float *params, *grads; /* the flat buffers */
    int64_t n_params;
    tr_param_info *info;
    int n_info;
    tr_model_views p, g;
    /* The parts this model holds (one whole part for a plain model). */
    tr_model_part *parts;
    int n_parts;
    /* Pipeline parallel: this loss stage holds its own copy of the word embedding
     * (tr_param_info.tied_copy): the tied output layer's weight, or (untied) the MTP depths'
     * lookup table only. */
    bool has_tied_copy;

    /* Activations: per (part, slot) in slot_acts[slot_start[part] + slot]; the fields below
     * point at the (part, slot) the current forward or backward works on (acts is indexed by
     * global layer, valid for the current part's layers only). */
    float *act_buf;
    int64_t act_numel; /* floats in act_buf: every slot plus the shared scratch */
    /* Recomputation: the shared sets the recomputed tensors of a layer live in (full: one per
     * layer of the longest run; selective: one), NULL without recomputation. */
    tr_layer_acts *rc_sets;
    int n_rc_sets;
    int32_t *tok_buf;
    tr_slot_acts *slot_acts;
    int *slot_start;
    tr_layer_acts *acts;
    float *x_final, *lnf, *lnf_mean, *lnf_rstd, *logits, *ce_stats, *losses, *dloss;
    uint16_t *lnf_h;
    float *rope_cos, *rope_sin;
    float *loss_dev; /* tr_model_forward's microbatch loss, before its copy to the host */
    float *lnf_full, *sp_full, *sp_perm; /* sequence parallel: gathered rows and scratch */
    int32_t *ids, *targets;
    /* Backward scratch. */
    float *dx, *dtmp, *dbig, *dact, *dq, *dk, *dv;
    float *dq_raw, *dk_raw; /* qk_norm: the gradients of q and k before their norm */
    tr_mla_scratch mla_sc;  /* spec.mla.on: MLA's rotary tables and scratch */
    tr_mtp_acts *mtp;       /* spec.mtp_layers: the current slot's depths */
    tr_mtp_scratch mtp_sc;
    int64_t mtp_count;      /* training forwards whose MTP losses mtp_sc.sum holds */
    int64_t n_valid;        /* targets >= 0 in the current microbatch */
    uint64_t dropout_seed;  /* rng.seed-derived; the offset below makes each site distinct */
    uint64_t dropout_round; /* set by the caller to a new value for every training microbatch */
    int training;           /* 0 during evaluation: no dropout */
    /* fp16 loss scaling (runtime/optimizer/loss_scaler.h): the loss gradient is multiplied by this,
     * so every parameter gradient comes out scaled; 0 means no scaling. */
    float grad_loss_scale;
    tr_model_hooks hooks;
    /* Mixture of experts: per global layer its MoE layer (NULL: dense or not held), the index in
     * info of its first tensor (its tr_moe_params follow in order), the local slot of the
     * current (part, slot), and the main loss's backward scale (the balancing losses' too). */
    tr_moe_layer **moe;
    int *moe_param0;
    int moe_slot;
    float moe_loss_scale;
    bool moe_rerun; /* the layers' forward is recomputation's rerun (tr_moe_recompute) */
    /* The MoE layers' recompute states (tr_moe_dims.rc_buf / rc_ibuf) by set, NULL unused, and
     * the bytes of every MoE buffer (tr_moe_buffer_bytes of each layer and these). */
    int64_t moe_act_bytes;
    float *moe_rc_buf[TR_MOE_MAX_LAYERS];
    int32_t *moe_rc_ibuf[TR_MOE_MAX_LAYERS];
    /* Mixed precision: the linear layers' weights rounded to spec.lowp (bf16/fp16 bit patterns),
     * what their forward and input-gradient GEMMs read (docs/runtime.md, "Mixed precision").
     * NULL in fp32 or with spec.no_weight_copy. Tensor i's copy starts at wcopy_off[i] (-1: none;
     * own aligned offsets, independent of the fp32 layout) and was made from the parameters of
     * version wcopy_version[i]; params_version counts the changes of the fp32 parameters
     * (tr_model_params_changed / _stepped), frozen_version is the last change that may have
     * touched frozen tensors (LoRA's base). A tensor is re-cast when the forward is about to
     * read it (tr_model_before_params, after any pending parameter all-gather) if its copy is
     * older than that; a GEMM that finds a stale copy fails. wcopy_verify (host-visible
     * devices): a copy found current is compared with a fresh cast, so a parameter write that
     * forgot to report itself is an error, not a silent use of old weights. */
    uint16_t *wcopy;
    int64_t *wcopy_off;
    uint64_t *wcopy_version;
    uint64_t params_version, frozen_version;
    bool wcopy_verify;
    /* Packed fine-tuning sequences: the layout the next forwards take (tr_model_set_sequences),
     * and the one of the (part, slot) in progress, else NULL: one document per row, positions
     * 0..seq-1 (pretraining). */
    const int32_t *next_doc_start, *next_pos_ids;
    const int32_t *doc_start, *pos_ids;
    float *pos_cos, *pos_sin; /* RoPE tables gathered per token by position id */
    int32_t *pos_local;       /* the positions of the rows this rank holds */
    float *lora_u, *lora_du;  /* LoRA scratch [batch * seq, rank]: x A^T and its gradient */
    float *lora_x;            /* [batch * seq, widest input]: the adapter's dropped-out input */
    /* DoRA: per (layer, target) the output scale m / ||V|| and 1 / ||V|| of the weights of this
     * step (dora_at[layer * TR_LORA_TARGETS + target] floats into dora_scale, -1: none), a block
     * of rows of V = W + scale B A (dora_v, dora_v_rows rows of the widest input), and the
     * whole-sequence pre-scale output z, then dz, of the layer in backward (dora_z). */
    float *dora_scale, *dora_v, *dora_z;
    int64_t *dora_at;
    int dora_v_rows;
    /* TP larger than the query groups: one slot per group of the widest key-value gradient
     * (tr_model_reduce_kv_grad); NULL otherwise. */
    float *kv_scratch;
    /* Deferred output-layer weight gradients (runtime/model/defer_wgrad.c): room for defer_cap
     * microbatches (0: no deferral), defer_n kept since the last drain, each the output layer's
     * input as its backward would read it and the logits gradient (both in half precision in
     * mixed precision), in act_buf. */
    int defer_cap, defer_n;
    float *defer_x, *defer_dy;
} tr_model;

/* Reads the model section (and the derived padded vocab) into a spec; features the CPU runtime
 * does not implement yet are reported as diagnostics (id runtime.unsupported) with the key and
 * the fix. */
tr_status tr_model_spec_from_config(const tr_config *c, tr_model_spec *s, tr_diags *d);

/* Lays out parameters, gradients and activations of `parts` (a pipeline rank's chunks: disjoint
 * layers, at most one with the embedding and one with the loss) for micro batches of `batch`
 * sequences of spec.seq tokens, for TP shard `tp` of the logical model s (heads, query groups,
 * ffn and the padded vocabulary must divide by tp.size). Only the parts' parameters exist, named
 * with global layer numbers; parts that have the loss but not the embedding get a copy of the
 * word embedding when they read it (tr_model_spec_shares_embedding). Parameters are zero until
 * tr_model_init_weights or a load. With tp.size > 1 set m->comm (and m->tp_group) before the first
 * forward. */
tr_status tr_model_create_parts(tr_model *m, const tr_model_spec *s, tr_tp_shard tp,
                                const tr_ops *ops, int batch, const tr_model_part *parts,
                                int n_parts);
/* The same on a device (runtime/device/device.h): its op table and its memory. */
tr_status tr_model_create_parts_on(tr_model *m, struct tr_device *dev, const tr_model_spec *s,
                                   tr_tp_shard tp, int batch, const tr_model_part *parts,
                                   int n_parts);
/* The whole model as one part with one activation set. */
tr_status tr_model_create(tr_model *m, const tr_model_spec *s, tr_tp_shard tp, const tr_ops *ops,
                          int batch);
void tr_model_free(tr_model *m);

/* Megatron's initialisation: N(0, init_std) for QKV, fc1, an untied output layer; embeddings
 * N(0, embed_init_std); attention and MLP output projections N(0, init_std/sqrt(2 L)); biases 0;
 * norm weights 1 (0 with zero-centred gamma). Each element is drawn from a counter-based stream
 * keyed by (seed, tensor, logical element), so the values do not depend on the layout. */
tr_status tr_model_init_weights(tr_model *m, uint64_t seed);
/* DoRA: each magnitude m = ||W + scale B A|| (row norms), so the model computes the base model
 * with its adapters; done by tr_model_init_weights, and again by whoever loads other base
 * weights into a fresh DoRA model (a pretrained checkpoint). Nothing for other models. */
tr_status tr_model_init_dora_magnitudes(tr_model *m);

/* Every write of m->params outside the model's own functions (optimizer steps, checkpoint
 * loads, tests) must be followed by this before the next forward: the half-precision weight copy
 * is re-cast from the new values when the forward reaches each tensor. Cheap (a counter). */
void tr_model_params_changed(tr_model *m);
/* The same for an optimizer step, which leaves frozen tensors (tr_param_info.frozen) as they
 * are: LoRA's frozen base keeps its copy instead of being re-cast every step. */
void tr_model_params_stepped(tr_model *m);

/* Forward of one microbatch through a whole model: ids and targets are [batch, seq] (targets < 0
 * are not trained on). Writes the mean loss over the trained tokens to *loss (0 when there are
 * none), a host float: on a device this waits for the forward (the training loop uses
 * tr_model_forward_part, which leaves the loss in device memory). */
tr_status tr_model_forward(tr_model *m, const int32_t *ids, const int32_t *targets, float *loss);

/* Backward of the last forward, ACCUMULATING into m->grads; loss_scale multiplies the
 * microbatch's mean loss (1/num_microbatches under gradient accumulation). Call it once per
 * forward: it overwrites the logits with their gradient. */
tr_status tr_model_backward(tr_model *m, float loss_scale);

/* Forward of m->parts[part] for one microbatch into activation set `slot`: ids are read with the
 * embedding, targets with the loss (written to *loss, one float in the model device's memory,
 * as tr_model_forward's value but not read back: NULL keeps it in the model's own scratch;
 * host memory on the cpu device); otherwise the part starts from
 * x_in and leaves its output in x_out, both [batch, seq (/ tp with sequence parallelism),
 * hidden]. The slot keeps what the backward needs (and m->dropout_round) until then. */
tr_status tr_model_forward_part(tr_model *m, int part, int slot, const int32_t *ids,
                                const int32_t *targets, const float *x_in, float *x_out,
                                float *loss);
/* Backward of the forward stored in (part, slot) (gradients accumulate): from the loss (scaled
 * as in tr_model_backward) or from dy, the gradient of its output; without the embedding the
 * gradient of its input goes to dx_out. */
tr_status tr_model_backward_part(tr_model *m, int part, int slot, float loss_scale, const float *dy,
                                 float *dx_out);
/* Megatron's drain_embedding_wgrad_compute: adds the output layer's weight gradients that the
 * loss part's backwards left for later (spec.defer_wgrad), in the order of those
 * backwards, then reports the output weight's gradient ready (tr_model_hooks.grad_ready); a
 * no-op without deferral. The pipeline calls it at the flush, before the gradient reduction. */
tr_status tr_model_drain_wgrad(tr_model *m);

/* The document layout of the microbatches forwarded from now on, each array [batch, seq]
 * (tr_token_sequence): a token attends only within its document (doc_start, the attention op's
 * document mask) and its position (RoPE, learned positions) is pos_ids. Both NULL restores
 * pretraining. Each forward copies the layout into its activation slot, so the caller may reuse
 * the arrays for the next microbatch before this one's backward (pipeline schedules). */
tr_status tr_model_set_sequences(tr_model *m, const int32_t *doc_start, const int32_t *pos_ids);

/* Multi-token prediction: the mean training loss of each depth over the forwards since the last
 * call (out[spec.mtp_layers]; 0 where this model ran none), then starts again. */
tr_status tr_model_mtp_losses(tr_model *m, float *out);

/* Activation sets this model keeps for global layer `layer` (0: a layer it does not hold). */
int tr_model_layer_slots(const tr_model *m, int layer);

/* Mixture of experts, once per optimizer step (after the backward of its last microbatch): the
 * balancing and z losses of the step's training microbatches summed over this rank's MoE
 * layers (divided by their coefficients, Megatron's logged values) and how many (layer,
 * microbatch) pairs they cover, restarting the sums; and the expert-bias update from the step's
 * token counts, which `reduce` (NULL: none) first sums over the data-parallel ranks. */
void tr_model_moe_stats(tr_model *m, double *lb, double *z, int *n);
tr_status tr_model_moe_step_end(tr_model *m, tr_status (*reduce)(void *ctx, double *v, int n),
                                void *ctx);
/* Tokens per expert since the last call (training forwards, after drops), out [(num_layers +
 * mtp_layers) * moe.experts] by global layer (an MTP depth's after the decoder's): zeros for a
 * dense layer or one this model does not hold. */
void tr_model_moe_tokens(tr_model *m, double *out);
/* Points the MoE layers at their tensors (after the flat buffers moved). */
tr_status tr_model_moe_bind(tr_model *m);
/* Gives the MoE layers the comm whose EP group carries their tokens (spec.moe.ep_size > 1). */
void tr_model_moe_set_comm(tr_model *m, struct tr_comm *comm);

/* What MoE layer `layer` of part p shares in its recompute state (tr_moe_dims.rc,
 * TR_MOE_RC_*): the whole layer in a full-recomputation run (an MTP depth's layer on the loss
 * part included) or with selective `moe`, else what `moe_act` / `shared_experts` name; and in
 * *set which recompute state, shared by the layers of every part with that number (a run's
 * place, as the model's recompute sets; 0 under selective). The runtime's layers and the
 * planner's sizing both ask this. */
unsigned tr_model_moe_rc(const tr_model_spec *s, const tr_model_part *p, int layer, int *set);
/* Layer `layer` (an MTP depth's past the decoder's) has an MoE MLP. */
bool tr_model_is_moe_layer(const tr_model_spec *s, int layer);
/* The parameter list tr_model_create_parts would lay out (no buffers): *info is allocated
 * (free it), offsets are those of the model's own flat buffer, *numel its size. */
tr_status tr_model_param_list(const tr_model_spec *s, tr_tp_shard tp, const tr_model_part *parts,
                              int n_parts, tr_param_info **info, int *n_info, int64_t *numel);

/* The sizing fields of a model that is never allocated (spec, full, tp, batch, qkv_dim,
 * fc1_dim, parts, which it borrows; nothing to free): what tr_model_create_parts would make,
 * for sizing (tr_model_act_sizes; runtime/plan). Checked as creation checks. */
tr_status tr_model_shape(tr_model *m, const tr_model_spec *s, tr_tp_shard tp, int batch,
                         const tr_model_part *parts, int n_parts);

/* The activation allocations of a model of that shape, from the pass that carves them. */
typedef struct tr_model_act_size {
    int64_t act_bytes; /* the activation arena: every slot, recompute sets, scratch */
    int64_t tok_bytes; /* per slot ids, targets, document starts, position ids */
    int rc_sets;       /* shared recompute sets */
    int defer_cap;     /* deferred output-layer weight gradients held */
} tr_model_act_size;
tr_status tr_model_act_sizes(const tr_model *shape, tr_model_act_size *out);

/* The buffers the first packed-sequence microbatch makes (tr_model_set_sequences with
 * position ids): this rank's position rows, and each of the two gathered RoPE tables (0 without
 * RoPE). */
void tr_model_position_bytes(const tr_model *m, int64_t *local, int64_t *table);

/* Moves every parameter i to offsets[i] of new flat buffers of numel floats (a data-parallel
 * gradient layout's offsets), keeping the values; the gradients restart at zero and elements
 * outside every parameter stay zero. */
tr_status tr_model_relayout(tr_model *m, const int64_t *offsets, int64_t numel);

/* TP ranks holding a copy of each query group's key and value heads: tp.size / groups when TP
 * is larger than the query groups, else 1. */
int tr_model_kv_replicas(const tr_model_spec *s, tr_tp_shard tp);

/* The elements [*off, *off + *numel) of p's shard that are its query group's key and value
 * heads, copies of which other TP ranks hold (p->kv_rep > 1); *numel 0 when none. */
void tr_param_kv_range(const tr_param_info *p, int64_t *off, int64_t *numel);

/* The shard p is on this rank: its TP shard, or for an expert weight split over expert TP its
 * expert-TP rank and size (split_dim then names the expert-TP split). */
tr_tp_shard tr_model_param_shard(const tr_model *m, const tr_param_info *p);
/* The logical element (row-major in the full_rows x full_cols tensor) of element e of p's shard
 * on this rank. */
int64_t tr_model_logical_index(const tr_model *m, const tr_param_info *p, int64_t e);
/* How many local elements from e on (to the end of its local row) have consecutive logical
 * indices: a converter copies that run at once. */
int64_t tr_model_logical_run(const tr_param_info *p, int64_t e);

/* The parameter named `name` (Megatron's name), or NULL. */
const tr_param_info *tr_model_find_param(const tr_model *m, const char *name);

/* The loss stage reads the word embedding, so under pipeline parallelism it holds a copy that
 * the embedding group keeps equal to the first stage's (Megatron's embedding group): as the tied
 * output layer, and as the MTP depths' lookup table (with an untied output layer too). */
static inline bool tr_model_spec_shares_embedding(const tr_model_spec *s) {
    return s->tied || s->mtp_layers > 0;
}

/* Rows of the position tables (RoPE, learned positions): the whole sequence under CP. */
static inline int tr_model_pos_rows(const tr_model_spec *s) {
    return s->cp > 1 ? s->seq * s->cp : s->seq;
}

/* Forward FLOPs of one sequence of spec.seq tokens (matmuls and attention), for throughput. */
double tr_model_flops_per_seq(const tr_model_spec *s);

#endif
