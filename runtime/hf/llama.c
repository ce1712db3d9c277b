/* LlamaForCausalLM weights into a Trestle model (runtime/hf/hf.h). Each parameter element of this
 * rank is found from its position in the logical (unsharded) tensor, so a TP shard or a pipeline
 * stage reads exactly its own elements. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/lowp_bits.h"
#include "runtime/device/device.h"
#include "runtime/hf/hf.h"

/* The logical Trestle tensors of a Llama layer, and where each row comes from. */
typedef enum piece { EMBED, OUTPUT, FINAL_NORM, LN1, QKV, PROJ, LN2, FC1, FC2, NONE } piece;

typedef struct dims {
    int64_t hidden, heads, groups, head_dim, ffn, vocab, layers;
    int64_t hf_vocab; /* the checkpoint's rows: vocab without Trestle's padding */
} dims;

static tr_status tensor_error(tr_diags *d, const char *name, const char *what) {
    return tr_diag_add(d, TR_SEV_ERROR, "hf.tensor", NULL, NULL,
                       "import a checkpoint of the architecture and size config.json describes",
                       "Hugging Face tensor %s: %s", name, what);
}

/* A required tensor of `rows` x `cols` (cols 0: a vector of rows). */
static tr_status need(const tr_hf_weights *w, const char *name, int64_t rows, int64_t cols,
                      const tr_st_tensor **out, tr_diags *d) {
    const tr_st_tensor *t = tr_hf_weights_find(w, name);
    *out = t;
    if (!t) return tensor_error(d, name, "missing from the checkpoint");
    if (t->dtype != TR_ST_F32 && t->dtype != TR_ST_BF16 && t->dtype != TR_ST_F16)
        return tensor_error(d, name, "dtype is not F32, BF16 or F16");
    bool ok = cols ? t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols
                   : t->ndim == 1 && t->shape[0] == rows;
    if (!ok) {
        char what[160];
        if (cols)
            snprintf(what, sizeof what, "shape should be [%lld, %lld]", (long long)rows,
                     (long long)cols);
        else
            snprintf(what, sizeof what, "shape should be [%lld]", (long long)rows);
        return tensor_error(d, name, what);
    }
    return TR_OK;
}

static float value_at(const tr_st_tensor *t, int64_t i) {
    const unsigned char *p = t->data;
    if (t->dtype == TR_ST_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return t->dtype == TR_ST_F16 ? tr_f16_value(h) : tr_bf16_value(h);
}

/* The HF tensors one Trestle tensor is made of (up to three), checked for shape. */
typedef struct source {
    piece kind;
    const tr_st_tensor *t[3];
} source;

static tr_status find_source(const char *name, const dims *k, const tr_hf_weights *w, source *s,
                             tr_diags *d) {
    memset(s, 0, sizeof *s);
    s->kind = NONE;
    int layer, used = 0;
    char rest[96], hf[160];
    if (strcmp(name, "embedding.word_embeddings.weight") == 0) {
        s->kind = EMBED;
        return need(w, "model.embed_tokens.weight", k->hf_vocab, k->hidden, &s->t[0], d);
    }
    if (strcmp(name, "output_layer.weight") == 0) {
        s->kind = OUTPUT;
        return need(w, "lm_head.weight", k->hf_vocab, k->hidden, &s->t[0], d);
    }
    if (strcmp(name, "decoder.final_layernorm.weight") == 0) {
        s->kind = FINAL_NORM;
        return need(w, "model.norm.weight", k->hidden, 0, &s->t[0], d);
    }
    if (sscanf(name, "decoder.layers.%d.%95s%n", &layer, rest, &used) != 2 || layer < 0)
        return tensor_error(d, name, "Trestle has no Hugging Face name for this tensor");
    char pre[48];
    snprintf(pre, sizeof pre, "model.layers.%d.", layer);
    int64_t C = k->hidden, q = k->heads * k->head_dim, kv = k->groups * k->head_dim, F = k->ffn;
#define NEED(i, suffix, rows, cols)                                                                \
    (snprintf(hf, sizeof hf, "%s%s", pre, suffix), need(w, hf, rows, cols, &s->t[i], d))
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
    return tensor_error(d, name, "Trestle has no Hugging Face name for this tensor");
}

/* Element (r, c) of the logical Trestle tensor. */
static float element(const source *s, const dims *k, int64_t r, int64_t c) {
    switch (s->kind) {
    case EMBED:
    case OUTPUT: /* rows past the checkpoint's vocabulary are Trestle's padding */
        return r < s->t[0]->shape[0] ? value_at(s->t[0], r * k->hidden + c) : 0.0f;
    case FINAL_NORM:
    case LN1:
    case LN2:
        return value_at(s->t[0], c);
    case QKV: {
        /* Megatron's grouped rows: per KV group its query heads, then its key, then its value. */
        int64_t hpg = k->heads / k->groups, per = (hpg + 2) * k->head_dim;
        int64_t g = r / per, j = r % per, D = k->head_dim;
        if (j < hpg * D) return value_at(s->t[0], (g * hpg * D + j) * k->hidden + c);
        if (j < (hpg + 1) * D) return value_at(s->t[1], (g * D + j - hpg * D) * k->hidden + c);
        return value_at(s->t[2], (g * D + j - (hpg + 1) * D) * k->hidden + c);
    }
    case FC1: /* [gate; up] */
        return r < k->ffn ? value_at(s->t[0], r * k->hidden + c)
                          : value_at(s->t[1], (r - k->ffn) * k->hidden + c);
    case PROJ:
        return value_at(s->t[0], r * k->heads * k->head_dim + c);
    case FC2:
        return value_at(s->t[0], r * k->ffn + c);
    default:
        return 0.0f;
    }
}

/* Every HF tensor must have a place: a name the model does not read is a different model. */
static tr_status check_all_used(const tr_hf_weights *w, const dims *k, bool tied, tr_diags *d) {
    static const char *const per_layer[] = {
        "input_layernorm.weight",  "post_attention_layernorm.weight",
        "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.o_proj.weight",
        "mlp.gate_proj.weight",    "mlp.up_proj.weight",
        "mlp.down_proj.weight"};
    for (int f = 0; f < w->n; f++)
        for (int i = 0; i < w->files[f].n; i++) {
            const char *n = w->files[f].t[i].name;
            int layer, used = 0;
            bool known = strcmp(n, "model.embed_tokens.weight") == 0 ||
                         strcmp(n, "model.norm.weight") == 0 ||
                         (!tied && strcmp(n, "lm_head.weight") == 0);
            /* Older exports carry the rotary frequencies, which Trestle recomputes. */
            if (strstr(n, ".rotary_emb.inv_freq")) known = true;
            if (!known && sscanf(n, "model.layers.%d.%n", &layer, &used) == 1 && used > 0 &&
                layer >= 0 && layer < k->layers)
                for (size_t j = 0; j < sizeof per_layer / sizeof per_layer[0]; j++)
                    known |= strcmp(n + used, per_layer[j]) == 0;
            if (!known)
                return tensor_error(d, n, "the model config.json describes has no place for it");
        }
    return TR_OK;
}

tr_status tr_hf_llama_import(tr_model *m, const tr_hf_weights *w, tr_diags *d) {
    const tr_model_spec *f = &m->full;
    dims k = {f->hidden, f->heads, f->groups,     f->head_dim,
              f->ffn,    f->vocab, f->num_layers, f->vocab_real ? f->vocab_real : f->vocab};
    TR_TRY(check_all_used(w, &k, f->tied, d));
    bool direct = tr_device_host_visible(m->dev);
    for (int i = 0; i < m->n_info; i++) {
        const tr_param_info *p = &m->info[i];
        if (strstr(p->name, ".adapter.")) continue; /* LoRA adapters start from their init */
        source s;
        TR_TRY(find_source(p->name, &k, w, &s, d));
        float *dst = direct ? m->params + p->offset
                            : malloc((size_t)(p->numel ? p->numel : 1) * sizeof *dst);
        if (!dst) return TR_ERR_NOMEM;
        for (int64_t e = 0; e < p->numel; e++) {
            int64_t at = tr_model_logical_index(m, p, e);
            dst[e] = element(&s, &k, at / p->full_cols, at % p->full_cols);
        }
        if (direct) continue;
        tr_status st =
            tr_device_to_device(m->dev, m->params + p->offset, dst, (size_t)p->numel * sizeof *dst);
        free(dst);
        TR_TRY(st);
    }
    tr_model_params_changed(m);
    return TR_OK;
}
