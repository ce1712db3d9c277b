/* DeepseekV3ForCausalLM's tensors as the sources of Trestle's logical tensors
 * (runtime/hf/internal.h): multi-latent attention maps one to one (q_a_proj is
 * linear_q_down_proj, q_a_layernorm q_layernorm, q_b_proj linear_q_up_proj, or q_proj
 * linear_q_proj, kv_a_proj_with_mqa linear_kv_down_proj, kv_a_layernorm kv_layernorm, kv_b_proj
 * linear_kv_up_proj, o_proj linear_proj), each in the row order both frameworks keep (heads
 * major, the rotary channels interleaved); the norms, the dense MLP, the embedding and the
 * output layer are Llama's, the MoE layers' blocks (router and its bias, experts, shared experts)
 * moe.c's. The MTP depths are DeepSeek's layers num_hidden_layers.. (enorm, hnorm, eh_proj,
 * shared_head.norm: Megatron's enorm, hnorm, eh_proj, final_layernorm; the rest of the layer
 * under its usual names), which transformers' model has no place for and skips on loading. */
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

/* An MTP depth's own tensors: Megatron's name after "mtp.layers.<d>.", DeepSeek's after
 * "model.layers.<num_layers + d>.", and (0) the norms or (1) eh_proj [hidden, 2 hidden]. */
static const struct {
    const char *trestle, *hf;
    int matrix;
} mtp_names[] = {{"enorm.weight", "enorm.weight", 0},
                 {"hnorm.weight", "hnorm.weight", 0},
                 {"eh_proj.weight", "eh_proj.weight", 1},
                 {"final_layernorm.weight", "shared_head.norm.weight", 0}};

static tr_status deepseek_source(const char *name, const tr_hf_shape *k, const tr_hf_weights *w,
                                 tr_hf_source *s, tr_diags *d) {
    int layer, used = 0;
    char hf[160];
    if (sscanf(name, "mtp.layers.%d.%n", &layer, &used) == 1 && used > 0 && layer >= 0 &&
        layer < k->mtp) {
        const char *rest = name + used;
        int at = (int)k->layers + layer;
        if (strncmp(rest, "mtp_model_layer.", 16) == 0) { /* the depth's transformer layer */
            char as[192];
            snprintf(as, sizeof as, "decoder.layers.%d.%s", at, rest + 16);
            return deepseek_source(as, k, w, s, d);
        }
        for (size_t j = 0; j < sizeof mtp_names / sizeof *mtp_names; j++)
            if (strcmp(rest, mtp_names[j].trestle) == 0) {
                memset(s, 0, sizeof *s);
                s->kind = MLA_TENSOR;
                snprintf(hf, sizeof hf, "model.layers.%d.%s", at, mtp_names[j].hf);
                return tr_hf_need(w, hf, k->hidden, mtp_names[j].matrix ? 2 * k->hidden : 0,
                                  &s->t[0], d);
            }
        return tr_hf_tensor_error(d, name, "Trestle has no Hugging Face name for this tensor");
    }
    if (sscanf(name, "decoder.layers.%d.mlp.%n", &layer, &used) == 1 && used > 0 &&
        tr_hf_is_moe_layer(k, layer))
        return tr_hf_moe_source(&tr_hf_moe_deepseek, layer, name + used, k, w, s, d);
    used = 0;
    if (sscanf(name, "decoder.layers.%d.%n", &layer, &used) == 1 && used > 0 && layer >= 0)
        for (size_t j = 0; j < sizeof mla_names / sizeof *mla_names; j++) {
            int64_t rows, cols;
            if (strcmp(name + used, mla_names[j].trestle) != 0 || !mla_shape(k, j, &rows, &cols))
                continue;
            memset(s, 0, sizeof *s);
            s->kind = MLA_TENSOR;
            snprintf(hf, sizeof hf, "model.layers.%d.%s", layer, mla_names[j].hf);
            return tr_hf_need(w, hf, rows, cols, &s->t[0], d);
        }
    return tr_hf_arch_llama.source(name, k, w, s, d);
}

static int deepseek_locate(const tr_hf_source *s, const tr_hf_shape *k, int64_t r, int64_t c,
                           int64_t *at) {
    int which = 0;
    if (tr_hf_moe_locate(s, k, r, c, at, &which)) return which;
    if (s->kind != MLA_TENSOR) return tr_hf_arch_llama.locate(s, k, r, c, at);
    *at = s->t[0]->ndim == 2 ? r * s->t[0]->shape[1] + c : c;
    return 0;
}

/* DeepSeek's MTP layers also hold copies of the word embedding and the output layer, which
 * Megatron shares with the main model: read from neither, accepted. */
static bool mtp_known(const char *rest) {
    if (strcmp(rest, "embed_tokens.weight") == 0 || strcmp(rest, "shared_head.head.weight") == 0)
        return true;
    for (size_t j = 0; j < sizeof mtp_names / sizeof *mtp_names; j++)
        if (strcmp(rest, mtp_names[j].hf) == 0) return true;
    return false;
}

static bool deepseek_known(const char *n, const tr_hf_shape *k) {
    int layer, used = 0;
    if (sscanf(n, "model.layers.%d.%n", &layer, &used) != 1 || used == 0)
        return tr_hf_arch_llama.known(n, k);
    const char *rest = n + used;
    if (layer < 0 || layer >= k->layers + k->mtp) return false;
    if (layer >= k->layers && mtp_known(rest)) return true;
    if (tr_hf_is_moe_layer(k, layer)) {
        if (tr_hf_moe_known(&tr_hf_moe_deepseek, rest, k)) return true;
        if (strncmp(rest, "mlp.", 4) == 0) return false;
    }
    for (size_t j = 0; j < sizeof mla_names / sizeof *mla_names; j++) {
        int64_t rows, cols;
        if (strcmp(rest, mla_names[j].hf) == 0) return mla_shape(k, j, &rows, &cols);
    }
    /* The rest is a Llama layer's (its q/k/v projections are refused by their shapes' absence),
     * asked of layer 0 so that an MTP depth's layer counts too. */
    char as[192];
    snprintf(as, sizeof as, "model.layers.0.%s", rest);
    return strncmp(rest, "self_attn.q_proj.", 17) != 0 &&
           strncmp(rest, "self_attn.k_proj.", 17) != 0 &&
           strncmp(rest, "self_attn.v_proj.", 17) != 0 && tr_hf_arch_llama.known(as, k);
}

const tr_hf_arch tr_hf_arch_deepseek_v3 = {.name = "DeepseekV3ForCausalLM",
                                           .known = deepseek_known,
                                           .source = deepseek_source,
                                           .locate = deepseek_locate};
