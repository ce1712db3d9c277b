/* GPT2LMHeadModel's tensors as the sources of Trestle's logical tensors (runtime/hf/internal.h):
 * Conv1D weights are stored [in, out], so every linear weight is read transposed; c_attn's
 * [q | k | v] columns become Megatron's grouped QKV rows (one group per head); the position
 * table keeps its first seq_length rows. Checkpoints name the tensors with or without the
 * "transformer." prefix (save_pretrained writes it, the original files do not). */
#include <stdio.h>
#include <string.h>

#include "runtime/hf/internal.h"

typedef enum piece {
    WTE,
    WPE,
    LN_W,
    LN_B,
    QKV_W,
    QKV_B,
    PROJ_W,
    PROJ_B,
    FC1_W,
    FC1_B,
    FC2_W,
    FC2_B
} piece;

static const char *prefix_of(const tr_hf_weights *w) {
    return tr_hf_weights_find(w, "transformer.wte.weight") ? "transformer." : "";
}

static tr_status gpt2_source(const char *name, const tr_hf_shape *k, const tr_hf_weights *w,
                             tr_hf_source *s, tr_diags *d) {
    memset(s, 0, sizeof *s);
    const char *pre = prefix_of(w);
    char hf[192], rest[96];
    int64_t C = k->hidden, F = k->ffn;
    int layer;
#define NEED(i, fmt, rows, cols)                                                                   \
    (snprintf(hf, sizeof hf, fmt, pre, layer), tr_hf_need(w, hf, rows, cols, &s->t[i], d))
    if (strcmp(name, "embedding.word_embeddings.weight") == 0) {
        s->kind = WTE;
        snprintf(hf, sizeof hf, "%swte.weight", pre);
        return tr_hf_need(w, hf, k->hf_vocab, C, &s->t[0], d);
    }
    if (strcmp(name, "output_layer.weight") == 0) { /* an untied head */
        s->kind = WTE;
        return tr_hf_need(w, "lm_head.weight", k->hf_vocab, C, &s->t[0], d);
    }
    if (strcmp(name, "embedding.position_embeddings.weight") == 0) {
        s->kind = WPE;
        snprintf(hf, sizeof hf, "%swpe.weight", pre);
        const tr_st_tensor *t = s->t[0] = tr_hf_weights_find(w, hf);
        if (!t) return tr_hf_tensor_error(d, hf, "missing from the checkpoint");
        if (t->ndim != 2 || t->shape[1] != C || t->shape[0] < k->seq)
            return tr_hf_tensor_error(d, hf, "shape is not [positions >= seq_length, hidden]");
        return tr_hf_need(w, hf, t->shape[0], C, &s->t[0], d);
    }
    if (strncmp(name, "decoder.final_layernorm.", 24) == 0) {
        bool bias = strcmp(name + 24, "bias") == 0;
        s->kind = bias ? LN_B : LN_W;
        snprintf(hf, sizeof hf, "%sln_f.%s", pre, bias ? "bias" : "weight");
        return tr_hf_need(w, hf, C, 0, &s->t[0], d);
    }
    if (sscanf(name, "decoder.layers.%d.%95s", &layer, rest) != 2 || layer < 0)
        return tr_hf_tensor_error(d, name, "Trestle has no Hugging Face name for this tensor");
    static const struct {
        const char *trestle, *hf;
        piece kind;
    } map[] = {
        {"input_layernorm.weight", "%sh.%d.ln_1.weight", LN_W},
        {"input_layernorm.bias", "%sh.%d.ln_1.bias", LN_B},
        {"pre_mlp_layernorm.weight", "%sh.%d.ln_2.weight", LN_W},
        {"pre_mlp_layernorm.bias", "%sh.%d.ln_2.bias", LN_B},
        {"self_attention.linear_qkv.weight", "%sh.%d.attn.c_attn.weight", QKV_W},
        {"self_attention.linear_qkv.bias", "%sh.%d.attn.c_attn.bias", QKV_B},
        {"self_attention.linear_proj.weight", "%sh.%d.attn.c_proj.weight", PROJ_W},
        {"self_attention.linear_proj.bias", "%sh.%d.attn.c_proj.bias", PROJ_B},
        {"mlp.linear_fc1.weight", "%sh.%d.mlp.c_fc.weight", FC1_W},
        {"mlp.linear_fc1.bias", "%sh.%d.mlp.c_fc.bias", FC1_B},
        {"mlp.linear_fc2.weight", "%sh.%d.mlp.c_proj.weight", FC2_W},
        {"mlp.linear_fc2.bias", "%sh.%d.mlp.c_proj.bias", FC2_B},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strcmp(rest, map[i].trestle) != 0) continue;
        s->kind = map[i].kind;
        /* Conv1D weights are [in, out]. */
        int64_t rows = 0, cols = 0;
        switch (map[i].kind) {
        case QKV_W:
            rows = C, cols = 3 * C;
            break;
        case QKV_B:
            rows = 3 * C;
            break;
        case PROJ_W:
            rows = C, cols = C;
            break;
        case FC1_W:
            rows = C, cols = F;
            break;
        case FC1_B:
            rows = F;
            break;
        case FC2_W:
            rows = F, cols = C;
            break;
        default: /* the norms and the C-wide biases */
            rows = C;
        }
        return NEED(0, map[i].hf, rows, cols);
    }
#undef NEED
    return tr_hf_tensor_error(d, name, "Trestle has no Hugging Face name for this tensor");
}

/* The column of c_attn ([q | k | v], each C wide) that Megatron's grouped row r reads. */
static int64_t qkv_column(const tr_hf_shape *k, int64_t r) {
    int64_t D = k->head_dim, g = r / (3 * D), j = r % (3 * D);
    return (j / D) * k->hidden + g * D + j % D;
}

/* Conv1D weights are [in, out]: Trestle's (row = out, col = in) is element in * out_width + out. */
static int gpt2_locate(const tr_hf_source *s, const tr_hf_shape *k, int64_t r, int64_t c,
                       int64_t *at) {
    int64_t C = k->hidden, F = k->ffn;
    switch ((piece)s->kind) {
    case WTE: /* rows past the checkpoint's vocabulary are Trestle's padding */
        *at = r * C + c;
        return r < s->t[0]->shape[0] ? 0 : -1;
    case WPE:
        *at = r * C + c;
        return 0;
    case LN_W:
    case LN_B:
    case PROJ_B:
    case FC1_B:
    case FC2_B: /* [1, n] in Trestle */
        *at = c;
        return 0;
    case QKV_W:
        *at = c * 3 * C + qkv_column(k, r);
        return 0;
    case QKV_B:
        *at = qkv_column(k, c);
        return 0;
    case PROJ_W:
    case FC2_W:
        *at = c * C + r;
        return 0;
    case FC1_W:
        *at = c * F + r;
        return 0;
    }
    return -1;
}

static bool gpt2_known(const char *n, const tr_hf_shape *k) {
    static const char *const per_layer[] = {
        "ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "attn.c_attn.weight",
        "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias", "mlp.c_fc.weight",
        "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias",
        /* the causal-mask buffers older exports carry */
        "attn.bias", "attn.masked_bias"};
    if (strncmp(n, "transformer.", 12) == 0) n += 12;
    if (strcmp(n, "wte.weight") == 0 || strcmp(n, "wpe.weight") == 0 ||
        strcmp(n, "ln_f.weight") == 0 || strcmp(n, "ln_f.bias") == 0)
        return true;
    /* An untied head, or a copy of the tied one (which adds nothing). */
    if (strcmp(n, "lm_head.weight") == 0) return true;
    int layer, used = 0;
    if (sscanf(n, "h.%d.%n", &layer, &used) != 1 || used == 0 || layer < 0 || layer >= k->layers)
        return false;
    for (size_t j = 0; j < sizeof per_layer / sizeof per_layer[0]; j++)
        if (strcmp(n + used, per_layer[j]) == 0) return true;
    return false;
}

/* Conv1D weights are stored transposed and c_attn's columns are regrouped by head. */
static bool gpt2_rows_in_order(const tr_hf_source *s) {
    switch ((piece)s->kind) {
    case QKV_W:
    case QKV_B:
    case PROJ_W:
    case FC2_W:
    case FC1_W:
        return false;
    default:
        return true;
    }
}

const tr_hf_arch tr_hf_arch_gpt2 = {.name = "GPT2LMHeadModel",
                                    .known = gpt2_known,
                                    .source = gpt2_source,
                                    .locate = gpt2_locate,
                                    .rows_in_order = gpt2_rows_in_order};
