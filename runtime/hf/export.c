/* A whole Trestle Llama model to a Hugging Face directory (runtime/hf/hf.h): config.json from
 * the model section, model.safetensors with the tensors under transformers' names, the fused
 * QKV and fc1 split back, the vocabulary padding dropped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/common/lowp_bits.h"
#include "runtime/device/device.h"
#include "runtime/hf/hf.h"

typedef enum part {
    P_EMBED,
    P_LN1,
    P_Q,
    P_K,
    P_V,
    P_O,
    P_LN2,
    P_GATE,
    P_UP,
    P_DOWN,
    P_NORM,
    P_HEAD
} part;

typedef struct out_tensor {
    char name[128];
    part kind;
    int layer;
    int64_t rows, cols; /* cols 0: a vector */
} out_tensor;

static tr_status export_error(tr_diags *d, const char *dir, const char *what) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, dir);
    return tr_diag_add(d, TR_SEV_ERROR, "hf.export", &o, NULL,
                       "export a whole model (one rank, every layer) of a Llama-style spec",
                       "%s: %s", dir, what);
}

/* The Trestle tensor and logical position of element (r, c) of an exported tensor. */
static const char *trestle_source(const out_tensor *t, const tr_model_spec *s, int64_t r, int64_t c,
                                  char *name, size_t cap, int64_t *tr, int64_t *tc) {
    int64_t D = s->head_dim, hpg = s->heads / s->groups, per = (hpg + 2) * D;
    *tr = r;
    *tc = c;
    const char *what = NULL;
    switch (t->kind) {
    case P_EMBED:
        return "embedding.word_embeddings.weight";
    case P_HEAD:
        return s->tied ? "embedding.word_embeddings.weight" : "output_layer.weight";
    case P_NORM:
        *tr = 0, *tc = r;
        return "decoder.final_layernorm.weight";
    case P_LN1:
        *tr = 0, *tc = r, what = "input_layernorm.weight";
        break;
    case P_LN2:
        *tr = 0, *tc = r, what = "pre_mlp_layernorm.weight";
        break;
    case P_Q: /* head h = r / D of group h / hpg */
        *tr = (r / D / hpg) * per + (r / D % hpg) * D + r % D,
        what = "self_attention.linear_qkv.weight";
        break;
    case P_K:
        *tr = (r / D) * per + hpg * D + r % D, what = "self_attention.linear_qkv.weight";
        break;
    case P_V:
        *tr = (r / D) * per + (hpg + 1) * D + r % D, what = "self_attention.linear_qkv.weight";
        break;
    case P_O:
        what = "self_attention.linear_proj.weight";
        break;
    case P_GATE:
        what = "mlp.linear_fc1.weight";
        break;
    case P_UP:
        *tr = s->ffn + r, what = "mlp.linear_fc1.weight";
        break;
    case P_DOWN:
        what = "mlp.linear_fc2.weight";
        break;
    }
    snprintf(name, cap, "decoder.layers.%d.%s", t->layer, what);
    return name;
}

/* transformers' order: embedding, each layer's modules, the final norm, the head. */
static int list_tensors(const tr_model_spec *s, int64_t vocab, out_tensor *o) {
    int n = 0;
    int64_t C = s->hidden, q = (int64_t)s->heads * s->head_dim,
            kv = (int64_t)s->groups * s->head_dim;
#define ADD(nm, k, l, r, c)                                                                        \
    (o[n] = (out_tensor){"", k, l, r, c}, snprintf(o[n].name, sizeof o[n].name, "%s", nm), n++)
    ADD("model.embed_tokens.weight", P_EMBED, 0, vocab, C);
    for (int i = 0; i < s->num_layers; i++) {
        static const struct {
            const char *suffix;
            part kind;
        } mods[] = {{"input_layernorm.weight", P_LN1}, {"self_attn.q_proj.weight", P_Q},
                    {"self_attn.k_proj.weight", P_K},  {"self_attn.v_proj.weight", P_V},
                    {"self_attn.o_proj.weight", P_O},  {"post_attention_layernorm.weight", P_LN2},
                    {"mlp.gate_proj.weight", P_GATE},  {"mlp.up_proj.weight", P_UP},
                    {"mlp.down_proj.weight", P_DOWN}};
        for (size_t j = 0; j < sizeof mods / sizeof mods[0]; j++) {
            int64_t rows = 0, cols = 0;
            switch (mods[j].kind) {
            case P_LN1:
            case P_LN2:
                rows = C;
                break;
            case P_Q:
                rows = q, cols = C;
                break;
            case P_K:
            case P_V:
                rows = kv, cols = C;
                break;
            case P_O:
                rows = C, cols = q;
                break;
            case P_GATE:
            case P_UP:
                rows = s->ffn, cols = C;
                break;
            default:
                rows = C, cols = s->ffn;
            }
            char nm[128];
            snprintf(nm, sizeof nm, "model.layers.%d.%s", i, mods[j].suffix);
            ADD(nm, mods[j].kind, i, rows, cols);
        }
    }
    ADD("model.norm.weight", P_NORM, 0, C, 0);
    if (!s->tied) ADD("lm_head.weight", P_HEAD, 0, vocab, C);
#undef ADD
    return n;
}

/* The shortest decimal that reads back as the same float: 1e-05, not 9.99999975e-06. */
static void float_text(float x, char *buf, size_t cap) {
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, cap, "%.*g", p, (double)x);
        if ((float)strtod(buf, NULL) == x) return;
    }
}

/* config.json for the spec, in transformers' key names. */
static tr_status write_config(const char *dir, const tr_model_spec *s, int64_t vocab,
                              const char *dtype, tr_diags *d) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return export_error(d, dir, "cannot create config.json");
    char eps[32];
    float_text(s->eps, eps, sizeof eps);
    fprintf(f,
            "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
            "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
            "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
            "  \"vocab_size\": %lld,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %s,\n"
            "  \"rope_theta\": %.17g,\n",
            s->hidden, s->ffn, s->num_layers, s->heads, s->groups, s->head_dim, (long long)vocab,
            s->seq, eps, s->rope_p.base);
    if (s->rope_p.llama3)
        fprintf(f,
                "  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": %.17g, "
                "\"low_freq_factor\": %.17g, \"high_freq_factor\": %.17g, "
                "\"original_max_position_embeddings\": %.17g},\n",
                s->rope_p.factor, s->rope_p.low_freq_factor, s->rope_p.high_freq_factor,
                s->rope_p.original_max_position);
    else
        fputs("  \"rope_scaling\": null,\n", f);
    fprintf(f,
            "  \"tie_word_embeddings\": %s,\n  \"hidden_act\": \"silu\",\n  \"attention_bias\": "
            "false,\n  \"mlp_bias\": false,\n  \"torch_dtype\": \"%s\"\n}\n",
            s->tied ? "true" : "false", dtype);
    return fclose(f) == 0 ? TR_OK : export_error(d, dir, "cannot write config.json");
}

tr_status tr_hf_llama_export(const tr_model *m, const char *dir, tr_st_dtype dtype, tr_diags *d) {
    const tr_model_spec *s = &m->full;
    if (m->tp.size != 1 || m->n_parts != 1 || m->parts[0].num_layers != s->num_layers ||
        !s->swiglu || !s->rope || s->layernorm || s->bias_linear || s->bias_qkv || s->learned_pos)
        return export_error(d, dir, "the model is not a whole Llama-style model on one rank");
    if (dtype != TR_ST_F32 && dtype != TR_ST_BF16 && dtype != TR_ST_F16)
        return export_error(d, dir, "export writes F32, BF16 or F16");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return export_error(d, dir, "cannot create the directory");
    int64_t vocab = s->vocab_real ? s->vocab_real : s->vocab;
    int max = 3 + 9 * s->num_layers;
    out_tensor *o = calloc((size_t)max, sizeof *o);
    tr_st_entry *e = calloc((size_t)max, sizeof *e);
    int64_t(*shape)[2] = calloc((size_t)max, sizeof *shape);
    void **bufs = calloc((size_t)max, sizeof *bufs);
    if (!o || !e || !shape || !bufs) {
        free(o), free(e), free(shape), free(bufs);
        return TR_ERR_NOMEM;
    }
    int n = list_tensors(s, vocab, o);
    size_t esize = tr_st_dtype_size(dtype);
    /* A device model is read once to the host. */
    bool direct = tr_device_host_visible(m->dev);
    float *host = direct ? m->params : malloc((size_t)m->n_params * sizeof *host);
    tr_status st = host ? TR_OK : TR_ERR_NOMEM;
    if (st == TR_OK && !direct)
        st = tr_device_to_host(m->dev, host, m->params, (size_t)m->n_params * sizeof *host);
    for (int i = 0; st == TR_OK && i < n; i++) {
        int64_t rows = o[i].rows, cols = o[i].cols ? o[i].cols : 1, numel = rows * cols;
        bufs[i] = malloc((size_t)(numel ? numel : 1) * esize);
        if (!bufs[i]) {
            st = TR_ERR_NOMEM;
            break;
        }
        char name[128];
        for (int64_t r = 0; st == TR_OK && r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                int64_t tr, tc;
                const char *src = trestle_source(&o[i], s, r, c, name, sizeof name, &tr, &tc);
                const tr_param_info *p = tr_model_find_param(m, src);
                if (!p) {
                    st = export_error(d, dir, "the model lacks a tensor of the Llama layout");
                    break;
                }
                float v = host[p->offset + tr * p->full_cols + tc];
                int64_t at = r * cols + c;
                if (dtype == TR_ST_F32)
                    memcpy((char *)bufs[i] + 4 * at, &v, 4);
                else {
                    uint16_t h = tr_lowp_bits(dtype == TR_ST_BF16, v);
                    memcpy((char *)bufs[i] + 2 * at, &h, 2);
                }
            }
        shape[i][0] = rows;
        shape[i][1] = o[i].cols;
        e[i] = (tr_st_entry){o[i].name, dtype, o[i].cols ? 2 : 1, shape[i], bufs[i]};
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *keys[] = {"format"}, *values[] = {"pt"};
    if (st == TR_OK) st = tr_st_write(path, e, n, keys, values, 1, d);
    if (st == TR_OK)
        st = write_config(dir, s, vocab,
                          dtype == TR_ST_F32    ? "float32"
                          : dtype == TR_ST_BF16 ? "bfloat16"
                                                : "float16",
                          d);
    for (int i = 0; i < n; i++) free(bufs[i]);
    if (!direct) free(host);
    free(o), free(e), free(shape), free(bufs);
    return st;
}
