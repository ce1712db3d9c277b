/* DeepseekV3ForCausalLM's tensors as the sources of Trestle's logical tensors, for the dense
 * layers (runtime/hf/internal.h): multi-latent attention maps one to one (q_a_proj is
 * linear_q_down_proj, q_a_layernorm q_layernorm, q_b_proj linear_q_up_proj, or q_proj
 * linear_q_proj, kv_a_proj_with_mqa linear_kv_down_proj, kv_a_layernorm kv_layernorm, kv_b_proj
 * linear_kv_up_proj, o_proj linear_proj), each in the row order both frameworks keep (heads
 * major, the rotary channels interleaved); the norms, the MLP, the embedding and the output
 * layer are Llama's. */
#include <stdio.h>
#include <string.h>

#include "runtime/hf/internal.h"

enum { MLA_TENSOR = 100 }; /* above Llama's kinds */

typedef struct mla_name {
    const char *hf, *trestle;
} mla_name;

static const mla_name mla_names[] = {
    {"self_attn.q_a_proj.weight", "self_attention.linear_q_down_proj.weight"},
    {"self_attn.q_a_layernorm.weight", "self_attention.q_layernorm.weight"},
    {"self_attn.q_b_proj.weight", "self_attention.linear_q_up_proj.weight"},
    {"self_attn.q_proj.weight", "self_attention.linear_q_proj.weight"},
    {"self_attn.kv_a_proj_with_mqa.weight", "self_attention.linear_kv_down_proj.weight"},
    {"self_attn.kv_a_layernorm.weight", "self_attention.kv_layernorm.weight"},
    {"self_attn.kv_b_proj.weight", "self_attention.linear_kv_up_proj.weight"}};

/* The shape of MLA tensor k (the table's order) in a model of shape s; false when the model has
 * no such tensor (queries compressed or not). */
static bool mla_shape(const tr_hf_shape *s, size_t k, int64_t *rows, int64_t *cols) {
    const tr_mla_spec *a = &s->mla;
    int64_t C = s->hidden, H = s->heads, qd = a->qk_dim + a->rope_dim, qr = a->q_lora_rank;
    int64_t kr = a->kv_lora_rank;
    const int64_t shapes[][2] = {{qr, C},
                                 {qr, 0},
                                 {H * qd, qr},
                                 {H * qd, C},
                                 {kr + a->rope_dim, C},
                                 {kr, 0},
                                 {H * (a->qk_dim + a->v_dim), kr}};
    *rows = shapes[k][0];
    *cols = shapes[k][1];
    if (k <= 2) return qr > 0;
    if (k == 3) return qr == 0;
    return true;
}

static tr_status deepseek_source(const char *name, const tr_hf_shape *k, const tr_hf_weights *w,
                                 tr_hf_source *s, tr_diags *d) {
    int layer, used = 0;
    if (sscanf(name, "decoder.layers.%d.%n", &layer, &used) == 1 && used > 0 && layer >= 0)
        for (size_t j = 0; j < sizeof mla_names / sizeof *mla_names; j++) {
            int64_t rows, cols;
            if (strcmp(name + used, mla_names[j].trestle) != 0 || !mla_shape(k, j, &rows, &cols))
                continue;
            char hf[160];
            memset(s, 0, sizeof *s);
            s->kind = MLA_TENSOR;
            snprintf(hf, sizeof hf, "model.layers.%d.%s", layer, mla_names[j].hf);
            return tr_hf_need(w, hf, rows, cols, &s->t[0], d);
        }
    return tr_hf_arch_llama.source(name, k, w, s, d);
}

static int deepseek_locate(const tr_hf_source *s, const tr_hf_shape *k, int64_t r, int64_t c,
                           int64_t *at) {
    if (s->kind != MLA_TENSOR) return tr_hf_arch_llama.locate(s, k, r, c, at);
    *at = s->t[0]->ndim == 2 ? r * s->t[0]->shape[1] + c : c;
    return 0;
}

static bool deepseek_known(const char *n, const tr_hf_shape *k) {
    int layer, used = 0;
    if (sscanf(n, "model.layers.%d.%n", &layer, &used) == 1 && used > 0 && layer >= 0 &&
        layer < k->layers)
        for (size_t j = 0; j < sizeof mla_names / sizeof *mla_names; j++) {
            int64_t rows, cols;
            if (strcmp(n + used, mla_names[j].hf) == 0) return mla_shape(k, j, &rows, &cols);
        }
    /* The rest is Llama's (its q/k/v projections are refused by their shapes' absence). */
    return strstr(n, ".self_attn.q_proj.") == NULL && strstr(n, ".self_attn.k_proj.") == NULL &&
           strstr(n, ".self_attn.v_proj.") == NULL && tr_hf_arch_llama.known(n, k);
}

const tr_hf_arch tr_hf_arch_deepseek_v3 = {"DeepseekV3ForCausalLM", deepseek_known, deepseek_source,
                                           deepseek_locate};
