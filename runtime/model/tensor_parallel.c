/* See runtime/model/tensor_parallel.h. */
#include "runtime/model/tensor_parallel.h"

#include <stdlib.h>

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

tr_status tr_tp_seq_rows(const tr_model *m, const float *full, float *local, int width) {
    if (!m->spec.sequence_parallel) return TR_ERR_INTERNAL;
    int64_t tp = m->tp.size, chunk = (int64_t)(m->spec.seq / tp) * width;
    return m->ops->copy_2d(local, chunk, full + m->tp.rank * chunk, tp * chunk, m->batch, chunk);
}

/* A reduce-scatter's send buffer: full itself for one sequence per microbatch, else its rows
 * regrouped by destination rank in m->sp_perm; count: the elements each rank receives. */
static tr_status scatter_blocks(const tr_model *m, const float *full, int width,
                                const float **blocks, size_t *count) {
    if (!m->spec.sequence_parallel || !m->comm) return TR_ERR_INTERNAL;
    *count = (size_t)tr_tp_local_rows(m) * (size_t)width;
    *blocks = full;
    if (m->batch == 1) return TR_OK;
    *blocks = m->sp_perm;
    return full_to_blocks(m, full, m->sp_perm, width);
}

tr_status tr_tp_seq_reduce_scatter(const tr_model *m, const float *full, float *local, int width) {
    const float *blocks;
    size_t count;
    TR_TRY(scatter_blocks(m, full, width, &blocks, &count));
    return tr_comm_reduce_scatter(m->comm, m->tp_group, blocks, local, count, TR_COMM_F32,
                                  TR_COMM_SUM);
}

tr_status tr_tp_seq_ireduce_scatter(const tr_model *m, const float *full, float *local, int width,
                                    tr_comm_request **req) {
    const float *blocks;
    size_t count;
    TR_TRY(scatter_blocks(m, full, width, &blocks, &count));
    return tr_comm_ireduce_scatter(m->comm, m->tp_group, blocks, local, count, TR_COMM_F32,
                                   TR_COMM_SUM, req);
}

int tr_tp_overlap_parts(const tr_model *m) {
    int chunk = m->spec.seq / m->tp.size, k = m->tp.size;
    while (k > 1 && chunk % k) k--;
    return k;
}

/* The pieces' shape: sub rows a part, n pieces, chunk rows a rank holds of each sequence.
 * piece_full_row: the first whole-sequence row of piece p's part in rank 0's chunk (rank r's is
 * chunk * r further); piece_local_row: its first row among this rank's local rows. */
typedef struct pieces {
    int sub, n, chunk;
} pieces;

static pieces pieces_of(const tr_model *m) {
    int k = tr_tp_overlap_parts(m), chunk = m->spec.seq / m->tp.size;
    return (pieces){chunk / k, m->batch * k, chunk};
}

static int64_t piece_full_row(const tr_model *m, const pieces *q, int p) {
    int k = q->chunk / q->sub;
    return (int64_t)(p / k) * m->spec.seq + (int64_t)(p % k) * q->sub;
}

static int64_t piece_local_row(const pieces *q, int p) {
    return (int64_t)p * q->sub; /* parts of consecutive sequences follow each other */
}

/* Waits for every request still pending (after an error: the buffers must not be reused while
 * the transfers run), keeping the first error. */
static tr_status finish(const tr_model *m, tr_comm_request **req, int n, tr_status st) {
    for (int p = 0; p < n; p++) {
        tr_status w = req[p] ? tr_comm_wait(m->comm, &req[p]) : TR_OK;
        if (st == TR_OK) st = w;
    }
    free(req);
    return st;
}

tr_status tr_tp_seq_gather_overlap(const tr_model *m, const float *local, float *full, int width,
                                   tr_tp_rows_fn fn, void *ctx) {
    if (!m->spec.sequence_parallel || !m->comm || full == m->sp_perm) return TR_ERR_INTERNAL;
    pieces q = pieces_of(m);
    int64_t tp = m->tp.size, blk = (int64_t)q.sub * width, ldf = (int64_t)q.chunk * width;
    tr_comm_request **req = calloc((size_t)q.n, sizeof *req);
    if (!req) return TR_ERR_NOMEM;
    tr_status st = TR_OK;
    for (int p = 0; p < q.n && st == TR_OK; p++)
        st = tr_comm_iall_gather(m->comm, m->tp_group, local + piece_local_row(&q, p) * width,
                                 m->sp_perm + p * tp * blk, (size_t)blk, TR_COMM_F32, &req[p]);
    for (int p = 0; p < q.n && st == TR_OK; p++) {
        st = tr_comm_wait(m->comm, &req[p]);
        int64_t row = piece_full_row(m, &q, p);
        if (st == TR_OK)
            st = m->ops->copy_2d(full + row * width, ldf, m->sp_perm + p * tp * blk, blk, tp, blk);
        for (int64_t r = 0; r < tp && st == TR_OK; r++)
            st = fn(ctx, row + r * q.chunk, q.sub, NULL);
    }
    return finish(m, req, q.n, st);
}

tr_status tr_tp_seq_reduce_scatter_overlap(const tr_model *m, float *local, int width,
                                           tr_tp_rows_fn fn, void *ctx) {
    if (!m->spec.sequence_parallel || !m->comm) return TR_ERR_INTERNAL;
    pieces q = pieces_of(m);
    int64_t tp = m->tp.size, blk = (int64_t)q.sub * width;
    tr_comm_request **req = calloc((size_t)q.n, sizeof *req);
    if (!req) return TR_ERR_NOMEM;
    tr_status st = TR_OK;
    for (int p = 0; p < q.n && st == TR_OK; p++) {
        float *pack = m->sp_full + p * tp * blk;
        int64_t row = piece_full_row(m, &q, p);
        for (int64_t r = 0; r < tp && st == TR_OK; r++)
            st = fn(ctx, row + r * q.chunk, q.sub, pack + r * blk);
        if (st == TR_OK)
            st = tr_comm_ireduce_scatter(m->comm, m->tp_group, pack,
                                         local + piece_local_row(&q, p) * width, (size_t)blk,
                                         TR_COMM_F32, TR_COMM_SUM, &req[p]);
    }
    return finish(m, req, q.n, st);
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
