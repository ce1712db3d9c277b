/* See runtime/tensor_parallel.h. */
#include "runtime/tensor_parallel.h"

#include <string.h>

int tr_tp_local_rows(const tr_model *m) {
    int rows = m->batch * m->spec.seq;
    return m->spec.sequence_parallel ? rows / m->tp.size : rows;
}

/* Between [tp][batch][T/tp][w] (what the collectives exchange) and [batch][T][w]. */
static void blocks_to_full(const tr_model *m, const float *blocks, float *full, int width) {
    int B = m->batch, tp = m->tp.size;
    size_t chunk = (size_t)(m->spec.seq / tp) * (size_t)width;
    for (int r = 0; r < tp; r++)
        for (int b = 0; b < B; b++)
            memcpy(full + ((size_t)b * tp + r) * chunk, blocks + ((size_t)r * B + b) * chunk,
                   chunk * sizeof(float));
}

static void full_to_blocks(const tr_model *m, const float *full, float *blocks, int width) {
    int B = m->batch, tp = m->tp.size;
    size_t chunk = (size_t)(m->spec.seq / tp) * (size_t)width;
    for (int r = 0; r < tp; r++)
        for (int b = 0; b < B; b++)
            memcpy(blocks + ((size_t)r * B + b) * chunk, full + ((size_t)b * tp + r) * chunk,
                   chunk * sizeof(float));
}

tr_status tr_tp_seq_gather(const tr_model *m, const float *local, float *full, int width) {
    if (!m->spec.sequence_parallel || !m->comm) return TR_ERR_INTERNAL;
    size_t count = (size_t)tr_tp_local_rows(m) * (size_t)width;
    /* One sequence per microbatch: the blocks already are in sequence order. */
    float *blocks = m->batch == 1 ? full : m->sp_perm;
    TR_TRY(tr_comm_all_gather(m->comm, m->tp_group, local, blocks, count, TR_COMM_F32));
    if (m->batch > 1) blocks_to_full(m, blocks, full, width);
    return TR_OK;
}

tr_status tr_tp_seq_reduce_scatter(const tr_model *m, const float *full, float *local, int width) {
    if (!m->spec.sequence_parallel || !m->comm) return TR_ERR_INTERNAL;
    size_t count = (size_t)tr_tp_local_rows(m) * (size_t)width;
    const float *blocks = full;
    if (m->batch > 1) {
        full_to_blocks(m, full, m->sp_perm, width);
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
