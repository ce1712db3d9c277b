/* Parameter layout (one flat buffer, Megatron's names and order), the views into it, and the
 * model's creation and release. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/device/device.h"
#include "runtime/model/adapters/dora.h"
#include "runtime/model/internal.h"

typedef struct layout {
    tr_param_info *info;
    int n, cap;
    int64_t total;
    bool freeze; /* LoRA: parameters added now are frozen base weights */
} layout;

/* How the next parameter added is split over TP (reset after each add). */
typedef struct split {
    int dim; /* -1, 0 (rows) or 1 (columns) */
    bool swiglu;
    int tp;
} split;

/* a + b into out (n > 0), cut to fit as snprintf cuts; false when cut. Without the format
 * parser: the planner lays out tens of thousands of parameter lists per second. */
static bool cat2(char *out, size_t n, const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b), at = la < n - 1 ? la : n - 1;
    memcpy(out, a, at);
    size_t tb = lb < n - 1 - at ? lb : n - 1 - at;
    memcpy(out + at, b, tb);
    out[at + tb] = 0;
    return la + lb < n;
}

/* prefix + suffix into a parameter name; a name that would not fit tr_param_info.name is an
 * error rather than a silently shortened (and then ambiguous) name. */
static tr_status param_name(char *out, size_t n, const char *prefix, const char *suffix) {
    return cat2(out, n, prefix, suffix) ? TR_OK : TR_ERR_INVALID;
}

static tr_status add_param_split(layout *l, const char *name, int rows, int cols, bool no_decay,
                                 int init, split sp) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        tr_param_info *p = realloc(l->info, (size_t)cap * sizeof *p);
        if (!p) return TR_ERR_NOMEM;
        l->info = p;
        l->cap = cap;
    }
    tr_param_info *p = &l->info[l->n++];
    memset(p, 0, sizeof *p);
    cat2(p->name, sizeof p->name, name, "");
    p->rows = rows;
    p->cols = cols;
    p->numel = (int64_t)rows * cols;
    p->offset = l->total;
    p->no_decay = no_decay;
    p->init = init;
    p->frozen = l->freeze;
    p->split_dim = sp.tp > 1 ? sp.dim : -1;
    p->swiglu_split = sp.swiglu && p->split_dim >= 0;
    p->full_rows = sp.dim == 0 ? rows * sp.tp : rows;
    p->full_cols = sp.dim == 1 ? cols * sp.tp : cols;
    l->total += (p->numel + TR_PARAM_ALIGN - 1) / TR_PARAM_ALIGN * TR_PARAM_ALIGN;
    return TR_OK;
}

static tr_status add_param(layout *l, const char *name, int rows, int cols, bool no_decay,
                           int init) {
    return add_param_split(l, name, rows, cols, no_decay, init, (split){-1, false, 1});
}

static tr_status add_norm(layout *l, const tr_model_spec *s, const char *prefix) {
    char name[80];
    int init = s->zero_centered ? TR_INIT_ZERO : TR_INIT_ONE;
    TR_TRY(param_name(name, sizeof name, prefix, ".weight"));
    TR_TRY(add_param(l, name, 1, s->hidden, true, init));
    l->info[l->n - 1].sp_partial = s->sequence_parallel;
    if (!s->layernorm) return TR_OK;
    TR_TRY(param_name(name, sizeof name, prefix, ".bias"));
    TR_TRY(add_param(l, name, 1, s->hidden, true, TR_INIT_ZERO));
    l->info[l->n - 1].sp_partial = s->sequence_parallel;
    return TR_OK;
}

/* Megatron's q_layernorm / k_layernorm: one norm over head_dim shared by every head, so the
 * same tensor on each TP rank while the heads are split; each rank's gradient sums over its own
 * heads only (sp_partial: summed over TP, with or without sequence parallelism). */
static tr_status add_qk_norms(layout *l, const tr_model_spec *s, const char *base, int tp) {
    if (!s->qk_norm) return TR_OK;
    static const char *const which[] = {"q_layernorm", "k_layernorm"};
    const char *const suffix[] = {".weight", s->layernorm ? ".bias" : NULL};
    char name[80];
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 2 && suffix[j]; j++) {
            snprintf(name, sizeof name, "%s.self_attention.%s%s", base, which[k], suffix[j]);
            int init = j ? TR_INIT_ZERO : s->zero_centered ? TR_INIT_ZERO : TR_INIT_ONE;
            /* Megatron's apply_wd_to_qk_layernorm decays their weights and biases alike. */
            TR_TRY(add_param(l, name, 1, s->head_dim, !s->qk_norm_wd, init));
            l->info[l->n - 1].sp_partial = tp > 1;
        }
    return TR_OK;
}

/* A column-parallel layer splits its weight's rows and its bias; a row-parallel one splits its
 * weight's columns and keeps the whole bias on every rank. */
static tr_status add_linear(layout *l, const char *prefix, int out, int in, bool bias, int init,
                            bool column, bool swiglu, int tp) {
    char name[80];
    TR_TRY(param_name(name, sizeof name, prefix, ".weight"));
    TR_TRY(add_param_split(l, name, out, in, false, init, (split){column ? 0 : 1, swiglu, tp}));
    if (!bias) return TR_OK;
    TR_TRY(param_name(name, sizeof name, prefix, ".bias"));
    return add_param_split(l, name, 1, out, true, TR_INIT_ZERO,
                           (split){column ? 1 : -1, swiglu, tp});
}

/* LoRA's adapter of linear layer `prefix` (Megatron-Bridge's names): A = linear_in [rank, in],
 * B = linear_out [out, rank]. Under TP the adapter follows its layer (Megatron's
 * ParallelLinearAdapter): a column-parallel layer's B splits its rows (SwiGLU's fc1: the rank's
 * slice of gate and of up, like the layer), a row-parallel layer's A its columns. */
static tr_status add_adapter(layout *l, const tr_model_spec *s, const char *prefix, int target,
                             int out, int in, bool column, bool swiglu, int tp) {
    if (!s->lora_rank || !(s->lora_targets & (1u << target))) return TR_OK;
    char name[80];
    bool freeze = l->freeze;
    l->freeze = false;
    TR_TRY(param_name(name, sizeof name, prefix, ".adapter.linear_in.weight"));
    tr_status st = add_param_split(l, name, s->lora_rank, in, false, s->lora_a_init,
                                   (split){column ? -1 : 1, false, tp});
    TR_TRY(param_name(name, sizeof name, prefix, ".adapter.linear_out.weight"));
    if (st == TR_OK)
        st = add_param_split(l, name, out, s->lora_rank, false, s->lora_b_init,
                             (split){column ? 0 : -1, column && swiglu, tp});
    /* DoRA's magnitude [out] follows the layer's output like its bias; a vector, so no weight
     * decay (Megatron's rule for 1-D parameters). Its value comes from the weights
     * (tr_dora_init_magnitudes). */
    if (st == TR_OK && s->lora_dora) {
        TR_TRY(param_name(name, sizeof name, prefix, ".adapter.weight_magnitude"));
        st = add_param_split(l, name, 1, out, true, TR_INIT_ONE,
                             (split){column ? 1 : -1, column && swiglu, tp});
    }
    l->freeze = freeze;
    return st;
}

/* TP larger than the query groups: the parameters added since `first` that TP splits are
 * linear_qkv's (its weight, bias, LoRA B), whose split dimension is the rank's query rows and
 * then its group's key and value rows, a copy each of kv_rep ranks holds. */
static void mark_kv(layout *l, int first, const tr_model_spec *s, int kv_rep, int tp) {
    if (kv_rep <= 1) return;
    for (int i = first; i < l->n; i++) {
        tr_param_info *p = &l->info[i];
        if (p->split_dim < 0) continue;
        p->kv_rep = kv_rep;
        p->kv_q = s->heads * s->head_dim;
        p->kv_len = 2 * s->head_dim;
        int full = p->kv_q * tp + p->kv_len * (tp / kv_rep);
        if (p->split_dim == 0)
            p->full_rows = full;
        else
            p->full_cols = full;
    }
}

/* Multi-latent attention's tensors (runtime/mla/mla.h): the up projections column-parallel,
 * the down projections and their norms the same on every rank. */
static tr_status add_mla(layout *l, const tr_model_spec *s, const char *base, int tp) {
    tr_mla_tensor t[TR_MLA_MAX_TENSORS];
    int n = tr_mla_tensors(&s->mla, s->heads, s->hidden, t);
    char name[80];
    for (int k = 0; k < n; k++) {
        snprintf(name, sizeof name, "%s.%s", base, t[k].name);
        int init = t[k].norm ? (s->zero_centered ? TR_INIT_ZERO : TR_INIT_ONE) : TR_INIT_NORMAL;
        TR_TRY(add_param_split(l, name, t[k].rows, t[k].cols, t[k].norm, init,
                               (split){t[k].column ? 0 : -1, false, tp}));
    }
    return TR_OK;
}

static bool holds_layer(const tr_model_part *parts, int n_parts, int layer) {
    for (int k = 0; k < n_parts; k++)
        if (layer >= parts[k].first_layer && layer < parts[k].first_layer + parts[k].num_layers)
            return true;
    return false;
}

static bool any_part(const tr_model_part *parts, int n_parts, bool loss) {
    for (int k = 0; k < n_parts; k++)
        if (loss ? parts[k].has_loss : parts[k].has_embedding) return true;
    return false;
}

static tr_status add_word_embedding(layout *l, const tr_model_spec *s, int tp, bool tied_copy) {
    TR_TRY(add_param_split(l, "embedding.word_embeddings.weight", s->vocab, s->hidden, false,
                           TR_INIT_EMBEDDING, (split){0, false, tp}));
    l->info[l->n - 1].tied_copy = tied_copy;
    return TR_OK;
}

/* An MoE layer's router, experts and shared expert in place of the MLP (runtime/moe/moe.h). Under
 * TP (sequence parallel) each rank holds the router and shared expert whole and runs them on its
 * sequence chunk, so their gradients are partial per rank (sp_partial); so are the experts with
 * expert TP 1 and EP 1. An expert-parallel rank's own experts, or an expert-TP rank's slices of
 * them (split over the expert-TP group, whose gathered rows make each slice's gradient whole),
 * go to the expert buffer, whose expert-DP reduction covers them. */
static tr_status add_moe(layout *l, const tr_model_spec *s, const char *base) {
    const int init[] = {TR_INIT_NORMAL, TR_INIT_SCALED_NORMAL, TR_INIT_ZERO, s->lora_a_init,
                        s->lora_b_init};
    int n = tr_moe_param_count(&s->moe);
    tr_moe_param *p = malloc((size_t)n * sizeof *p);
    if (!p) return TR_ERR_NOMEM;
    tr_status st = tr_moe_params_at(&s->moe, base, s->hidden, s->swiglu, p);
    for (int k = 0; k < n && st == TR_OK; k++) {
        split sp = {p[k].split_dim, p[k].swiglu_split, s->moe.etp_size};
        st =
            add_param_split(l, p[k].name, p[k].rows, p[k].cols, p[k].no_decay, init[p[k].init], sp);
        if (st != TR_OK) break;
        tr_param_info *q = &l->info[l->n - 1];
        q->frozen |= p[k].frozen;
        q->expert = p[k].expert && (s->moe.ep_size > 1 || s->moe.etp_size > 1);
        q->sp_partial = s->sequence_parallel && !q->expert && !q->frozen;
    }
    /* LoRA on the experts (runtime/moe/lora.c): the adapters train, the rest is frozen */
    for (int k = 0; k < n && st == TR_OK; k++)
        if (p[k].adapter) l->info[l->n - n + k].frozen = false;
    free(p);
    return st;
}

/* Megatron builds an MTP depth's layer from the decoder's last layer spec
 * (get_gpt_mtp_block_spec: layer_specs[-1]), so in DeepSeek-V3 it is an MoE layer. */
bool tr_model_is_moe_layer(const tr_model_spec *s, int layer) {
    if (layer >= s->num_layers + s->mtp_layers) return false;
    return tr_moe_is_layer(&s->moe, layer < s->num_layers ? layer : s->num_layers - 1);
}

void tr_model_layer_base(char *out, size_t n, const tr_model_spec *s, int layer) {
    if (layer < 0 || layer >= s->num_layers) {
        snprintf(out, n, "mtp.layers.%d.mtp_model_layer", layer - s->num_layers);
        return;
    }
    char num[16];
    int at = (int)sizeof num - 1;
    num[at] = 0;
    do num[--at] = (char)('0' + layer % 10);
    while ((layer /= 10) > 0);
    cat2(out, n, "decoder.layers.", num + at);
}

/* One transformer layer's tensors under `base` (a decoder layer or an MTP depth's). */
static tr_status add_layer(layout *l, const tr_model_spec *s, int layer, const char *base,
                           int qkv_dim, int fc1_dim, int tp, int kv_rep) {
    char pre[96];
    cat2(pre, sizeof pre, base, ".input_layernorm");
    TR_TRY(add_norm(l, s, pre));
    if (s->mla.on) {
        TR_TRY(add_mla(l, s, base, tp));
    } else {
        cat2(pre, sizeof pre, base, ".self_attention.linear_qkv");
        int first = l->n;
        TR_TRY(
            add_linear(l, pre, qkv_dim, s->hidden, s->bias_qkv, TR_INIT_NORMAL, true, false, tp));
        TR_TRY(add_adapter(l, s, pre, TR_LORA_QKV, qkv_dim, s->hidden, true, false, tp));
        mark_kv(l, first, s, kv_rep, tp);
        TR_TRY(add_qk_norms(l, s, base, tp));
    }
    cat2(pre, sizeof pre, base, ".self_attention.linear_proj");
    TR_TRY(add_linear(l, pre, s->hidden, s->heads * s->head_dim, s->bias_linear,
                      TR_INIT_SCALED_NORMAL, false, false, tp));
    TR_TRY(
        add_adapter(l, s, pre, TR_LORA_PROJ, s->hidden, s->heads * s->head_dim, false, false, tp));
    cat2(pre, sizeof pre, base, ".pre_mlp_layernorm");
    TR_TRY(add_norm(l, s, pre));
    if (tr_model_is_moe_layer(s, layer)) return add_moe(l, s, base);
    cat2(pre, sizeof pre, base, ".mlp.linear_fc1");
    TR_TRY(add_linear(l, pre, fc1_dim, s->hidden, s->bias_linear, TR_INIT_NORMAL, true, s->swiglu,
                      tp));
    TR_TRY(add_adapter(l, s, pre, TR_LORA_FC1, fc1_dim, s->hidden, true, s->swiglu, tp));
    cat2(pre, sizeof pre, base, ".mlp.linear_fc2");
    TR_TRY(add_linear(l, pre, s->hidden, s->ffn, s->bias_linear, TR_INIT_SCALED_NORMAL, false,
                      false, tp));
    TR_TRY(add_adapter(l, s, pre, TR_LORA_FC2, s->hidden, s->ffn, false, false, tp));
    return TR_OK;
}

/* An MTP depth (Megatron's MultiTokenPredictionLayer): enorm, hnorm, eh_proj (column-parallel
 * [hidden, 2 hidden]), its transformer layer, final_layernorm. */
static tr_status add_mtp_depth(layout *l, const tr_model_spec *s, int depth, int qkv_dim,
                               int fc1_dim, int tp, int kv_rep) {
    char pre[64], base[64];
    snprintf(pre, sizeof pre, "mtp.layers.%d.enorm", depth);
    TR_TRY(add_norm(l, s, pre));
    snprintf(pre, sizeof pre, "mtp.layers.%d.hnorm", depth);
    TR_TRY(add_norm(l, s, pre));
    snprintf(pre, sizeof pre, "mtp.layers.%d.eh_proj", depth);
    TR_TRY(
        add_linear(l, pre, s->hidden / tp, 2 * s->hidden, false, TR_INIT_NORMAL, true, false, tp));
    tr_model_layer_base(base, sizeof base, s, s->num_layers + depth);
    TR_TRY(add_layer(l, s, s->num_layers + depth, base, qkv_dim, fc1_dim, tp, kv_rep));
    snprintf(pre, sizeof pre, "mtp.layers.%d.final_layernorm", depth);
    return add_norm(l, s, pre);
}

/* The order is the module order of Megatron's GPTModel, so a name lists like its state dict;
 * a stage lists only its own modules, under their global layer numbers. */
static tr_status build_layout(layout *l, const tr_model_spec *s, int qkv_dim, int fc1_dim, int tp,
                              int kv_rep, const tr_model_part *parts, int n_parts) {
    bool has_embedding = any_part(parts, n_parts, false), has_loss = any_part(parts, n_parts, true);
    l->freeze = s->lora_rank > 0;
    if (has_embedding) {
        TR_TRY(add_word_embedding(l, s, tp, false));
        if (s->learned_pos) {
            TR_TRY(add_param(l, "embedding.position_embeddings.weight", tr_model_pos_rows(s),
                             s->hidden, false, TR_INIT_EMBEDDING));
            l->info[l->n - 1].sp_partial = s->sequence_parallel;
        }
    }
    char base[64];
    for (int i = 0; i < s->num_layers; i++) {
        if (!holds_layer(parts, n_parts, i)) continue;
        tr_model_layer_base(base, sizeof base, s, i);
        TR_TRY(add_layer(l, s, i, base, qkv_dim, fc1_dim, tp, kv_rep));
    }
    if (!has_loss) return TR_OK;
    TR_TRY(add_norm(l, s, "decoder.final_layernorm"));
    if (!s->tied)
        TR_TRY(add_param_split(l, "output_layer.weight", s->vocab, s->hidden, false, TR_INIT_NORMAL,
                               (split){0, false, tp}));
    /* Megatron's last stage owns a second copy of the word embedding when it reads it (the tied
     * output layer, the MTP depths' lookup); same name and initialisation, so it starts equal
     * to the first stage's and the embedding group's gradient all-reduce keeps it equal. */
    if (tr_model_spec_shares_embedding(s) && !has_embedding)
        TR_TRY(add_word_embedding(l, s, tp, true));
    for (int k = 0; k < s->mtp_layers; k++)
        TR_TRY(add_mtp_depth(l, s, k, qkv_dim, fc1_dim, tp, kv_rep));
    return TR_OK;
}

const tr_param_info *tr_model_find_param(const tr_model *m, const char *name) {
    for (int i = 0; i < m->n_info; i++)
        if (strcmp(m->info[i].name, name) == 0) return &m->info[i];
    return NULL;
}

static float *view(const tr_model *m, float *base, const char *name) {
    const tr_param_info *p = tr_model_find_param(m, name);
    return p ? base + p->offset : NULL;
}

tr_status tr_model_bind_views(tr_model *m, float *base, tr_model_views *v) {
    const tr_model_spec *s = &m->spec;
    int n_layers = s->num_layers + s->mtp_layers;
    v->layers = calloc((size_t)n_layers, sizeof *v->layers);
    if (!v->layers) return TR_ERR_NOMEM;
    float *word_emb = view(m, base, "embedding.word_embeddings.weight");
    v->word_emb = m->has_tied_copy ? NULL : word_emb;
    v->pos_emb = view(m, base, "embedding.position_embeddings.weight");
    v->final_w = view(m, base, "decoder.final_layernorm.weight");
    v->final_b = view(m, base, "decoder.final_layernorm.bias");
    v->out_w = s->tied ? word_emb : view(m, base, "output_layer.weight");
    v->mtp_emb = s->mtp_layers ? word_emb : NULL;
    char n[128], pre[64];
#define BIND(field, fmt)                                                                           \
    snprintf(n, sizeof n, "%s." fmt, pre);                                                         \
    L->field = view(m, base, n)
#define BIND_MTP(field, fmt)                                                                       \
    snprintf(n, sizeof n, "mtp.layers.%d." fmt, d);                                                \
    L->field = view(m, base, n)
    for (int i = 0; i < n_layers; i++) {
        tr_layer_views *L = &v->layers[i];
        tr_model_layer_base(pre, sizeof pre, s, i);
        BIND(ln1_w, "input_layernorm.weight");
        BIND(ln1_b, "input_layernorm.bias");
        BIND(qkv_w, "self_attention.linear_qkv.weight");
        BIND(qkv_b, "self_attention.linear_qkv.bias");
        BIND(proj_w, "self_attention.linear_proj.weight");
        BIND(proj_b, "self_attention.linear_proj.bias");
        BIND(ln2_w, "pre_mlp_layernorm.weight");
        BIND(ln2_b, "pre_mlp_layernorm.bias");
        BIND(fc1_w, "mlp.linear_fc1.weight");
        BIND(fc1_b, "mlp.linear_fc1.bias");
        BIND(fc2_w, "mlp.linear_fc2.weight");
        BIND(fc2_b, "mlp.linear_fc2.bias");
        BIND(qn_w, "self_attention.q_layernorm.weight");
        BIND(qn_b, "self_attention.q_layernorm.bias");
        BIND(kn_w, "self_attention.k_layernorm.weight");
        BIND(kn_b, "self_attention.k_layernorm.bias");
        if (s->mla.on) { /* MLA's q_layernorm is its own tensor, not the qk_norm one */
            L->qn_w = L->qn_b = NULL;
            tr_mla_tensor t[TR_MLA_MAX_TENSORS];
            int nt = tr_mla_tensors(&s->mla, s->heads, s->hidden, t);
            for (int k = 0; k < nt; k++) {
                snprintf(n, sizeof n, "%s.%s", pre, t[k].name);
                *tr_mla_field(&L->mla, t[k].field) = view(m, base, n);
            }
        }
        static const char *const adapted[TR_LORA_TARGETS] = {"self_attention.linear_qkv",
                                                             "self_attention.linear_proj",
                                                             "mlp.linear_fc1", "mlp.linear_fc2"};
        for (int t = 0; t < TR_LORA_TARGETS; t++) {
            snprintf(n, sizeof n, "%s.%s.adapter.linear_in.weight", pre, adapted[t]);
            L->lora_a[t] = view(m, base, n);
            snprintf(n, sizeof n, "%s.%s.adapter.linear_out.weight", pre, adapted[t]);
            L->lora_b[t] = view(m, base, n);
            snprintf(n, sizeof n, "%s.%s.adapter.weight_magnitude", pre, adapted[t]);
            L->lora_m[t] = view(m, base, n);
        }
        if (i < s->num_layers) continue;
        int d = i - s->num_layers; /* an MTP depth's own tensors */
        BIND_MTP(mtp_enorm_w, "enorm.weight");
        BIND_MTP(mtp_enorm_b, "enorm.bias");
        BIND_MTP(mtp_hnorm_w, "hnorm.weight");
        BIND_MTP(mtp_hnorm_b, "hnorm.bias");
        BIND_MTP(mtp_eh_w, "eh_proj.weight");
        BIND_MTP(mtp_fnorm_w, "final_layernorm.weight");
        BIND_MTP(mtp_fnorm_b, "final_layernorm.bias");
    }
#undef BIND_MTP
#undef BIND
    return TR_OK;
}

tr_status tr_model_moe_bind(tr_model *m) {
    if (!m->moe) return TR_OK;
    int n = tr_moe_param_count(&m->spec.moe);
    int64_t *off = malloc((size_t)n * sizeof *off);
    if (!off) return TR_ERR_NOMEM;
    for (int i = 0; i < m->spec.num_layers + m->spec.mtp_layers; i++) {
        if (!m->moe[i]) continue;
        for (int k = 0; k < n; k++) off[k] = m->info[m->moe_param0[i] + k].offset;
        tr_moe_bind(m->moe[i], m->params, m->grads, off);
    }
    free(off);
    return TR_OK;
}

/* Layer i's recompute sharing and set, from the part that holds it (an MTP depth's: the loss
 * part). */
static unsigned moe_rc(const tr_model *m, int i, int *set) {
    const tr_model_spec *s = &m->spec;
    *set = 0;
    for (int k = 0; k < m->n_parts; k++) {
        const tr_model_part *p = &m->parts[k];
        bool held = i < s->num_layers ? i >= p->first_layer && i < p->first_layer + p->num_layers
                                      : p->has_loss;
        if (held) return tr_model_moe_rc(s, p, i, set);
    }
    return 0;
}

/* The dims of MoE layer i (false: dense or not held here), *set its recompute state's. */
static bool moe_dims(const tr_model *m, int i, tr_moe_dims *d, int *set) {
    const tr_model_spec *s = &m->spec;
    bool held = i < s->num_layers ? holds_layer(m->parts, m->n_parts, i)
                                  : any_part(m->parts, m->n_parts, true);
    if (!tr_model_is_moe_layer(s, i) || !held) return false;
    *d = (tr_moe_dims){.hidden = s->hidden,
                       .batch = m->batch,
                       .seq = s->seq,
                       .slots = tr_model_layer_slots(m, i),
                       .layer = i,
                       .swiglu = s->swiglu,
                       .gelu_tanh = s->gelu_tanh,
                       .lowp = s->lowp,
                       .rc = moe_rc(m, i, set),
                       .dev = m->dev,
                       .sp = (s->sequence_parallel ? m->tp.size : 1) * (s->cp > 1 ? s->cp : 1)};
    d->seq = s->sequence_parallel ? s->seq / m->tp.size : s->seq; /* s->seq: CP's share */
    return true;
}

/* The recompute states, each as large as the largest layer's that uses it. */
static tr_status moe_rc_alloc(tr_model *m, int n_all) {
    int64_t fb[TR_MOE_MAX_LAYERS] = {0}, ib[TR_MOE_MAX_LAYERS] = {0};
    for (int i = 0; i < n_all; i++) {
        tr_moe_dims d;
        int set;
        if (!moe_dims(m, i, &d, &set) || !d.rc) continue;
        int64_t ints, floats = tr_moe_rc_bytes(&m->spec.moe, &d, &ints);
        if (set < 0 || set >= TR_MOE_MAX_LAYERS || floats <= 0) return TR_ERR_INVALID;
        fb[set] = floats > fb[set] ? floats : fb[set];
        ib[set] = ints > ib[set] ? ints : ib[set];
    }
    for (int r = 0; r < TR_MOE_MAX_LAYERS; r++) {
        if (!fb[r]) continue;
        m->moe_act_bytes += fb[r] + ib[r];
        m->moe_rc_buf[r] = tr_moe_dev_alloc(m->dev, fb[r]);
        m->moe_rc_ibuf[r] = tr_moe_dev_alloc(m->dev, ib[r]);
        if (!m->moe_rc_buf[r] || !m->moe_rc_ibuf[r]) return TR_ERR_NOMEM;
    }
    return TR_OK;
}

/* The MoE layers of the layers this model holds; host memory (runtime/moe/moe.h). */
static tr_status moe_create(tr_model *m) {
    const tr_model_spec *s = &m->spec;
    if (s->moe.experts <= 0) return TR_OK;
    if (m->dev && !tr_device_host_visible(m->dev)) return TR_ERR_INVALID;
    int n_all = s->num_layers + s->mtp_layers; /* the MTP depths' layers live on the loss stage */
    m->moe = calloc((size_t)n_all, sizeof *m->moe);
    m->moe_param0 = calloc((size_t)n_all, sizeof *m->moe_param0);
    if (!m->moe || !m->moe_param0) return TR_ERR_NOMEM;
    TR_TRY(moe_rc_alloc(m, n_all));
    char name[128], base[64];
    for (int i = 0; i < n_all; i++) {
        tr_moe_dims d;
        int set;
        if (!moe_dims(m, i, &d, &set)) continue;
        tr_model_layer_base(base, sizeof base, s, i);
        snprintf(name, sizeof name, "%s.mlp.router.weight", base);
        const tr_param_info *p = tr_model_find_param(m, name);
        if (!p) return TR_ERR_INTERNAL;
        m->moe_param0[i] = (int)(p - m->info);
        int64_t b[TR_MOE_MAX_BUFFERS];
        for (int j = tr_moe_buffer_bytes(&s->moe, &d, b) - 1; j >= 0; j--) m->moe_act_bytes += b[j];
        d.rc_buf = m->moe_rc_buf[set];
        d.rc_ibuf = m->moe_rc_ibuf[set];
        TR_TRY(tr_moe_create(&m->moe[i], &s->moe, &d, m->ops));
    }
    return tr_model_moe_bind(m);
}

void tr_model_moe_set_comm(tr_model *m, struct tr_comm *comm) {
    for (int i = 0; m->moe && i < m->spec.num_layers + m->spec.mtp_layers; i++)
        if (m->moe[i]) tr_moe_set_comm(m->moe[i], comm);
}

static void moe_free(tr_model *m) {
    if (m->moe)
        for (int i = 0; i < m->spec.num_layers + m->spec.mtp_layers; i++) tr_moe_free(m->moe[i]);
    for (int r = 0; r < TR_MOE_MAX_LAYERS; r++) {
        tr_moe_dev_free(m->dev, m->moe_rc_buf[r]);
        tr_moe_dev_free(m->dev, m->moe_rc_ibuf[r]);
        m->moe_rc_buf[r] = NULL;
        m->moe_rc_ibuf[r] = NULL;
    }
    free(m->moe);
    free(m->moe_param0);
}

void tr_model_moe_stats(tr_model *m, double *lb, double *z, int *n) {
    *lb = *z = 0.0;
    *n = 0;
    /* the MTP depths' layers count like the decoder's (Megatron's tracker holds num_layers +
     * mtp_num_layers entries) */
    for (int i = 0; m->moe && i < m->spec.num_layers + m->spec.mtp_layers; i++) {
        if (!m->moe[i]) continue;
        double a, b;
        int k;
        tr_moe_take_stats(m->moe[i], &a, &b, &k);
        *lb += a;
        *z += b;
        *n += k;
    }
}

void tr_model_moe_tokens(tr_model *m, double *out) {
    int E = m->spec.moe.experts;
    for (int i = 0; i < m->spec.num_layers + m->spec.mtp_layers; i++) {
        double *row = out + (size_t)i * E;
        if (m->moe && m->moe[i])
            tr_moe_take_tokens(m->moe[i], row);
        else
            memset(row, 0, (size_t)E * sizeof *row);
    }
}

tr_status tr_model_moe_step_end(tr_model *m, tr_status (*reduce)(void *ctx, double *v, int n),
                                void *ctx) {
    for (int i = 0; m->moe && i < m->spec.num_layers + m->spec.mtp_layers; i++) {
        if (!m->moe[i]) continue;
        if (reduce && m->spec.moe.expert_bias)
            TR_TRY(reduce(ctx, tr_moe_step_counts(m->moe[i]), tr_moe_experts(m->moe[i])));
        TR_TRY(tr_moe_step_end(m->moe[i]));
    }
    return TR_OK;
}

static tr_status check_spec(const tr_model_spec *s, tr_tp_shard tp, int batch) {
    if (s->num_layers < 1 || s->hidden < 1 || s->heads < 1 || s->groups < 1 || s->head_dim < 1 ||
        s->ffn < 1 || s->vocab < 1 || s->seq < 1 || batch < 1)
        return TR_ERR_INVALID;
    if (s->heads % s->groups != 0) return TR_ERR_INVALID;
    if (s->rope && (s->rope_p.rot_dim < 2 || s->rope_p.rot_dim > s->head_dim))
        return TR_ERR_INVALID;
    const tr_mla_spec *a = &s->mla;
    bool run = !s->sizing_only;
    if (a->on && (a->q_lora_rank < 0 || a->kv_lora_rank < 1 || a->qk_dim < 1 || a->rope_dim < 2 ||
                  a->rope_dim % 2 || a->v_dim != s->head_dim || s->groups != s->heads ||
                  (run && (s->lora_rank || s->qk_norm))))
        return TR_ERR_INVALID; /* what runtime.mla_* refuse */
    if (s->mtp_layers < 0 ||
        (s->mtp_layers && run &&
         (s->lora_rank || s->defer_wgrad || s->learned_pos || s->hidden % tp.size)))
        return TR_ERR_INVALID; /* what runtime.mtp_* refuse */
    if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size) return TR_ERR_INVALID;
    /* Query groups (or, TP being a multiple of them, their heads), the MLP width and the padded
     * vocabulary split evenly. */
    bool kv_split =
        s->groups % tp.size == 0 || (tp.size % s->groups == 0 && s->heads % tp.size == 0);
    if (!kv_split || s->ffn % tp.size || s->vocab % tp.size) return TR_ERR_INVALID;
    if (s->sequence_parallel && s->seq % tp.size) return TR_ERR_INVALID;
    /* MoE under TP runs on sequence-parallel chunks (runtime.moe_tp, moe.tp_needs_sp) */
    if (run && s->moe.experts > 0 && tp.size > 1 && !s->sequence_parallel) return TR_ERR_INVALID;
    return TR_OK;
}

/* Parts must be stages of the model: inside it, disjoint, the embedding in front of layer 0 and
 * the loss behind the last layer, each at most once. */
static tr_status check_parts(const tr_model_spec *s, const tr_model_part *parts, int n_parts) {
    if (!parts || n_parts < 1) return TR_ERR_INVALID;
    int emb = 0, loss = 0;
    for (int k = 0; k < n_parts; k++) {
        const tr_model_part *p = &parts[k];
        int end = p->first_layer + p->num_layers;
        if (p->first_layer < 0 || p->num_layers < 0 || end > s->num_layers || p->slots < 0)
            return TR_ERR_INVALID;
        if ((p->has_embedding && p->first_layer != 0) || (p->has_loss && end != s->num_layers))
            return TR_ERR_INVALID;
        emb += p->has_embedding;
        loss += p->has_loss;
        for (int j = 0; j < k; j++) {
            const tr_model_part *q = &parts[j];
            if (p->first_layer < q->first_layer + q->num_layers && q->first_layer < end)
                return TR_ERR_INVALID;
        }
    }
    return emb <= 1 && loss <= 1 ? TR_OK : TR_ERR_INVALID;
}

/* This rank's sizes: the TP-split dimensions divided by tp.size (with more TP ranks than query
 * groups, one group each). */
static tr_model_spec local_spec(const tr_model_spec *s, tr_tp_shard tp) {
    tr_model_spec l = *s;
    l.heads = s->heads / tp.size;
    l.groups = s->groups < tp.size ? 1 : s->groups / tp.size;
    l.ffn = s->ffn / tp.size;
    l.vocab = s->vocab / tp.size;
    l.sequence_parallel = s->sequence_parallel && tp.size > 1;
    return l;
}

tr_status tr_model_param_list(const tr_model_spec *s, tr_tp_shard tp, const tr_model_part *parts,
                              int n_parts, tr_param_info **info, int *n_info, int64_t *numel) {
    *info = NULL;
    *n_info = 0;
    *numel = 0;
    TR_TRY(check_spec(s, tp, 1));
    TR_TRY(check_parts(s, parts, n_parts));
    tr_model_spec l = local_spec(s, tp);
    int qkv_dim = (l.heads + 2 * l.groups) * l.head_dim, fc1_dim = l.swiglu ? 2 * l.ffn : l.ffn;
    layout lay = {0};
    tr_status st = build_layout(&lay, &l, qkv_dim, fc1_dim, tp.size, tr_model_kv_replicas(s, tp),
                                parts, n_parts);
    if (st != TR_OK) {
        free(lay.info);
        return st;
    }
    *info = lay.info;
    *n_info = lay.n;
    *numel = lay.total;
    return TR_OK;
}

tr_status tr_model_shape(tr_model *m, const tr_model_spec *s, tr_tp_shard tp, int batch,
                         const tr_model_part *parts, int n_parts) {
    memset(m, 0, sizeof *m);
    TR_TRY(check_spec(s, tp, batch));
    TR_TRY(check_parts(s, parts, n_parts));
    m->full = *s;
    m->spec = local_spec(s, tp);
    m->full.sequence_parallel = m->spec.sequence_parallel;
    /* The logical model holds every expert; this rank's spec keeps its EP place. */
    m->full.moe.ep_size = 1;
    m->full.moe.ep_rank = 0;
    m->full.moe.etp_size = 1;
    m->full.moe.etp_rank = 0;
    m->tp = tp;
    m->tp_group = TR_GROUP_TP;
    m->batch = batch;
    m->training = 1;
    m->qkv_dim = (m->spec.heads + 2 * m->spec.groups) * m->spec.head_dim;
    m->fc1_dim = m->spec.swiglu ? 2 * m->spec.ffn : m->spec.ffn;
    m->parts = (tr_model_part *)parts;
    m->n_parts = n_parts;
    m->has_tied_copy = tr_model_spec_shares_embedding(s) && any_part(parts, n_parts, true) &&
                       !any_part(parts, n_parts, false);
    return TR_OK;
}

static tr_status create_parts(tr_model *m, tr_device *dev, const tr_model_spec *s, tr_tp_shard tp,
                              const tr_ops *ops, int batch, const tr_model_part *parts,
                              int n_parts) {
    TR_TRY(tr_model_shape(m, s, tp, batch, parts, n_parts));
    m->parts = NULL; /* borrowed by the shape; the model owns its copy */
    m->has_tied_copy = false;
    m->dev = dev;
    s = &m->spec;
    m->ops = ops;
    tr_status st = TR_ERR_NOMEM;
    m->parts = malloc((size_t)n_parts * sizeof *m->parts);
    if (!m->parts) goto fail;
    memcpy(m->parts, parts, (size_t)n_parts * sizeof *parts);
    m->n_parts = n_parts;
    layout l = {0};
    st = build_layout(&l, s, m->qkv_dim, m->fc1_dim, tp.size, tr_model_kv_replicas(&m->full, tp),
                      parts, n_parts);
    m->info = l.info;
    m->n_info = l.n;
    m->n_params = l.total;
    if (st != TR_OK) goto fail;
    for (int i = 0; i < m->n_info; i++) m->has_tied_copy |= m->info[i].tied_copy;
    st = TR_ERR_NOMEM;
    size_t param_bytes = (size_t)l.total * sizeof(float);
    if ((st = tr_device_alloc(dev, TR_MEM_PARAMS, param_bytes, (void **)&m->params)) != TR_OK ||
        (st = tr_device_alloc(dev, TR_MEM_GRADS, param_bytes, (void **)&m->grads)) != TR_OK)
        goto fail;
    if ((st = tr_model_alloc_acts(m)) != TR_OK) goto fail;
    if ((st = tr_model_bind_views(m, m->params, &m->p)) != TR_OK) goto fail;
    if ((st = tr_model_bind_views(m, m->grads, &m->g)) != TR_OK) goto fail;
    if ((st = moe_create(m)) != TR_OK) goto fail;
    if ((st = tr_dora_alloc(m)) != TR_OK) goto fail;
    if ((st = tr_model_wcopy_create(m)) != TR_OK) goto fail;
    if (s->rope) {
        st = ops->rope_table(m->rope_cos, m->rope_sin, &s->rope_p, tr_model_pos_rows(s), 0);
        if (st != TR_OK) goto fail;
    }
    if (s->mla.on && (st = tr_mla_rope_tables(&s->mla, s->seq, dev, &m->mla_sc)) != TR_OK)
        goto fail;
    return TR_OK;
fail:
    tr_model_free(m);
    return st;
}

tr_status tr_model_create_parts(tr_model *m, const tr_model_spec *s, tr_tp_shard tp,
                                const tr_ops *ops, int batch, const tr_model_part *parts,
                                int n_parts) {
    return create_parts(m, tr_device_host(), s, tp, ops, batch, parts, n_parts);
}

tr_status tr_model_create_parts_on(tr_model *m, tr_device *dev, const tr_model_spec *s,
                                   tr_tp_shard tp, int batch, const tr_model_part *parts,
                                   int n_parts) {
    return create_parts(m, dev, s, tp, tr_device_ops(dev), batch, parts, n_parts);
}

tr_status tr_model_create(tr_model *m, const tr_model_spec *s, tr_tp_shard tp, const tr_ops *ops,
                          int batch) {
    tr_model_part whole = {0, s->num_layers, true, true, 1};
    return tr_model_create_parts(m, s, tp, ops, batch, &whole, 1);
}

void tr_model_free(tr_model *m) {
    tr_device *dev = m->dev ? m->dev : tr_device_host();
    tr_model_wcopy_free(m); /* the newest parameter allocation: freed first */
    tr_dora_free(m, dev);
    tr_device_free(dev, TR_MEM_PARAMS, m->params);
    tr_device_free(dev, TR_MEM_GRADS, m->grads);
    free(m->info);
    free(m->p.layers);
    free(m->g.layers);
    tr_model_free_acts(m, dev);
    moe_free(m);
    free(m->parts);
    tr_device_free(dev, TR_MEM_ACTIVATIONS, m->pos_local);
    tr_device_free(dev, TR_MEM_ACTIVATIONS, m->pos_sin);
    tr_device_free(dev, TR_MEM_ACTIVATIONS, m->pos_cos);
    memset(m, 0, sizeof *m);
}
