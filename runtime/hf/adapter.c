/* LoRA adapters as PEFT's adapter directories (runtime/hf/hf.h): adapter_config.json and
 * adapter_model.safetensors under the names PEFT and vLLM load. Megatron fuses q/k/v into
 * linear_qkv and gate/up into linear_fc1, each with one LoRA A; PEFT keeps one adapter per
 * projection. The fused adapter is exactly a PEFT adapter whose q/k/v (gate/up) share their A,
 * with B's rows split as the layer's weight rows are (the grouped QKV rows, [gate; up]), so the
 * map runs both ways: export copies A to each projection, import requires the copies equal. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/common/lowp_bits.h"
#include "runtime/device/device.h"
#include "runtime/hf/internal.h"
#include "runtime/io/json.h"

/* PEFT's modules of a Llama / Qwen3 decoder layer, each a part of one Trestle LoRA target. */
typedef struct module {
    const char *name;
    int target, part;
    bool attn; /* under self_attn (else mlp) */
} module;

static const module modules[] = {
    {"q_proj", TR_LORA_QKV, 0, true},     {"k_proj", TR_LORA_QKV, 1, true},
    {"v_proj", TR_LORA_QKV, 2, true},     {"o_proj", TR_LORA_PROJ, 0, true},
    {"gate_proj", TR_LORA_FC1, 0, false}, {"up_proj", TR_LORA_FC1, 1, false},
    {"down_proj", TR_LORA_FC2, 0, false}};
enum { N_MODULES = sizeof modules / sizeof modules[0] };

static const char *const adapter_params[TR_LORA_TARGETS] = {
    "self_attention.linear_qkv.adapter.", "self_attention.linear_proj.adapter.",
    "mlp.linear_fc1.adapter.", "mlp.linear_fc2.adapter."};

static tr_status adapter_error(tr_diags *d, const char *where, const char *what) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, where);
    return tr_diag_add(d, TR_SEV_ERROR, "hf.adapter", &o, NULL,
                       "a PEFT LoRA adapter (peft_type LORA, no DoRA or rsLoRA) of a Llama or "
                       "Qwen3 model with the run's peft.dim, peft.alpha and target modules",
                       "%s: %s", where, what);
}

/* [out, in] of one projection's weight. */
static void module_dims(const tr_hf_shape *k, int mod, int64_t *out, int64_t *in) {
    int64_t C = k->hidden, q = k->heads * k->head_dim, kv = k->groups * k->head_dim, F = k->ffn;
    static const int kind[N_MODULES] = {0, 1, 1, 2, 3, 3, 4};
    const int64_t outs[] = {q, kv, C, F, C}, ins[] = {C, C, q, C, F};
    *out = outs[kind[mod]];
    *in = ins[kind[mod]];
}

static void tensor_name(char *buf, size_t cap, int layer, int mod, bool b) {
    snprintf(buf, cap, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", layer,
             modules[mod].attn ? "self_attn" : "mlp", modules[mod].name, b ? 'B' : 'A');
}

static int first_module(int target) {
    for (int i = 0; i < N_MODULES; i++)
        if (modules[i].target == target) return i;
    return -1;
}

/* A Trestle adapter tensor's layer, target and side (B: linear_out); false for anything else
 * (DoRA's magnitudes are refused before this). */
static bool parse_param(const char *name, int *layer, int *target, bool *b) {
    int used = 0;
    if (sscanf(name, "decoder.layers.%d.%n", layer, &used) != 1 || used == 0) return false;
    for (int t = 0; t < TR_LORA_TARGETS; t++) {
        size_t n = strlen(adapter_params[t]);
        if (strncmp(name + used, adapter_params[t], n) != 0) continue;
        *target = t;
        *b = strcmp(name + used + n, "linear_out.weight") == 0;
        return *b || strcmp(name + used + n, "linear_in.weight") == 0;
    }
    return false;
}

/* Element (r, c) of the logical adapter tensor: the PEFT module holding it (for A, the first
 * of the ones sharing it) and its flat index there. */
static int locate(const tr_hf_shape *k, int target, bool b, int64_t rank, int64_t r, int64_t c,
                  int64_t *at) {
    int base = first_module(target);
    int64_t out = 0, in = 0;
    module_dims(k, base, &out, &in);
    if (!b) {
        *at = r * in + c;
        return base;
    }
    int64_t row = r;
    int part = 0;
    if (target == TR_LORA_QKV || target == TR_LORA_FC1)
        part = tr_hf_llama_row(k, target == TR_LORA_QKV, r, &row);
    *at = row * rank + c;
    return base + part;
}

static bool llama_like(const tr_model_spec *s) {
    return s->swiglu && s->rope && !s->layernorm && !s->bias_linear && !s->bias_qkv &&
           !s->learned_pos;
}

/* The file written beside its final name, synced and renamed into place. */
static tr_status write_text_atomic(const char *dir, const char *file, const char *text,
                                   tr_diags *d) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wx");
    if (!f) return adapter_error(d, path, "cannot create the file");
    bool ok = fputs(text, f) >= 0;
    ok = fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0) return TR_OK;
    unlink(tmp);
    return adapter_error(d, path, "cannot write the file");
}

/* The shortest decimal that reads back as the same float. */
static void float_text(float x, char *buf, size_t cap) {
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, cap, "%.*g", p, (double)x);
        if ((float)strtod(buf, NULL) == x) return;
    }
}

static tr_status write_config(const char *dir, const tr_model_spec *s, const char *base_model,
                              tr_diags *d) {
    char text[2048], alpha[32], drop[32], targets[256] = "";
    float_text(s->lora_scale * (float)s->lora_rank, alpha, sizeof alpha);
    float_text(s->lora_dropout, drop, sizeof drop);
    for (int i = 0; i < N_MODULES; i++) {
        if (!(s->lora_targets & (1u << modules[i].target))) continue;
        size_t n = strlen(targets);
        snprintf(targets + n, sizeof targets - n, "%s\"%s\"", n ? ", " : "", modules[i].name);
    }
    /* The base's name as a JSON string: quotes and backslashes escaped, control bytes dropped. */
    char base[1024] = "null";
    if (base_model) {
        size_t o = 0;
        base[o++] = '"';
        for (const char *p = base_model; *p && o + 3 < sizeof base; p++) {
            if ((unsigned char)*p < 0x20) continue;
            if (*p == '"' || *p == '\\') base[o++] = '\\';
            base[o++] = *p;
        }
        base[o++] = '"';
        base[o] = 0;
    }
    snprintf(text, sizeof text,
             "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n"
             "  \"base_model_name_or_path\": %s,\n  \"r\": %d,\n  \"lora_alpha\": %s,\n"
             "  \"lora_dropout\": %s,\n  \"target_modules\": [%s],\n  \"bias\": \"none\",\n"
             "  \"fan_in_fan_out\": false,\n  \"use_rslora\": false,\n  \"use_dora\": false,\n"
             "  \"init_lora_weights\": true,\n  \"inference_mode\": true,\n"
             "  \"modules_to_save\": null\n}\n",
             base, s->lora_rank, alpha, drop, targets);
    return write_text_atomic(dir, "adapter_config.json", text, d);
}

/* PEFT names an expert's adapter after transformers' per-expert modules (gate/up/down of
 * mlp.experts.<e>), which the runtime's per-expert adapters (runtime/moe/lora.c) are not mapped
 * to yet: a model with them is refused, naming the first. */
static tr_status refuse_expert_adapters(const tr_model *m, const char *dir, tr_diags *d) {
    for (int i = 0; i < m->n_info; i++) {
        const char *name = m->info[i].name;
        if (!strstr(name, ".adapter.")) continue;
        if (!strstr(name, ".mlp.experts.") && !strstr(name, ".mlp.shared_experts.")) continue;
        char what[256];
        snprintf(what, sizeof what,
                 "the MoE experts' adapters (%s, ...) have no PEFT names yet: adapt only "
                 "linear_qkv and linear_proj to use PEFT files",
                 name);
        return adapter_error(d, dir, what);
    }
    return TR_OK;
}

tr_status tr_hf_adapter_export(const tr_model *m, const char *dir, const char *base_model,
                               tr_st_dtype dtype, tr_diags *d) {
    const tr_model_spec *s = &m->full;
    if (m->tp.size != 1 || m->n_parts != 1 || m->parts[0].num_layers != s->num_layers)
        return adapter_error(d, dir, "export the adapters of a whole model on one rank");
    if (!s->lora_rank || s->lora_dora || !llama_like(s))
        return adapter_error(d, dir,
                             "PEFT adapter files are written for a LoRA (not DoRA) Llama or Qwen3 "
                             "model");
    TR_TRY(refuse_expert_adapters(m, dir, d));
    if (dtype != TR_ST_F32 && dtype != TR_ST_BF16 && dtype != TR_ST_F16)
        return adapter_error(d, dir, "adapters are written as F32, BF16 or F16");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return adapter_error(d, dir, "cannot create the directory");
    tr_hf_shape k = tr_hf_shape_of(s);
    int64_t rank = s->lora_rank;
    int slots = s->num_layers * N_MODULES * 2, n = 0;
    float **vals = calloc((size_t)slots, sizeof *vals);
    tr_st_entry *e = calloc((size_t)slots, sizeof *e);
    int64_t(*shape)[2] = calloc((size_t)slots, sizeof *shape);
    char(*names)[128] = calloc((size_t)slots, sizeof *names);
    void **bufs = calloc((size_t)slots, sizeof *bufs);
    bool direct = tr_device_host_visible(m->dev);
    float *host = direct ? m->params : malloc((size_t)m->n_params * sizeof *host);
    tr_status st = vals && e && shape && names && bufs && host ? TR_OK : TR_ERR_NOMEM;
    if (st == TR_OK && !direct)
        st = tr_device_to_host(m->dev, host, m->params, (size_t)m->n_params * sizeof *host);
    for (int i = 0; st == TR_OK && i < slots; i++) {
        int layer = i / (N_MODULES * 2), mod = i / 2 % N_MODULES;
        if (!(s->lora_targets & (1u << modules[mod].target))) continue;
        int64_t out = 0, in = 0;
        module_dims(&k, mod, &out, &in);
        bool b = i % 2;
        shape[i][0] = b ? out : rank;
        shape[i][1] = b ? rank : in;
        if (!(vals[i] = calloc((size_t)(shape[i][0] * shape[i][1]), sizeof **vals)))
            st = TR_ERR_NOMEM;
        tensor_name(names[i], sizeof names[i], layer, mod, b);
    }
    for (int i = 0; st == TR_OK && i < m->n_info; i++) {
        const tr_param_info *p = &m->info[i];
        int layer = 0, target = 0;
        bool b = false;
        if (!parse_param(p->name, &layer, &target, &b)) continue;
        int parts = target == TR_LORA_QKV ? 3 : target == TR_LORA_FC1 ? 2 : 1;
        for (int64_t x = 0; x < p->numel; x++) {
            int64_t at = tr_model_logical_index(m, p, x), idx = 0;
            int mod = locate(&k, target, b, rank, at / p->full_cols, at % p->full_cols, &idx);
            /* A is shared: each projection of the fused layer gets its copy. */
            for (int q = 0; q < (b ? 1 : parts); q++)
                vals[((layer * N_MODULES) + mod + q) * 2 + b][idx] = host[p->offset + x];
        }
    }
    size_t es = tr_st_dtype_size(dtype);
    for (int i = 0; st == TR_OK && i < slots; i++) {
        if (!vals[i]) continue;
        int64_t numel = shape[i][0] * shape[i][1];
        if (dtype == TR_ST_F32) {
            bufs[i] = vals[i];
            vals[i] = NULL;
        } else if ((bufs[i] = malloc((size_t)numel * es))) {
            for (int64_t j = 0; j < numel; j++) {
                uint16_t h = tr_lowp_bits(dtype == TR_ST_BF16, vals[i][j]);
                memcpy((char *)bufs[i] + 2 * j, &h, 2);
            }
        } else {
            st = TR_ERR_NOMEM;
        }
        e[n++] = (tr_st_entry){names[i], dtype, 2, shape[i], bufs[i]};
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    const char *keys[] = {"format"}, *values[] = {"pt"};
    if (st == TR_OK) st = tr_st_write(path, e, n, keys, values, 1, d);
    if (st == TR_OK) st = write_config(dir, s, base_model, d);
    for (int i = 0; i < slots; i++) {
        if (vals) free(vals[i]);
        if (bufs) free(bufs[i]);
    }
    if (!direct) free(host);
    free(vals), free(e), free(shape), free(names), free(bufs);
    return st;
}

bool tr_hf_is_adapter_dir(const char *dir) {
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return false;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool json_true(const tr_json *root, const char *key) {
    const tr_json *v = tr_json_get(root, key);
    return v && v->type == TR_JSON_TRUE;
}

static bool json_empty(const tr_json *root, const char *key) {
    const tr_json *v = tr_json_get(root, key);
    return !v || v->type == TR_JSON_NULL ||
           ((v->type == TR_JSON_OBJECT || v->type == TR_JSON_ARRAY) && v->n == 0);
}

/* adapter_config.json against the model: the same rank, scale and targets, plain LoRA. */
static tr_status check_config(const tr_model_spec *s, const tr_json *root, const char *path,
                              tr_diags *d) {
    char what[256];
    if (root->type != TR_JSON_OBJECT) return adapter_error(d, path, "not a JSON object");
    const tr_json *type = tr_json_get(root, "peft_type");
    if (!type || type->type != TR_JSON_STRING || strcmp(type->str, "LORA") != 0)
        return adapter_error(d, path, "peft_type is not \"LORA\"");
    if (json_true(root, "use_dora") || json_true(root, "use_rslora") ||
        json_true(root, "fan_in_fan_out"))
        return adapter_error(d, path, "use_dora, use_rslora or fan_in_fan_out is true");
    const tr_json *bias = tr_json_get(root, "bias");
    if (bias && !(bias->type == TR_JSON_STRING && strcmp(bias->str, "none") == 0))
        return adapter_error(d, path, "bias is not \"none\" (Trestle's adapters have no bias)");
    if (!json_empty(root, "rank_pattern") || !json_empty(root, "alpha_pattern") ||
        !json_empty(root, "layers_to_transform") || !json_empty(root, "modules_to_save"))
        return adapter_error(d, path,
                             "rank_pattern, alpha_pattern, layers_to_transform or "
                             "modules_to_save is set (one rank and scale on every layer)");
    int64_t r = 0;
    const tr_json *rv = tr_json_get(root, "r"), *av = tr_json_get(root, "lora_alpha");
    if (!rv || !tr_json_int(rv, 1, 1 << 20, &r) || !av || av->type != TR_JSON_NUMBER)
        return adapter_error(d, path, "r or lora_alpha is missing or not a number");
    if (r != s->lora_rank) {
        snprintf(what, sizeof what, "r is %lld, the model's peft.dim %d", (long long)r,
                 s->lora_rank);
        return adapter_error(d, path, what);
    }
    double scale = av->number / (double)r;
    if (fabs(scale - (double)s->lora_scale) > 1e-6 * fabs(scale)) {
        snprintf(what, sizeof what,
                 "lora_alpha / r is %.9g, the model's peft.alpha / peft.dim %.9g", scale,
                 (double)s->lora_scale);
        return adapter_error(d, path, what);
    }
    const tr_json *tm = tr_json_get(root, "target_modules");
    if (!tm || tm->type != TR_JSON_ARRAY)
        return adapter_error(d, path,
                             "target_modules is not a list of module names (a pattern string is "
                             "not read)");
    unsigned parts[TR_LORA_TARGETS] = {0};
    for (size_t i = 0; i < tm->n; i++) {
        int mod = -1;
        for (int j = 0; tm->items[i].type == TR_JSON_STRING && j < N_MODULES; j++)
            if (strcmp(tm->items[i].str, modules[j].name) == 0) mod = j;
        if (mod < 0) {
            snprintf(what, sizeof what, "target module %.80s is none of Llama's projections",
                     tm->items[i].type == TR_JSON_STRING ? tm->items[i].str : "(not a string)");
            return adapter_error(d, path, what);
        }
        parts[modules[mod].target] |= 1u << modules[mod].part;
    }
    unsigned targets = 0;
    for (int t = 0; t < TR_LORA_TARGETS; t++) {
        unsigned all = t == TR_LORA_QKV ? 7u : t == TR_LORA_FC1 ? 3u : 1u;
        if (parts[t] && parts[t] != all)
            return adapter_error(d, path,
                                 "q_proj, k_proj and v_proj (gate_proj and up_proj) are one "
                                 "fused layer in Trestle: adapt all of them or none");
        if (parts[t]) targets |= 1u << t;
    }
    if (targets != s->lora_targets)
        return adapter_error(d, path,
                             "target_modules adapt other layers than the model's "
                             "peft.target_modules");
    return TR_OK;
}

/* Every tensor of the file is an A or B of an adapted projection of a layer the model has. */
static bool known_tensor(const char *name, const tr_model_spec *s) {
    int layer = 0, used = 0;
    if (sscanf(name, "base_model.model.model.layers.%d.%n", &layer, &used) != 1 || !used ||
        layer < 0 || layer >= s->num_layers)
        return false;
    for (int mod = 0; mod < N_MODULES; mod++)
        for (int b = 0; b < 2; b++) {
            char want[128];
            tensor_name(want, sizeof want, layer, mod, b);
            if (strcmp(name, want) == 0 && (s->lora_targets & (1u << modules[mod].target)))
                return true;
        }
    return false;
}

static tr_status fill(tr_model *m, const tr_hf_weights *w, tr_diags *d) {
    const tr_model_spec *s = &m->full;
    tr_hf_shape k = tr_hf_shape_of(s);
    int64_t rank = s->lora_rank;
    for (int f = 0; f < w->files[0].n; f++)
        if (!known_tensor(w->files[0].t[f].name, s))
            return tr_hf_tensor_error(d, w->files[0].t[f].name,
                                      "the adapted model has no place for this adapter tensor");
    /* Each tensor checked for shape, and the projections sharing a fused layer's A equal. */
    const tr_st_tensor *t[N_MODULES][2];
    for (int layer = 0; layer < s->num_layers; layer++) {
        for (int mod = 0; mod < N_MODULES; mod++) {
            if (!(s->lora_targets & (1u << modules[mod].target))) continue;
            int64_t out = 0, in = 0;
            module_dims(&k, mod, &out, &in);
            char name[128];
            for (int b = 0; b < 2; b++) {
                tensor_name(name, sizeof name, layer, mod, b);
                TR_TRY(tr_hf_need(w, name, b ? out : rank, b ? rank : in, &t[mod][b], d));
            }
            if (!modules[mod].part) continue;
            const tr_st_tensor *a0 = t[mod - modules[mod].part][0];
            for (int64_t i = 0; i < rank * in; i++)
                if (tr_hf_value(a0, i) != tr_hf_value(t[mod][0], i))
                    return tr_hf_tensor_error(d, t[mod][0]->name,
                                              "differs from the lora_A of the layer's first "
                                              "projection; Trestle's fused layer has one A");
        }
        bool direct = tr_device_host_visible(m->dev);
        for (int i = 0; i < m->n_info; i++) {
            const tr_param_info *p = &m->info[i];
            int pl = 0, target = 0;
            bool b = false;
            if (!parse_param(p->name, &pl, &target, &b) || pl != layer) continue;
            float *dst = direct ? m->params + p->offset : malloc((size_t)p->numel * sizeof *dst);
            if (!dst) return TR_ERR_NOMEM;
            for (int64_t x = 0; x < p->numel; x++) {
                int64_t at = tr_model_logical_index(m, p, x), idx = 0;
                int mod = locate(&k, target, b, rank, at / p->full_cols, at % p->full_cols, &idx);
                dst[x] = tr_hf_value(t[mod][b], idx);
            }
            if (direct) continue;
            tr_status st = tr_device_to_device(m->dev, m->params + p->offset, dst,
                                               (size_t)p->numel * sizeof *dst);
            free(dst);
            TR_TRY(st);
        }
    }
    tr_model_params_changed(m);
    return TR_OK;
}

tr_status tr_hf_adapter_import(tr_model *m, const char *dir, tr_diags *d) {
    const tr_model_spec *s = &m->full;
    if (!s->lora_rank || s->lora_dora || !llama_like(s))
        return adapter_error(d, dir,
                             "PEFT adapters are read into a LoRA (not DoRA) Llama or Qwen3 model");
    TR_TRY(refuse_expert_adapters(m, dir, d));
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *text = NULL;
    size_t len = 0;
    tr_json root = {0};
    tr_status st = tr_read_file(path, "hf.adapter", &text, &len, d);
    if (st == TR_OK) st = tr_json_parse(text, len, path, &root, d);
    if (st == TR_OK) st = check_config(s, &root, path, d);
    tr_json_free(&root);
    free(text);
    TR_TRY(st);
    tr_st_file file;
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    TR_TRY(tr_st_open(&file, path, d));
    tr_hf_weights w = {.files = &file, .n = 1};
    st = fill(m, &w, d);
    tr_st_close(&file);
    return st;
}
