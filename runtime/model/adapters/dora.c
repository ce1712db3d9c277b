/* See runtime/model/adapters/dora.h. */
#include "runtime/model/adapters/dora.h"

#include <stdlib.h>

#include "runtime/model/internal.h"
#include "runtime/model/tensor_parallel.h"

/* Rows of V built at once: bounds the scratch to a block of the widest weight. */
#define DORA_BLOCK_ROWS 64

static int64_t layer_out(const tr_model *m, int target) {
    return target == TR_LORA_QKV ? m->qkv_dim : target == TR_LORA_FC1 ? m->fc1_dim : m->spec.hidden;
}

tr_status tr_dora_alloc(tr_model *m) {
    const tr_model_spec *s = &m->spec;
    if (!s->lora_rank || !s->lora_dora) return TR_OK;
    int n = s->num_layers * TR_LORA_TARGETS;
    m->dora_at = malloc((size_t)n * sizeof *m->dora_at);
    if (!m->dora_at) return TR_ERR_NOMEM;
    int64_t scales = 0, widest_out = s->hidden;
    for (int i = 0; i < n; i++) {
        int64_t out = layer_out(m, i % TR_LORA_TARGETS);
        m->dora_at[i] = -1;
        if (!m->p.layers[i / TR_LORA_TARGETS].lora_m[i % TR_LORA_TARGETS]) continue;
        m->dora_at[i] = scales;
        scales += 2 * out;
        if (out > widest_out) widest_out = out;
    }
    int64_t widest_in = s->hidden > s->ffn ? s->hidden : s->ffn;
    if ((int64_t)s->heads * s->head_dim > widest_in) widest_in = (int64_t)s->heads * s->head_dim;
    m->dora_v_rows = DORA_BLOCK_ROWS;
    int64_t bt = (int64_t)m->batch * s->seq;
    size_t floats = (size_t)(scales + DORA_BLOCK_ROWS * widest_in + bt * widest_out);
    TR_TRY(tr_device_alloc(m->dev, TR_MEM_ACTIVATIONS, floats * sizeof(float),
                           (void **)&m->dora_scale));
    m->dora_v = m->dora_scale + scales;
    m->dora_z = m->dora_v + DORA_BLOCK_ROWS * widest_in;
    return TR_OK;
}

void tr_dora_free(tr_model *m, tr_device *dev) {
    if (m->dora_scale) tr_device_free(dev, TR_MEM_ACTIVATIONS, m->dora_scale);
    free(m->dora_at);
    m->dora_scale = m->dora_v = m->dora_z = NULL;
    m->dora_at = NULL;
}

/* Built a block of rows at a time; a row-parallel layer's rank holds a slice of the columns, so
 * its partial sums are summed over TP. */
tr_status tr_dora_weight_sq(const tr_linear *l, float *sq) {
    const tr_model *m = l->model;
    int r = m->spec.lora_rank;
    for (int j0 = 0; j0 < l->out; j0 += m->dora_v_rows) {
        int rows = l->out - j0 < m->dora_v_rows ? l->out - j0 : m->dora_v_rows;
        TR_TRY(tr_device_copy(m->dev, m->dora_v, l->w + (int64_t)j0 * l->in,
                              (size_t)rows * (size_t)l->in * sizeof(float)));
        TR_TRY(m->ops->gemm(TR_NOTRANS, TR_NOTRANS, rows, l->in, r, m->spec.lora_scale,
                            l->lora_b + (int64_t)j0 * r, r, l->lora_a, l->in, 1.0f, m->dora_v,
                            l->in));
        TR_TRY(m->ops->row_sum_squares(sq + j0, m->dora_v, rows, l->in));
    }
    if (l->kind == TR_LINEAR_ROW) TR_TRY(tr_tp_all_reduce(m, sq, l->out));
    return TR_OK;
}

tr_status tr_dora_weight_scale(const tr_linear *l) {
    if (!l->dora_m || !l->dora_scale || !l->dora_inv) return TR_ERR_INTERNAL;
    /* The squared norms go where their inverse roots will be (norm_scale reads each before
     * writing it). */
    TR_TRY(tr_dora_weight_sq(l, l->dora_inv));
    return l->model->ops->norm_scale(l->dora_scale, l->dora_inv, l->dora_m, l->dora_inv, l->out);
}

tr_status tr_dora_backward(const tr_linear *l, const float *dy, float *z, int rows) {
    const tr_model *m = l->model;
    if (l->dora_dm) TR_TRY(m->ops->col_dot(l->dora_dm, dy, z, l->dora_inv, rows, l->out));
    TR_TRY(tr_device_copy(m->dev, z, dy, (size_t)rows * (size_t)l->out * sizeof(float)));
    return m->ops->col_scale(z, l->dora_scale, rows, l->out);
}
