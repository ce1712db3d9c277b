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
    tr_mla_spec mla; /* DeepSeek-V3's multi-latent attention (mla.on) */
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
} tr_hf_arch;

extern const tr_hf_arch tr_hf_arch_llama, tr_hf_arch_qwen3, tr_hf_arch_gpt2, tr_hf_arch_deepseek_v3;

/* The shapes of a model's (unsharded) spec. */
tr_hf_shape tr_hf_shape_of(const tr_model_spec *f);

tr_status tr_hf_tensor_error(tr_diags *d, const char *name, const char *what);
/* A required tensor of rows x cols (cols 0: a vector of rows), F32, BF16 or F16. */
tr_status tr_hf_need(const tr_hf_weights *w, const char *name, int64_t rows, int64_t cols,
                     const tr_st_tensor **out, tr_diags *d);
/* Element i of t, widened to fp32. */
float tr_hf_value(const tr_st_tensor *t, int64_t i);

#endif
