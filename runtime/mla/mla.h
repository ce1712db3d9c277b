/* Multi-latent attention (DeepSeek-V2/V3; Megatron-Core's MLASelfAttention) over the op table.
 *
 * Queries: x -> linear_q_down_proj [q_lora_rank] -> q_layernorm -> linear_q_up_proj
 * [heads, qk_dim + rope_dim] (or linear_q_proj straight from x without q_lora_rank). Keys and
 * values: x -> linear_kv_down_proj [kv_lora_rank + rope_dim]; the latent part -> kv_layernorm ->
 * linear_kv_up_proj [heads, qk_dim + v_dim] gives each head's key (no position) and value; the
 * rope part is one rotary key shared by every head (the decoupled RoPE). The rope channels are
 * stored interleaved (pairs 2i, 2i+1), as Megatron and DeepSeek keep them: they are
 * de-interleaved, then rotated as rotate-half pairs (i, i + rope_dim / 2), Megatron's MLA path.
 * YaRN (rope_type=yarn) scales the frequencies, the cos/sin tables (mscale / mscale_all_dim) and
 * the softmax (mscale_all_dim squared).
 *
 * Tensor parallelism as Megatron: the down projections and their norms are the same on every
 * rank (their gradients come out equal, being computed from all-reduced inputs), the up
 * projections are column-parallel over the heads, linear_proj (the model's) row-parallel.
 *
 * The attention op takes one head size for q, k and v: the operands are padded with zeros to
 * P = max(qk_dim + rope_dim, v_dim) channels, which changes no score and no output channel, and
 * the output's first v_dim channels are the heads' values. This folder knows no tr_model: the
 * model hands it views of its weights and buffers (runtime/model/forward.c, backward.c). */
#ifndef TR_RUNTIME_MLA_H
#define TR_RUNTIME_MLA_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "kernels/ops.h"

struct tr_comm;

/* The MLA part of a model spec (logical sizes; heads come from the model). */
typedef struct tr_mla_spec {
    int on;
    int q_lora_rank; /* 0: linear_q_proj straight from the hidden state */
    int kv_lora_rank, qk_dim, rope_dim, v_dim;
    int norms; /* q_layernorm and kv_layernorm (Megatron's qk_layernorm under MLA), RMSNorm */
    int yarn;  /* rope_type=yarn */
    double rope_base, factor, mscale, mscale_all_dim, original_max_position, beta_fast, beta_slow;
} tr_mla_spec;

/* A layer's MLA tensors (parameters or their gradients); NULL where absent. q_up is
 * linear_q_proj without q_lora_rank. */
typedef struct tr_mla_weights {
    float *q_down, *q_norm, *q_up, *kv_down, *kv_norm, *kv_up;
} tr_mla_weights;

/* What a layer keeps for its backward (rows = batch * seq). */
typedef struct tr_mla_acts {
    float *qc, *qcn, *qc_rstd;        /* q_lora_rank: compressed query, normalised, 1/rms */
    float *kvc, *kvl, *kvn, *kv_rstd; /* the down projection, its latent part, normalised */
    float *q, *k, *v, *o, *lse;       /* the attention's operands [rows, heads, P], lse */
} tr_mla_acts;

/* Shared by every layer: the rotary tables and the scratch of forward and backward. */
typedef struct tr_mla_scratch {
    float *cos, *sin;         /* [seq, rope_dim / 2], YaRN's mscale included */
    float *cos_tok, *sin_tok; /* the same gathered per token (packed sequences) */
    float *qf, *kvf, *pe, *kpe, *lat, *lat2, *dkvc, *dout, *dq, *dk, *dv;
} tr_mla_scratch;

/* One of a layer's tensors as the model lays it out: suffix after "decoder.layers.<i>.",
 * [rows, cols] on this rank, column-parallel (rows split over TP) or the same on every rank. */
typedef struct tr_mla_tensor {
    const char *name;
    int rows, cols;
    bool column, norm;
    int field; /* index for tr_mla_field */
} tr_mla_tensor;

enum { TR_MLA_MAX_TENSORS = 6 };

/* The tensors of one layer with `heads` heads on this rank, in Megatron's module order. */
int tr_mla_tensors(const tr_mla_spec *s, int heads, int hidden, tr_mla_tensor *out);
float **tr_mla_field(tr_mla_weights *w, int field);

/* Buffers are carved by the caller: carve(ctx, n) returns n floats (or NULL while sizing). */
typedef float *(*tr_mla_carve_fn)(void *ctx, int64_t n);
/* The parts of tr_mla_acts, kept or recomputed apart: the down projections and their norms,
 * the attention's operands (the up projections with the rotation: Megatron's mla_up_proj), and
 * its output and lse (core_attn). */
enum { TR_MLA_ACTS_LATENT = 1, TR_MLA_ACTS_QKV = 2, TR_MLA_ACTS_OUT = 4, TR_MLA_ACTS_ALL = 7 };
/* Carves the parts named (the others are left as they are). */
void tr_mla_carve_acts(const tr_mla_spec *s, int heads, int64_t rows, unsigned parts,
                       tr_mla_acts *a, tr_mla_carve_fn carve, void *ctx);
/* a's pointers of the parts named become from's. */
void tr_mla_share_acts(tr_mla_acts *a, const tr_mla_acts *from, unsigned parts);
void tr_mla_carve_scratch(const tr_mla_spec *s, int heads, int64_t rows, int seq,
                          tr_mla_scratch *sc, tr_mla_carve_fn carve, void *ctx);

/* The attention head size the op sees, and the softmax scale (YaRN's mscale_all_dim squared
 * over sqrt(qk_dim + rope_dim)). */
int tr_mla_attn_dim(const tr_mla_spec *s);
float tr_mla_softmax_scale(const tr_mla_spec *s);
/* The rotary frequency of pair i (YaRN's blend of interpolated and extrapolated frequencies)
 * and the factor YaRN multiplies cos and sin by. */
double tr_mla_inv_freq(const tr_mla_spec *s, int i);
double tr_mla_rope_mscale(const tr_mla_spec *s);
/* Fills sc->cos / sc->sin for positions 0..seq-1 (device memory of dev's kind, through a host
 * staging buffer). */
struct tr_device;
tr_status tr_mla_rope_tables(const tr_mla_spec *s, int seq, struct tr_device *dev,
                             tr_mla_scratch *sc);

/* One layer's call: sizes on this rank, the TP group (comm NULL or tp 1: none), the model's
 * attention descriptor (causal, documents, dropout; MLA sets the head sizes and scale), the
 * norms' epsilon, positions per token (NULL: 0..seq-1 in every row). */
typedef struct tr_mla_run {
    const tr_ops *ops;
    const tr_mla_spec *s;
    struct tr_comm *comm;
    int group, tp;
    int hidden, heads, batch, seq;
    float eps;
    int zero_centered;
    int lowp; /* 0 or the tr_lowp the projections' GEMM operands are rounded to (mixed precision) */
    tr_attn_desc attn;
    const int32_t *pos_ids;
    const tr_mla_scratch *sc;
} tr_mla_run;

/* x [rows, hidden] (the input norm's output) -> out [rows, heads * v_dim] (linear_proj's
 * input); saves into a. */
tr_status tr_mla_fwd(const tr_mla_run *r, const tr_mla_weights *w, const tr_mla_acts *a,
                     const float *x, float *out);
/* The two halves of tr_mla_fwd, for recomputation: the up projections and the rotation from
 * the saved latents (and, without q_lora_rank, x) into a's q, k, v; the attention from them into
 * a's o and lse and out. */
tr_status tr_mla_up_fwd(const tr_mla_run *r, const tr_mla_weights *w, const tr_mla_acts *a,
                        const float *x);
tr_status tr_mla_attn_fwd(const tr_mla_run *r, const tr_mla_acts *a, float *out);
/* From dout [rows, heads * v_dim]: accumulates the weights' gradients into g and OVERWRITES
 * dx [rows, hidden] with the gradient of x (summed over the TP group). */
tr_status tr_mla_bwd(const tr_mla_run *r, const tr_mla_weights *w, const tr_mla_weights *g,
                     const tr_mla_acts *a, const float *x, const float *dout, float *dx);

#endif
