/* Placing the parameters where a data-parallel gradient layout wants them, and the per-parameter
 * events (forward about to read, backward finished) the training loop hangs communication on. */
#include <stdlib.h>
#include <string.h>

#include "runtime/device/device.h"
#include "runtime/model/internal.h"

tr_status tr_model_relayout(tr_model *m, const int64_t *offsets, int64_t numel) {
    for (int i = 0; i < m->n_info; i++)
        if (offsets[i] < 0 || offsets[i] + m->info[i].numel > numel) return TR_ERR_INVALID;
    /* The parameters wait in host memory while the device buffers are replaced: a device arena
     * releases only its newest allocation, so the old buffers go back (weight copy, gradients,
     * parameters: newest first) before the new ones are made, and the device never holds both. */
    size_t old_bytes = (size_t)m->n_params * sizeof(float);
    float *staged = malloc(old_bytes ? old_bytes : 1);
    if (!staged) return TR_ERR_NOMEM;
    tr_status st = tr_device_to_host(m->dev, staged, m->params, old_bytes);
    if (st != TR_OK) {
        free(staged);
        return st;
    }
    tr_model_wcopy_free(m);
    tr_device_free(m->dev, TR_MEM_GRADS, m->grads);
    tr_device_free(m->dev, TR_MEM_PARAMS, m->params);
    m->params = m->grads = NULL;
    size_t bytes = (size_t)numel * sizeof(float);
    st = tr_device_alloc(m->dev, TR_MEM_PARAMS, bytes, (void **)&m->params);
    if (st == TR_OK) st = tr_device_alloc(m->dev, TR_MEM_GRADS, bytes, (void **)&m->grads);
    for (int i = 0; i < m->n_info && st == TR_OK; i++)
        st = tr_device_to_device(m->dev, m->params + offsets[i], staged + m->info[i].offset,
                                 (size_t)m->info[i].numel * sizeof(float));
    free(staged);
    if (st != TR_OK) return st; /* the model is unusable: the caller destroys it */
    for (int i = 0; i < m->n_info; i++) m->info[i].offset = offsets[i];
    m->n_params = numel;
    free(m->p.layers);
    free(m->g.layers);
    m->p.layers = m->g.layers = NULL;
    TR_TRY(tr_model_bind_views(m, m->params, &m->p));
    TR_TRY(tr_model_bind_views(m, m->grads, &m->g));
    TR_TRY(tr_model_moe_bind(m));
    return tr_model_wcopy_create(m);
}

/* The index of the parameter whose first element is `at` inside `base`, or -1. */
static int param_index(const tr_model *m, const float *base, const float *at) {
    int64_t off = at - base;
    for (int i = 0; i < m->n_info; i++)
        if (m->info[i].offset == off) return i;
    return -1;
}

static tr_status notify(const tr_model *m, const float *base, const float *const *views, int n,
                        tr_status (*fn)(void *, int)) {
    if (!fn) return TR_OK;
    for (int i = 0; i < n; i++) {
        if (!views[i]) continue;
        int p = param_index(m, base, views[i]);
        if (p < 0) return TR_ERR_INVALID;
        TR_TRY(fn(m->hooks.ctx, p));
    }
    return TR_OK;
}

/* An MoE layer's tensors (its tr_moe_params, consecutive in info) to fn. */
static tr_status notify_moe(const tr_model *m, int layer, tr_status (*fn)(void *, int)) {
    if (!fn || !m->moe || !m->moe[layer]) return TR_OK;
    int n = tr_moe_param_count(&m->spec.moe);
    for (int k = 0; k < n; k++) TR_TRY(fn(m->hooks.ctx, m->moe_param0[layer] + k));
    return TR_OK;
}

/* A layer's tensors: the base ones (with the q/k norms), then the LoRA adapters and DoRA
 * magnitudes (NULL when absent). */
enum { LAYER_BASE = 16, LAYER_MLA = LAYER_BASE + 3 * TR_LORA_TARGETS };
enum { LAYER_MTP = LAYER_MLA + TR_MLA_MAX_TENSORS, LAYER_TENSORS = LAYER_MTP + 7 };

static int layer_list(const tr_layer_views *v, const float *out[LAYER_TENSORS]) {
    const float *l[LAYER_BASE] = {v->ln1_w, v->ln1_b, v->qkv_w, v->qkv_b, v->proj_w, v->proj_b,
                                  v->ln2_w, v->ln2_b, v->fc1_w, v->fc1_b, v->fc2_w,  v->fc2_b,
                                  v->qn_w,  v->qn_b,  v->kn_w,  v->kn_b};
    memcpy(out, l, sizeof l);
    for (int t = 0; t < TR_LORA_TARGETS; t++) {
        out[LAYER_BASE + 3 * t] = v->lora_a[t];
        out[LAYER_BASE + 1 + 3 * t] = v->lora_b[t];
        out[LAYER_BASE + 2 + 3 * t] = v->lora_m[t];
    }
    tr_mla_weights mla = v->mla;
    for (int k = 0; k < TR_MLA_MAX_TENSORS; k++) out[LAYER_MLA + k] = *tr_mla_field(&mla, k);
    const float *mtp[7] = {v->mtp_enorm_w, v->mtp_enorm_b, v->mtp_hnorm_w, v->mtp_hnorm_b,
                           v->mtp_eh_w,    v->mtp_fnorm_w, v->mtp_fnorm_b};
    memcpy(out + LAYER_MTP, mtp, sizeof mtp);
    return LAYER_TENSORS;
}

/* LoRA: the backward still computes the gradients of frozen norms and embeddings; they are
 * zeroed before anyone is told they are final, so an overlapped bucket reduction never carries
 * them into the gradient norm. */
static tr_status clear_frozen(const tr_model *m, const float *const *views, int n) {
    if (!m->spec.lora_rank) return TR_OK;
    for (int i = 0; i < n; i++) {
        if (!views[i]) continue;
        int p = param_index(m, m->grads, views[i]);
        if (p < 0) return TR_ERR_INVALID;
        if (m->info[p].frozen)
            TR_TRY(m->ops->fill(m->grads + m->info[p].offset, m->info[p].numel, 0.0f));
    }
    return TR_OK;
}

/* The loss stage's copy of an untied word embedding (MTP's lookup table, not the output layer):
 * reported with the head's tensors. */
static bool untied_copy(const tr_model *m) {
    return m->has_tied_copy && !m->spec.tied;
}

tr_status tr_model_before_params(const tr_model *m, int where) {
    const float *v[LAYER_TENSORS];
    int n;
    if (where == TR_MODEL_AT_EMBEDDING) {
        v[0] = m->p.word_emb;
        v[1] = m->p.pos_emb;
        n = 2;
    } else if (where == TR_MODEL_AT_HEAD) {
        v[0] = m->p.final_w;
        v[1] = m->p.final_b;
        /* A tied weight is read first by the embedding, unless this stage holds its own copy. */
        v[2] = m->spec.tied && !m->has_tied_copy ? NULL : m->p.out_w;
        /* An untied copy is the MTP depths' alone; they run right after the head. */
        v[3] = untied_copy(m) ? m->p.mtp_emb : NULL;
        n = 4;
    } else {
        n = layer_list(&m->p.layers[where], v);
    }
    TR_TRY(notify(m, m->params, v, n, m->hooks.before_param));
    if (where >= 0) TR_TRY(notify_moe(m, where, m->hooks.before_param));
    /* The parameters are complete now (a pending all-gather has landed): bring the weight copy
     * of the linear layers about to run up to date. */
    if (where == TR_MODEL_AT_EMBEDDING) return TR_OK;
    if (where == TR_MODEL_AT_HEAD) return tr_model_wcopy_refresh(m, m->p.out_w);
    const tr_layer_views *L = &m->p.layers[where];
    const float *w[4] = {L->qkv_w, L->proj_w, L->fc1_w, L->fc2_w};
    for (int i = 0; i < 4; i++) TR_TRY(tr_model_wcopy_refresh(m, w[i]));
    return TR_OK;
}

tr_status tr_model_grads_done(const tr_model *m, int where) {
    const float *v[LAYER_TENSORS];
    int n;
    if (where == TR_MODEL_AT_EMBEDDING) {
        v[0] = m->g.pos_emb;
        v[1] = m->g.word_emb;
        n = 2;
    } else if (where == TR_MODEL_AT_HEAD || where == TR_MODEL_AT_OUTPUT) {
        /* A tied weight's last use is the embedding lookup, unless this stage holds a copy; a
         * deferred weight gradient is complete after the drain (AT_OUTPUT) only. */
        bool out_w =
            !(m->spec.tied && !m->has_tied_copy) && (where == TR_MODEL_AT_OUTPUT || !m->defer_cap);
        v[0] = out_w ? m->g.out_w : NULL;
        v[1] = where == TR_MODEL_AT_HEAD ? m->g.final_w : NULL;
        v[2] = where == TR_MODEL_AT_HEAD ? m->g.final_b : NULL;
        /* the MTP depths' backward ran before the head's */
        v[3] = where == TR_MODEL_AT_HEAD && untied_copy(m) ? m->g.mtp_emb : NULL;
        n = 4;
    } else {
        n = layer_list(&m->g.layers[where], v);
    }
    TR_TRY(clear_frozen(m, v, n));
    TR_TRY(notify(m, m->grads, v, n, m->hooks.grad_ready));
    return where >= 0 ? notify_moe(m, where, m->hooks.grad_ready) : TR_OK;
}
