/* Positions and documents of packed fine-tuning sequences: the per-token RoPE tables and learned
 * positions are gathered by position id with the embedding op (a row lookup), so pretraining
 * (no position ids) keeps the contiguous tables and stays bitwise what it was. Each activation
 * slot keeps its microbatch's layout, so a backward sees its own forward's layout whatever ran in
 * between (pipeline schedules). */
#include <stdlib.h>
#include <string.h>

#include "runtime/device/device.h"
#include "runtime/model/internal.h"
#include "runtime/model/tensor_parallel.h"

static tr_status check_layout(const tr_model *m, const int32_t *doc_start, const int32_t *pos) {
    int T = m->spec.seq;
    for (int b = 0; b < m->batch; b++)
        for (int t = 0; t < T; t++) {
            int64_t i = (int64_t)b * T + t;
            if (pos && (pos[i] < 0 || pos[i] >= tr_model_pos_rows(&m->spec))) return TR_ERR_INVALID;
            /* tr_attn_desc's rule in full (a row starts a document at 0; each entry opens one
             * or continues the previous), so the attention may trust it (doc_start_trusted). */
            if (doc_start && doc_start[i] != t && (t == 0 || doc_start[i] != doc_start[i - 1]))
                return TR_ERR_INVALID;
        }
    return TR_OK;
}

tr_status tr_model_set_sequences(tr_model *m, const int32_t *doc_start, const int32_t *pos_ids) {
    TR_TRY(check_layout(m, doc_start, pos_ids));
    m->next_doc_start = doc_start;
    m->next_pos_ids = pos_ids;
    return TR_OK;
}

void tr_model_position_bytes(const tr_model *m, int64_t *local, int64_t *table) {
    const tr_model_spec *s = &m->spec;
    *local = (int64_t)tr_tp_local_rows(m) * (int64_t)sizeof *m->pos_local;
    *table =
        s->rope ? (int64_t)m->batch * s->seq * (s->rope_p.rot_dim / 2) * (int64_t)sizeof(float) : 0;
}

/* Points the model at a layout and gathers what the positions need. */
static tr_status activate(tr_model *m, const int32_t *doc_start, const int32_t *pos_ids) {
    const tr_model_spec *s = &m->spec;
    int rows = m->batch * s->seq, lrows = tr_tp_local_rows(m), chunk = lrows / m->batch;
    m->doc_start = doc_start;
    m->pos_ids = pos_ids;
    if (!pos_ids) return TR_OK;
    int half = s->rope_p.rot_dim / 2;
    int64_t local_bytes, table_bytes;
    tr_model_position_bytes(m, &local_bytes, &table_bytes);
    /* Device memory like every model buffer, made on the first packed microbatch. */
    if (!m->pos_local)
        TR_TRY(tr_device_alloc(m->dev, TR_MEM_ACTIVATIONS, (size_t)local_bytes,
                               (void **)&m->pos_local));
    if (s->rope && !m->pos_cos) {
        TR_TRY(
            tr_device_alloc(m->dev, TR_MEM_ACTIVATIONS, (size_t)table_bytes, (void **)&m->pos_cos));
        TR_TRY(
            tr_device_alloc(m->dev, TR_MEM_ACTIVATIONS, (size_t)table_bytes, (void **)&m->pos_sin));
    }
    /* With sequence parallelism this rank holds chunk `tp.rank` of every sequence. */
    int first = s->sequence_parallel ? m->tp.rank * chunk : 0;
    for (int b = 0; b < m->batch; b++)
        TR_TRY(tr_device_copy(m->dev, m->pos_local + (int64_t)b * chunk,
                              pos_ids + (int64_t)b * s->seq + first,
                              (size_t)chunk * sizeof *m->pos_local));
    if (!s->rope) return TR_OK;
    TR_TRY(m->ops->embedding_fwd(m->pos_cos, pos_ids, m->rope_cos, rows, half, 0,
                                 tr_model_pos_rows(s)));
    return m->ops->embedding_fwd(m->pos_sin, pos_ids, m->rope_sin, rows, half, 0,
                                 tr_model_pos_rows(s));
}

tr_status tr_model_rope(const tr_model *m, float *x, int heads, bool forward) {
    const tr_model_spec *s = &m->spec;
    int rot = s->rope_p.rot_dim;
    /* Per-token tables: the microbatch is one long sequence of batch * seq tokens. */
    bool per_token = m->pos_ids != NULL;
    const float *cos_t = per_token ? m->pos_cos : m->rope_cos;
    const float *sin_t = per_token ? m->pos_sin : m->rope_sin;
    int batch = per_token ? 1 : m->batch, seq = per_token ? m->batch * s->seq : s->seq;
    return forward ? m->ops->rope_fwd(x, x, cos_t, sin_t, batch, seq, heads, s->head_dim, rot)
                   : m->ops->rope_bwd(x, x, cos_t, sin_t, batch, seq, heads, s->head_dim, rot);
}

tr_status tr_model_pos_embedding(tr_model *m, float *x, bool forward) {
    const tr_ops *ops = m->ops;
    const tr_model_spec *s = &m->spec;
    int lrows = tr_tp_local_rows(m), chunk = lrows / m->batch;
    int offset = s->sequence_parallel ? m->tp.rank * chunk : 0;
    if (!m->pos_ids)
        return forward
                   ? ops->pos_embedding_fwd(x, m->p.pos_emb, m->batch, chunk, s->hidden, offset)
                   : ops->pos_embedding_bwd(m->g.pos_emb, x, m->batch, chunk, s->hidden, offset);
    if (!forward)
        return ops->embedding_bwd(m->g.pos_emb, m->pos_local, x, lrows, s->hidden, 0,
                                  tr_model_pos_rows(s));
    /* dtmp is free while the embedding runs (the layers use it after). */
    TR_TRY(ops->embedding_fwd(m->dtmp, m->pos_local, m->p.pos_emb, lrows, s->hidden, 0,
                              tr_model_pos_rows(s)));
    return ops->add(x, m->dtmp, (int64_t)lrows * s->hidden);
}

tr_status tr_model_slot_sequences(tr_model *m, int part, int slot, bool forward) {
    tr_slot_acts *a = &m->slot_acts[m->slot_start[part] + slot];
    size_t bytes = (size_t)m->batch * (size_t)m->spec.seq * sizeof(int32_t);
    if (forward) {
        a->has_doc = m->next_doc_start != NULL;
        a->has_pos = m->next_pos_ids != NULL;
        if (a->has_doc) TR_TRY(tr_device_to_device(m->dev, a->doc_start, m->next_doc_start, bytes));
        if (a->has_pos) TR_TRY(tr_device_to_device(m->dev, a->pos_ids, m->next_pos_ids, bytes));
    }
    return activate(m, a->has_doc ? a->doc_start : NULL, a->has_pos ? a->pos_ids : NULL);
}
