/* The half-precision working copy of the linear layers' weights (docs/runtime.md, "Mixed
 * precision"): made from the fp32 parameters once per change of them instead of at every GEMM.
 * Staleness is tracked per tensor against a version counter of the parameters, refreshed where
 * the forward is about to read a tensor (after any pending parameter all-gather), and checked
 * where a GEMM reads it. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "runtime/device/device.h"
#include "runtime/model/internal.h"

/* 128 half-precision elements: 256 bytes, the alignment cuBLASLt's fastest kernels assume. */
#define WCOPY_ALIGN 128

static int param_at(const tr_model *m, const float *w) {
    if (!w) return -1;
    for (int i = 0; i < m->n_info; i++)
        if (m->params + m->info[i].offset == w) return i;
    return -1;
}

/* The tensors a linear layer's GEMM reads as its weight: the four of every layer and the
 * output layer's (the word embedding when tied, or the last stage's tied copy). */
static void mark(const tr_model *m, const float *w, bool *used) {
    int i = param_at(m, w);
    if (i >= 0) used[i] = true;
}

tr_status tr_model_wcopy_create(tr_model *m) {
    if (!m->spec.lowp || m->spec.no_weight_copy) return TR_OK;
    bool *used = calloc((size_t)m->n_info + 1, sizeof *used);
    m->wcopy_off = malloc(((size_t)m->n_info + 1) * sizeof *m->wcopy_off);
    m->wcopy_version = calloc((size_t)m->n_info + 1, sizeof *m->wcopy_version);
    tr_status st = TR_ERR_NOMEM;
    if (!used || !m->wcopy_off || !m->wcopy_version) goto done;
    for (int l = 0; l < m->spec.num_layers; l++) {
        const tr_layer_views *v = &m->p.layers[l];
        mark(m, v->qkv_w, used);
        mark(m, v->proj_w, used);
        mark(m, v->fc1_w, used);
        mark(m, v->fc2_w, used);
    }
    mark(m, m->p.out_w, used);
    int64_t total = 0;
    for (int i = 0; i < m->n_info; i++) {
        m->wcopy_off[i] = used[i] ? total : -1;
        if (used[i]) total += (m->info[i].numel + WCOPY_ALIGN - 1) / WCOPY_ALIGN * WCOPY_ALIGN;
    }
    /* Version 0 is never current: every tensor is cast before its first use. */
    m->params_version = m->frozen_version = 1;
    m->wcopy_verify = tr_device_host_visible(m->dev);
    st = tr_device_alloc(m->dev, TR_MEM_PARAMS, (size_t)(total ? total : 1) * sizeof *m->wcopy,
                         (void **)&m->wcopy);
done:
    free(used);
    return st;
}

void tr_model_wcopy_free(tr_model *m) {
    tr_device_free(m->dev ? m->dev : tr_device_host(), TR_MEM_PARAMS, m->wcopy);
    free(m->wcopy_off);
    free(m->wcopy_version);
    m->wcopy = NULL;
    m->wcopy_off = NULL;
    m->wcopy_version = NULL;
}

void tr_model_params_changed(tr_model *m) {
    m->frozen_version = ++m->params_version;
}

void tr_model_params_stepped(tr_model *m) {
    m->params_version++;
}

static bool current(const tr_model *m, int i) {
    uint64_t v = m->wcopy_version[i];
    return m->info[i].frozen ? v >= m->frozen_version : v == m->params_version;
}

/* A copy its version calls current must equal a fresh cast; host-visible devices only, where
 * the comparison is a host loop. */
static tr_status verify(const tr_model *m, int i) {
    const tr_param_info *p = &m->info[i];
    uint16_t *fresh = malloc((size_t)(p->numel ? p->numel : 1) * sizeof *fresh);
    if (!fresh) return TR_ERR_NOMEM;
    tr_status st = m->ops->cast_lowp((tr_lowp)m->spec.lowp, fresh, m->params + p->offset, p->numel);
    if (st == TR_OK && memcmp(fresh, m->wcopy + m->wcopy_off[i], (size_t)p->numel * 2) != 0) {
        TR_ERROR("the half-precision copy of %s is stale: its fp32 values changed without "
                 "tr_model_params_changed",
                 p->name);
        st = TR_ERR_INTERNAL;
    }
    free(fresh);
    return st;
}

tr_status tr_model_wcopy_refresh(const tr_model *m, const float *w) {
    if (!m->wcopy) return TR_OK;
    int i = param_at(m, w);
    if (i < 0 || m->wcopy_off[i] < 0) return TR_OK;
    if (current(m, i)) return m->wcopy_verify ? verify(m, i) : TR_OK;
    const tr_param_info *p = &m->info[i];
    TR_TRY(m->ops->cast_lowp((tr_lowp)m->spec.lowp, m->wcopy + m->wcopy_off[i],
                             m->params + p->offset, p->numel));
    m->wcopy_version[i] = m->params_version;
    return TR_OK;
}

tr_status tr_model_wcopy_of(const tr_model *m, const float *w, const uint16_t **out) {
    *out = NULL;
    if (!m->wcopy) return TR_OK;
    int i = param_at(m, w);
    if (i < 0 || m->wcopy_off[i] < 0) return TR_OK;
    if (!current(m, i)) {
        TR_ERROR("the half-precision copy of %s is stale: the forward did not refresh it",
                 m->info[i].name);
        return TR_ERR_INTERNAL;
    }
    *out = m->wcopy + m->wcopy_off[i];
    return TR_OK;
}
