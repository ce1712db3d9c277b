/* LlamaForCausalLM's tensors as the sources of Trestle's logical tensors (runtime/hf/internal.h):
 * Megatron's grouped QKV rows from q/k/v, fc1 = [gate; up], the vocabulary padding zero.
 * Qwen3ForCausalLM is the same map plus its per-head q_norm / k_norm (Megatron's q_layernorm /
 * k_layernorm, [head_dim] each). */
#include <stdio.h>
#include <string.h>

#include "runtime/hf/internal.h"

/* The logical Trestle tensors of a Llama layer, and where each row comes from. */
typedef enum piece {
    EMBED,
    OUTPUT,
    FINAL_NORM,
    LN1,
    QKV,
    Q_NORM,
    K_NORM,
    PROJ,
    LN2,
    FC1,
    FC2,
    NONE
} piece;

static tr_status llama_source(const char *name, const tr_hf_shape *k, const tr_hf_weights *w,
                              tr_hf_source *s, tr_diags *d) {
    memset(s, 0, sizeof *s);
    s->kind = NONE;
    int layer, used = 0;
    char rest[96], hf[160];
    if (strcmp(name, "embedding.word_embeddings.weight") == 0) {
        s->kind = EMBED;
        return tr_hf_need(w, "model.embed_tokens.weight", k->hf_vocab, k->hidden, &s->t[0], d);
    }
    if (strcmp(name, "output_layer.weight") == 0) {
        s->kind = OUTPUT;
        return tr_hf_need(w, "lm_head.weight", k->hf_vocab, k->hidden, &s->t[0], d);
    }
    if (strcmp(name, "decoder.final_layernorm.weight") == 0) {
        s->kind = FINAL_NORM;
        return tr_hf_need(w, "model.norm.weight", k->hidden, 0, &s->t[0], d);
    }
    if (sscanf(name, "decoder.layers.%d.%95s%n", &layer, rest, &used) != 2 || layer < 0)
        return tr_hf_tensor_error(d, name, "Trestle has no Hugging Face name for this tensor");
    char pre[48];
    snprintf(pre, sizeof pre, "model.layers.%d.", layer);
    int64_t C = k->hidden, q = k->heads * k->head_dim, kv = k->groups * k->head_dim, F = k->ffn;
#define NEED(i, suffix, rows, cols)                                                                \
    (snprintf(hf, sizeof hf, "%s%s", pre, suffix), tr_hf_need(w, hf, rows, cols, &s->t[i], d))
    if (strcmp(rest, "input_layernorm.weight") == 0) {
        s->kind = LN1;
        return NEED(0, "input_layernorm.weight", C, 0);
    }
    if (strcmp(rest, "pre_mlp_layernorm.weight") == 0) {
        s->kind = LN2;
        return NEED(0, "post_attention_layernorm.weight", C, 0);
    }
    if (strcmp(rest, "self_attention.linear_qkv.weight") == 0) {
        s->kind = QKV;
        TR_TRY(NEED(0, "self_attn.q_proj.weight", q, C));
        TR_TRY(NEED(1, "self_attn.k_proj.weight", kv, C));
        return NEED(2, "self_attn.v_proj.weight", kv, C);
    }
    if (k->qk_norm && strcmp(rest, "self_attention.q_layernorm.weight") == 0) {
        s->kind = Q_NORM;
        return NEED(0, "self_attn.q_norm.weight", k->head_dim, 0);
    }
    if (k->qk_norm && strcmp(rest, "self_attention.k_layernorm.weight") == 0) {
        s->kind = K_NORM;
        return NEED(0, "self_attn.k_norm.weight", k->head_dim, 0);
    }
    if (strcmp(rest, "self_attention.linear_proj.weight") == 0) {
        s->kind = PROJ;
        return NEED(0, "self_attn.o_proj.weight", C, q);
    }
    if (strcmp(rest, "mlp.linear_fc1.weight") == 0) {
        s->kind = FC1;
        TR_TRY(NEED(0, "mlp.gate_proj.weight", F, C));
        return NEED(1, "mlp.up_proj.weight", F, C);
    }
    if (strcmp(rest, "mlp.linear_fc2.weight") == 0) {
        s->kind = FC2;
        return NEED(0, "mlp.down_proj.weight", C, F);
    }
#undef NEED
    return tr_hf_tensor_error(d, name, "Trestle has no Hugging Face name for this tensor");
}

int tr_hf_llama_row(const tr_hf_shape *k, bool qkv, int64_t r, int64_t *row) {
    if (!qkv) { /* fc1 = [gate; up] */
        *row = r < k->ffn ? r : r - k->ffn;
        return r < k->ffn ? 0 : 1;
    }
    /* Megatron's grouped rows: per KV group its query heads, then its key, then its value. */
    int64_t D = k->head_dim, hpg = k->heads / k->groups, per = (hpg + 2) * D;
    int64_t g = r / per, j = r % per;
    int which = j < hpg * D ? 0 : j < (hpg + 1) * D ? 1 : 2;
    *row = which == 0 ? g * hpg * D + j : g * D + j - (hpg + which - 1) * D;
    return which;
}

static int llama_locate(const tr_hf_source *s, const tr_hf_shape *k, int64_t r, int64_t c,
                        int64_t *at) {
    int64_t C = k->hidden;
    switch (s->kind) {
    case EMBED:
    case OUTPUT: /* rows past the checkpoint's vocabulary are Trestle's padding */
        *at = r * C + c;
        return r < s->t[0]->shape[0] ? 0 : -1;
    case FINAL_NORM:
    case LN1:
    case LN2:
    case Q_NORM:
    case K_NORM:
        *at = c;
        return 0;
    case QKV:
    case FC1: {
        int64_t row = 0;
        int which = tr_hf_llama_row(k, s->kind == QKV, r, &row);
        *at = row * C + c;
        return which;
    }
    case PROJ:
        *at = r * k->heads * k->head_dim + c;
        return 0;
    case FC2:
        *at = r * k->ffn + c;
        return 0;
    default:
        return -1;
    }
}

/* The tensors a LlamaForCausalLM (qwen3: Qwen3ForCausalLM) checkpoint of this shape holds. */
static bool known(const char *n, const tr_hf_shape *k, bool qwen3) {
    static const char *const per_layer[] = {
        "input_layernorm.weight",  "post_attention_layernorm.weight",
        "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.o_proj.weight",
        "mlp.gate_proj.weight",    "mlp.up_proj.weight",
        "mlp.down_proj.weight"};
    int layer, used = 0;
    if (strcmp(n, "model.embed_tokens.weight") == 0 || strcmp(n, "model.norm.weight") == 0 ||
        (!k->tied && strcmp(n, "lm_head.weight") == 0))
        return true;
    /* Older exports carry the rotary frequencies, which Trestle recomputes. */
    if (strstr(n, ".rotary_emb.inv_freq")) return true;
    if (sscanf(n, "model.layers.%d.%n", &layer, &used) != 1 || used == 0 || layer < 0 ||
        layer >= k->layers)
        return false;
    for (size_t j = 0; j < sizeof per_layer / sizeof per_layer[0]; j++)
        if (strcmp(n + used, per_layer[j]) == 0) return true;
    /* Qwen3's norms have a place only in a model built with qk_layernorm. */
    return qwen3 && k->qk_norm &&
           (strcmp(n + used, "self_attn.q_norm.weight") == 0 ||
            strcmp(n + used, "self_attn.k_norm.weight") == 0);
}

bool tr_hf_llama_known(const char *n, const tr_hf_shape *k, bool qwen3) {
    return known(n, k, qwen3);
}

tr_status tr_hf_llama_source(const char *name, const tr_hf_shape *k, const tr_hf_weights *w,
                             tr_hf_source *s, tr_diags *d) {
    return llama_source(name, k, w, s, d);
}

int tr_hf_llama_locate(const tr_hf_source *s, const tr_hf_shape *k, int64_t r, int64_t c,
                       int64_t *at) {
    return llama_locate(s, k, r, c, at);
}

static bool llama_known(const char *n, const tr_hf_shape *k) {
    return known(n, k, false);
}

static bool qwen3_known(const char *n, const tr_hf_shape *k) {
    return known(n, k, true);
}

const tr_hf_arch tr_hf_arch_llama = {.name = "LlamaForCausalLM",
                                     .known = llama_known,
                                     .source = llama_source,
                                     .locate = llama_locate};
const tr_hf_arch tr_hf_arch_qwen3 = {.name = "Qwen3ForCausalLM",
                                     .known = qwen3_known,
                                     .source = llama_source,
                                     .locate = llama_locate};
