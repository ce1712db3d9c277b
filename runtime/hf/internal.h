/* Internal to runtime/hf/: the shapes an import checks tensors against, and one architecture's
 * map from Trestle's logical tensors to the Hugging Face tensors they are made of. */
#ifndef TR_HF_INTERNAL_H
#define TR_HF_INTERNAL_H

#include "runtime/hf/hf.h"

typedef struct tr_hf_shape {
    int64_t hidden, heads, groups, head_dim, ffn, vocab, layers, seq;
    int64_t hf_vocab; /* the checkpoint's rows: vocab without Trestle's padding */
    bool tied;
    bool qk_norm;    /* Qwen3's per-head q_norm / k_norm */
    tr_moe_spec moe; /* MixtralForCausalLM, Qwen3MoeForCausalLM: which layers, how many experts */
    tr_mla_spec mla; /* DeepSeek-V3's multi-latent attention (mla.on) */
    int mtp;         /* DeepSeek-V3's MTP depths: HF layers layers.. layers + mtp - 1 */
} tr_hf_shape;

/* The HF tensors (up to three) one Trestle tensor is made of, and how (the architecture's own
 * numbering). */
typedef struct tr_hf_source {
    int kind;
    const tr_st_tensor *t[3];
} tr_hf_source;

typedef struct tr_hf_arch {
    const char *name; /* config.json's architectures[0] */
    /* Whether an HF tensor has a place in the model (a name that has none is another model). */
    bool (*known)(const char *hf_name, const tr_hf_shape *k);
    /* The source of Trestle tensor `name`, each HF tensor checked for shape ("hf.tensor"). */
    tr_status (*source)(const char *name, const tr_hf_shape *k, const tr_hf_weights *w,
                        tr_hf_source *s, tr_diags *d);
    /* Where element (r, c) of the logical (unsharded) Trestle tensor lives: the source tensor
     * s->t[returned] and its flat index *at; -1 for an element the checkpoint does not hold (the
     * vocabulary padding, zero). Import reads there, export writes there: one map, both ways. */
    int (*locate)(const tr_hf_source *s, const tr_hf_shape *k, int64_t r, int64_t c, int64_t *at);
    /* Whether a row of source s lies in order: (r, c + j) at *at + j of the same tensor (or all
     * absent), so that the converters copy whole runs. NULL: every source's rows do. */
    bool (*rows_in_order)(const tr_hf_source *s);
} tr_hf_arch;

/* The elements of the logical row r from column c on that the converters may move at once: n
 * (at most) when the architecture's rows of s lie in order, else 1. */
int64_t tr_hf_row_run(const tr_hf_arch *a, const tr_hf_source *s, int64_t n);

extern const tr_hf_arch tr_hf_arch_llama, tr_hf_arch_qwen3, tr_hf_arch_gpt2, tr_hf_arch_deepseek_v3;
extern const tr_hf_arch tr_hf_arch_mixtral, tr_hf_arch_qwen3_moe;

/* The Llama map (llama.c) the MoE architectures extend: its known tensors (with Qwen3's q/k
 * norms when qwen3), sources and locations; its source kinds stay below 32. */
bool tr_hf_llama_known(const char *hf_name, const tr_hf_shape *k, bool qwen3);
tr_status tr_hf_llama_source(const char *name, const tr_hf_shape *k, const tr_hf_weights *w,
                             tr_hf_source *s, tr_diags *d);
int tr_hf_llama_locate(const tr_hf_source *s, const tr_hf_shape *k, int64_t r, int64_t c,
                       int64_t *at);

/* Row r of a Llama layer's fused linear_qkv (qkv) or linear_fc1 (else): which Hugging Face
 * projection holds it (q 0, k 1, v 2; gate 0, up 1) and at which *row. Shared by the weights'
 * map and the LoRA adapters' (runtime/hf/adapter.c), whose B rows follow their layer's rows. */
int tr_hf_llama_row(const tr_hf_shape *k, bool qkv, int64_t r, int64_t *row);

/* The Hugging Face names of an MoE block (runtime/hf/moe.c): its prefix under the layer, the
 * experts' projections, and (deepseek) DeepSeek-V3's router bias (gate.e_score_correction_bias)
 * and shared experts (shared_experts.gate_proj / up_proj / down_proj). */
typedef struct tr_hf_moe_names {
    const char *block, *gate, *up, *down;
    bool deepseek;
} tr_hf_moe_names;
extern const tr_hf_moe_names tr_hf_moe_mixtral, tr_hf_moe_qwen3, tr_hf_moe_deepseek;

/* Whether HF layer `layer` has an MoE block: a decoder layer the spec marks, or an MTP depth's
 * layer, built like the decoder's last (runtime/model/layout.c). */
bool tr_hf_is_moe_layer(const tr_hf_shape *k, int layer);
/* The source of `rest` (the Trestle name after "<layer>.mlp.") of MoE layer `layer`. */
tr_status tr_hf_moe_source(const tr_hf_moe_names *nm, int layer, const char *rest,
                           const tr_hf_shape *k, const tr_hf_weights *w, tr_hf_source *s,
                           tr_diags *d);
/* The location in an MoE source (its kinds are 32..39); false for another kind. */
bool tr_hf_moe_locate(const tr_hf_source *s, const tr_hf_shape *k, int64_t r, int64_t c,
                      int64_t *at, int *which);
/* Whether `rest` (the HF name after "model.layers.<layer>.") is a tensor of an MoE block. */
bool tr_hf_moe_known(const tr_hf_moe_names *nm, const char *rest, const tr_hf_shape *k);

/* model.safetensors.index.json's weight_map: tensor i lives in files[i], a plain file name
 * beside the index (no '/', not "." or ".."); names non-empty, without NULs. "hf.index" (or
 * "data.json_syntax") otherwise. Parsed apart from opening the shards so that it can be fuzzed
 * (tests/data/fuzz_hf_index.c). */
typedef struct tr_hf_index {
    char **tensors, **files;
    int n;
} tr_hf_index;
tr_status tr_hf_index_parse(const char *text, size_t len, const char *path, tr_hf_index *x,
                            tr_diags *d);
void tr_hf_index_free(tr_hf_index *x);

/* The shapes of a model's (unsharded) spec. */
tr_hf_shape tr_hf_shape_of(const tr_model_spec *f);

tr_status tr_hf_tensor_error(tr_diags *d, const char *name, const char *what);
/* A required tensor of rows x cols (cols 0: a vector of rows), F32, BF16 or F16. */
tr_status tr_hf_need(const tr_hf_weights *w, const char *name, int64_t rows, int64_t cols,
                     const tr_st_tensor **out, tr_diags *d);
/* Element i of t, widened to fp32. */
float tr_hf_value(const tr_st_tensor *t, int64_t i);
/* n consecutive values from element i on, as fp32. */
void tr_hf_values(const tr_st_tensor *t, int64_t i, int64_t n, float *out);

/* out[i] = tr_bf16_bits(in[i]) (kernels/common/lowp_bits.h) for i < n, bit for bit, faster. */
void tr_hf_bf16_from_f32(uint16_t *out, const float *in, int64_t n);

#endif
