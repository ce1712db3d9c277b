/* cp_comm_type a2a (Ulysses; runtime/context_parallel/cp.h): an all-to-all over the CP group
 * gives each rank the whole sequence for heads [rank h, (rank+1) h) (h = H / CP; the query
 * groups alike), in global order: rank i sent its rows, chunks i and 2CP-1-i, which land at
 * their places in the sequence. Each rank then runs the causal attention op on the whole
 * sequence of its heads (document masks rebuilt for the whole row, dropout at the global heads
 * and tokens), and the inverse exchange returns the outputs to the rows' owners. The lse stays
 * in the whole-sequence layout of this rank's heads (as many floats as the local one) for the
 * backward, which exchanges q, k, v, out and dout again, runs the op's backward and returns dq,
 * dk, dv. */
#include <stdbool.h>

#include "runtime/comm/comm.h"
#include "runtime/context_parallel/internal.h"
#include "runtime/device/device.h"

/* Rank i's local rows `rows` [B, 2c, w] to (into_whole) or from their places in the whole
 * sequence [B, S, w]: each document's piece i and 2N-1-i (a local document at row s0 of 2p rows
 * is the whole row's at N s0 of 2Np). */
static tr_status place(tr_cp *cp, float *rows, const float *whole_in, float *whole_out, int64_t w,
                       int i) {
    bool into_whole = whole_out != NULL;
    int N = cp->size, T = cp->seq;
    int64_t S = (int64_t)T * N;
    for (int b = 0; b < cp->batch; b++)
        for (int sg = 0; sg < cp->n_seg[b]; sg++) {
            int64_t at = (int64_t)b * T + sg, s0 = cp->seg_start[at], p = cp->seg_len[at] / 2;
            for (int h = 0; h < 2; h++) {
                int piece = h ? 2 * N - 1 - i : i;
                float *loc = rows + ((int64_t)b * T + s0 + h * p) * w;
                int64_t g = ((int64_t)b * S + N * s0 + piece * p) * w;
                TR_TRY(into_whole ? cp->ops->copy_2d(whole_out + g, p * w, loc, p * w, 1, p * w)
                                  : cp->ops->copy_2d(loc, p * w, whole_in + g, p * w, 1, p * w));
            }
        }
    return TR_OK;
}

/* Local rows [B, 2c, heads, D] -> this rank's heads of the whole sequence [B, S, heads/N, D]. */
static tr_status to_whole(tr_cp *cp, const float *x, int heads, float *whole) {
    const tr_ops *ops = cp->ops;
    int N = cp->size, B = cp->batch, T = cp->seq, D = cp->head_dim;
    int64_t w = (int64_t)(heads / N) * D, blk = (int64_t)B * T * w;
    for (int j = 0; j < N; j++) /* block j: heads of rank j, every local row */
        TR_TRY(ops->copy_2d(cp->a2a_send + j * blk, w, x + j * w, (int64_t)heads * D,
                            (int64_t)B * T, w));
    TR_TRY(tr_comm_all_to_all(cp->comm, cp->group, cp->a2a_send, cp->a2a_recv, (size_t)blk,
                              TR_COMM_F32));
    /* rank i's rows: its two pieces of every document */
    for (int i = 0; i < N; i++) TR_TRY(place(cp, cp->a2a_recv + i * blk, NULL, whole, w, i));
    return TR_OK;
}

/* The inverse: this rank's heads of the whole sequence back to the rows' owners. */
static tr_status from_whole(tr_cp *cp, const float *whole, int heads, float *x) {
    const tr_ops *ops = cp->ops;
    int N = cp->size, B = cp->batch, T = cp->seq, D = cp->head_dim;
    int64_t w = (int64_t)(heads / N) * D, blk = (int64_t)B * T * w;
    for (int i = 0; i < N; i++) TR_TRY(place(cp, cp->a2a_send + i * blk, whole, NULL, w, i));
    TR_TRY(tr_comm_all_to_all(cp->comm, cp->group, cp->a2a_send, cp->a2a_recv, (size_t)blk,
                              TR_COMM_F32));
    for (int j = 0; j < N; j++)
        TR_TRY(ops->copy_2d(x + j * w, (int64_t)heads * D, cp->a2a_recv + j * blk, w,
                            (int64_t)B * T, w));
    return TR_OK;
}

/* The whole-sequence descriptor of this rank's heads: document starts rebuilt from the local
 * documents (a local document at row s0 of 2p rows is the whole row's at N s0 of 2Np). */
static tr_status whole_desc(tr_cp *cp, const tr_attn_desc *d, tr_attn_desc *wd) {
    int N = cp->size, T = cp->seq;
    int64_t S = (int64_t)T * N;
    *wd = *d;
    wd->seq = (int)S;
    wd->heads = cp->heads / N, wd->groups = cp->groups / N;
    if (d->dropout != 0.0f) {
        wd->head_offset = d->head_offset + cp->rank * wd->heads;
        wd->heads_total = d->heads_total ? d->heads_total : cp->heads;
    }
    if (!d->doc_start) return TR_OK;
    for (int b = 0; b < cp->batch; b++)
        for (int sg = 0; sg < cp->n_seg[b]; sg++) {
            int64_t at = (int64_t)b * T + sg, s0 = (int64_t)N * cp->seg_start[at];
            for (int64_t t = 0; t < (int64_t)N * cp->seg_len[at]; t++)
                cp->ag_ds_host[(int64_t)b * S + s0 + t] = (int32_t)s0;
        }
    TR_TRY(tr_device_to_device(cp->dev, cp->ag_ds, cp->ag_ds_host,
                               (size_t)cp->batch * (size_t)S * sizeof(int32_t)));
    wd->doc_start = cp->ag_ds;
    wd->doc_start_trusted = 1;
    return TR_OK;
}

tr_status tr_cp_a2a_fwd(tr_cp *cp, float *out, float *lse, const float *q, const float *k,
                        const float *v, const tr_attn_desc *d) {
    TR_TRY(tr_cp_check_desc(cp, d));
    TR_TRY(tr_cp_find_segments(cp, d));
    tr_attn_desc wd;
    TR_TRY(whole_desc(cp, d, &wd));
    TR_TRY(to_whole(cp, q, cp->heads, cp->ag_q));
    TR_TRY(to_whole(cp, k, cp->groups, cp->ag_k));
    TR_TRY(to_whole(cp, v, cp->groups, cp->ag_v));
    TR_TRY(cp->ops->attention_fwd(cp->ag_o, lse, cp->ag_q, cp->ag_k, cp->ag_v, &wd));
    return from_whole(cp, cp->ag_o, cp->heads, out);
}

tr_status tr_cp_a2a_bwd(tr_cp *cp, float *dq, float *dk, float *dv, const float *dout,
                        const float *q, const float *k, const float *v, const float *out,
                        const float *lse, const tr_attn_desc *d) {
    TR_TRY(tr_cp_check_desc(cp, d));
    TR_TRY(tr_cp_find_segments(cp, d));
    tr_attn_desc wd;
    TR_TRY(whole_desc(cp, d, &wd));
    TR_TRY(to_whole(cp, q, cp->heads, cp->ag_q));
    TR_TRY(to_whole(cp, k, cp->groups, cp->ag_k));
    TR_TRY(to_whole(cp, v, cp->groups, cp->ag_v));
    TR_TRY(to_whole(cp, out, cp->heads, cp->ag_o));
    TR_TRY(to_whole(cp, dout, cp->heads, cp->ag_do));
    TR_TRY(cp->ops->attention_bwd(cp->ag_dq, cp->ag_dk, cp->ag_dv, cp->ag_do, cp->ag_q, cp->ag_k,
                                  cp->ag_v, cp->ag_o, lse, &wd));
    TR_TRY(from_whole(cp, cp->ag_dq, cp->heads, dq));
    TR_TRY(from_whole(cp, cp->ag_dk, cp->groups, dk));
    return from_whole(cp, cp->ag_dv, cp->groups, dv);
}
