/* See runtime/model/tensor_parallel.h. */
#include "runtime/model/tensor_parallel.h"

int tr_tp_local_rows(const tr_model *m) {
    int rows = m->batch * m->spec.seq;
    return m->spec.sequence_parallel ? rows / m->tp.size : rows;
}

/* Between [tp][batch][T/tp][w] (what the collectives exchange) and [batch][T][w]: rank r's
 * block holds chunk r of every sequence, a strided copy of B rows of `chunk` floats. */
static tr_status blocks_to_full(const tr_model *m, const float *blocks, float *full, int width) {
    int64_t B = m->batch, tp = m->tp.size, chunk = (int64_t)(m->spec.seq / tp) * width;
    for (int64_t r = 0; r < tp; r++)
        TR_TRY(
            m->ops->copy_2d(full + r * chunk, tp * chunk, blocks + r * B * chunk, chunk, B, chunk));
    return TR_OK;
}

static tr_status full_to_blocks(const tr_model *m, const float *full, float *blocks, int width) {
    int64_t B = m->batch, tp = m->tp.size, chunk = (int64_t)(m->spec.seq / tp) * width;
    for (int64_t r = 0; r < tp; r++)
        TR_TRY(
            m->ops->copy_2d(blocks + r * B * chunk, chunk, full + r * chunk, tp * chunk, B, chunk));
    return TR_OK;
}

tr_status tr_tp_seq_gather(const tr_model *m, const float *local, float *full, int width) {
    if (!m->spec.sequence_parallel || !m->comm) return TR_ERR_INTERNAL;
    size_t count = (size_t)tr_tp_local_rows(m) * (size_t)width;
    /* One sequence per microbatch: the blocks already are in sequence order. */
    float *blocks = m->batch == 1 ? full : m->sp_perm;
    TR_TRY(tr_comm_all_gather(m->comm, m->tp_group, local, blocks, count, TR_COMM_F32));
    return m->batch > 1 ? blocks_to_full(m, blocks, full, width) : TR_OK;
}

tr_status tr_tp_seq_reduce_scatter(const tr_model *m, const float *full, float *local, int width) {
    if (!m->spec.sequence_parallel || !m->comm) return TR_ERR_INTERNAL;
    size_t count = (size_t)tr_tp_local_rows(m) * (size_t)width;
    const float *blocks = full;
    if (m->batch > 1) {
        TR_TRY(full_to_blocks(m, full, m->sp_perm, width));
        blocks = m->sp_perm;
    }
    return tr_comm_reduce_scatter(m->comm, m->tp_group, blocks, local, count, TR_COMM_F32,
                                  TR_COMM_SUM);
}

tr_status tr_tp_all_reduce(const tr_model *m, float *x, int64_t n) {
    if (m->tp.size == 1) return TR_OK;
    if (!m->comm) return TR_ERR_INTERNAL;
    return tr_comm_all_reduce_inplace(m->comm, m->tp_group, x, (size_t)n, TR_COMM_F32, TR_COMM_SUM);
}

tr_status tr_tp_ce_combine(const tr_model *m, float *stats, float *scratch, int rows) {
    if (m->tp.size == 1) return TR_OK;
    if (!m->comm) return TR_ERR_INTERNAL;
    TR_TRY(tr_comm_all_reduce(m->comm, m->tp_group, stats, scratch, (size_t)rows, TR_COMM_F32,
                              TR_COMM_MAX));
    TR_TRY(m->ops->ce_rebase(stats, scratch, rows));
    return tr_comm_all_reduce_inplace(m->comm, m->tp_group, stats + rows, 2 * (size_t)rows,
                                      TR_COMM_F32, TR_COMM_SUM);
}

tr_status tr_model_reduce_kv_grad(const tr_model *m, int param) {
    const tr_param_info *p = &m->info[param];
    int64_t off = 0, n = 0;
    tr_param_kv_range(p, &off, &n);
    if (n == 0 || p->frozen) return TR_OK;
    if (!m->comm || !m->kv_scratch) return TR_ERR_INTERNAL;
    int64_t slots = m->tp.size / p->kv_rep, slot = m->tp.rank / p->kv_rep;
    float *g = m->grads + p->offset + off, *mine = m->kv_scratch + slot * n;
    TR_TRY(m->ops->fill(m->kv_scratch, slots * n, 0.0f));
    TR_TRY(m->ops->copy_2d(mine, n, g, n, 1, n));
    TR_TRY(tr_comm_all_reduce_inplace(m->comm, m->tp_group, m->kv_scratch, (size_t)(slots * n),
                                      TR_COMM_F32, TR_COMM_SUM));
    return m->ops->copy_2d(g, n, mine, n, 1, n);
}
