/* The blocks of the context-parallel attention (runtime/context_parallel/internal.h): which
 * piece of which document meets which, their descriptors and mask coordinates, and one step's
 * forward (merged by log-sum-exp) and backward over every document. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "runtime/context_parallel/internal.h"
#include "runtime/device/device.h"

tr_status tr_cp_check_desc(const tr_cp *cp, const tr_attn_desc *d) {
    if (!d || d->batch != cp->batch || d->seq != cp->seq || d->heads != cp->heads ||
        d->groups != cp->groups || d->head_dim != cp->head_dim || !d->causal)
        return TR_ERR_INVALID;
    return TR_OK;
}

/* The documents of each local row: one per row without a document mask; else read from the
 * mask (a copy to the host: on a device one synchronisation per call), each the two pieces of
 * one document, so of even length. */
tr_status tr_cp_find_segments(tr_cp *cp, const tr_attn_desc *d) {
    int T = cp->seq;
    if (d->doc_start)
        TR_TRY(tr_device_to_host(cp->dev, cp->ds_host, d->doc_start,
                                 (size_t)cp->batch * (size_t)T * sizeof *cp->ds_host));
    for (int b = 0; b < cp->batch; b++) {
        int n = 0;
        int32_t *st = cp->seg_start + (int64_t)b * T, *len = cp->seg_len + (int64_t)b * T;
        const int32_t *ds = cp->ds_host + (int64_t)b * T;
        for (int t = 0; t < T;) {
            int e = t + 1;
            while (d->doc_start && e < T && ds[e] == ds[t]) e++;
            if (!d->doc_start) e = T;
            if ((e - t) % 2) return TR_ERR_INVALID;
            st[n] = t, len[n] = e - t, n++;
            t = e;
        }
        cp->n_seg[b] = n;
    }
    return TR_OK;
}

/* A document at local row s0 starts at token N s0 of the whole sequence (each earlier document
 * left 1/N of its tokens here); its piece i starts i p tokens further. */
static int64_t piece_token(const tr_cp *cp, int64_t s0, int p, int owner, int h) {
    int piece = h ? 2 * cp->size - 1 - owner : owner;
    return (int64_t)cp->size * s0 + (int64_t)piece * p;
}

tr_cp_block tr_cp_block_at(const tr_cp *cp, int b, int seg, int qh, int kh, int owner) {
    int64_t at = (int64_t)b * cp->seq + seg, s0 = cp->seg_start[at];
    int64_t row = (int64_t)b * cp->seq + s0;
    int p = cp->seg_len[at] / 2;
    return (tr_cp_block){.b = b,
                         .p = p,
                         .qr = row + (int64_t)qh * p,
                         .kr = row + (int64_t)kh * p,
                         .lse = (int64_t)b * cp->heads * cp->seq + s0 + (int64_t)qh * p,
                         .gq = piece_token(cp, s0, p, cp->rank, qh),
                         .gk = piece_token(cp, s0, p, owner, kh),
                         .causal = owner == cp->rank && qh == kh};
}

/* One block's descriptor: causal only for a piece against itself, no document mask, and the
 * whole sequence's coordinates for the dropout mask. */
tr_attn_desc tr_cp_block_desc(const tr_cp *cp, const tr_attn_desc *d, const tr_cp_block *k) {
    tr_attn_desc bd = {.batch = 1,
                       .seq = k->p,
                       .heads = cp->heads,
                       .groups = cp->groups,
                       .head_dim = cp->head_dim,
                       .scale = d->scale,
                       .causal = k->causal,
                       .lowp = d->lowp};
    if (d->dropout != 0.0f) {
        bd.dropout = d->dropout;
        bd.dropout_seed = d->dropout_seed, bd.dropout_round = d->dropout_round;
        bd.dropout_layer = d->dropout_layer;
        bd.head_offset = d->head_offset, bd.heads_total = d->heads_total;
        bd.dropout_row0 = d->dropout_row0 + k->b;
        bd.dropout_q0 = d->dropout_q0 + (int)k->gq;
        bd.dropout_k0 = d->dropout_k0 + (int)k->gk;
    }
    return bd;
}

/* The blocks (query piece, key piece) of every document at step `i`; *owner the rank whose KV
 * block it holds. Step 0 is the causal local pair: each piece against itself and the second
 * against the first. */
int tr_cp_step_blocks(const tr_cp *cp, int i, int qh[3], int kh[3], int *owner) {
    int j = (cp->rank - i + cp->size) % cp->size;
    *owner = j;
    if (i == 0) {
        qh[0] = 0, kh[0] = 0, qh[1] = 1, kh[1] = 0, qh[2] = 1, kh[2] = 1;
        return 3;
    }
    if (j < cp->rank) {
        qh[0] = 0, kh[0] = 0, qh[1] = 1, kh[1] = 0;
    } else {
        qh[0] = 1, kh[0] = 0, qh[1] = 1, kh[1] = 1;
    }
    return 2;
}

/* Step 0 as one call on the local rows (the pairs are in global order, so the causal and the
 * document masks hold), except with dropout, whose mask coordinates are per block. */
bool tr_cp_step0_whole(const tr_attn_desc *d) {
    return d->dropout == 0.0f;
}

/* A step of the forward in blocks, each block's output merged into out and lse (at step 0 lse
 * starts at -inf, so the first block of a row is taken as it is). */
tr_status tr_cp_fwd_blocks(tr_cp *cp, int i, float *out, float *lse, const float *q,
                           const float *ck, const float *cv, const tr_attn_desc *d) {
    const tr_ops *ops = cp->ops;
    int T = cp->seq, H = cp->heads, G = cp->groups, D = cp->head_dim, owner;
    if (i == 0) TR_TRY(ops->fill_2d(lse, T, (int64_t)cp->batch * H, T, -INFINITY));
    int qh[3], kh[3], n = tr_cp_step_blocks(cp, i, qh, kh, &owner);
    for (int b = 0; b < cp->batch; b++)
        for (int sg = 0; sg < cp->n_seg[b]; sg++)
            for (int e = 0; e < n; e++) {
                tr_cp_block k = tr_cp_block_at(cp, b, sg, qh[e], kh[e], owner);
                tr_attn_desc bd = tr_cp_block_desc(cp, d, &k);
                TR_TRY(ops->attention_fwd(cp->o_blk, cp->lse_blk, q + k.qr * H * D,
                                          ck + k.kr * G * D, cv + k.kr * G * D, &bd));
                TR_TRY(ops->attention_merge(out + k.qr * H * D, lse + k.lse, T, cp->o_blk,
                                            cp->lse_blk, k.p, H, D));
            }
    return TR_OK;
}

/* A step's blocks: dq accumulates (zeroed first at step 0), the step's dK/dV go into dkv_k and
 * dkv_v (zeroed first). */
tr_status tr_cp_bwd_blocks(tr_cp *cp, int i, float *dq, float *dkv_k, float *dkv_v,
                           const float *dout, const float *q, const float *ck, const float *cv,
                           const float *out, const float *lse, const tr_attn_desc *d) {
    const tr_ops *ops = cp->ops;
    int T = cp->seq, H = cp->heads, G = cp->groups, D = cp->head_dim, owner;
    size_t kv = (size_t)tr_cp_kv_numel(cp) * sizeof(float);
    TR_TRY(tr_device_memset0(cp->dev, dkv_k, kv));
    TR_TRY(tr_device_memset0(cp->dev, dkv_v, kv));
    if (i == 0)
        TR_TRY(tr_device_memset0(cp->dev, dq,
                                 (size_t)cp->batch * (size_t)T * (size_t)(H * D) * sizeof(float)));
    int qh[3], kh[3], n = tr_cp_step_blocks(cp, i, qh, kh, &owner);
    for (int b = 0; b < cp->batch; b++)
        for (int sg = 0; sg < cp->n_seg[b]; sg++)
            for (int e = 0; e < n; e++) {
                tr_cp_block k = tr_cp_block_at(cp, b, sg, qh[e], kh[e], owner);
                tr_attn_desc bd = tr_cp_block_desc(cp, d, &k);
                int64_t qo = k.qr * H * D, ko = k.kr * G * D;
                TR_TRY(ops->copy_2d(cp->lse_blk, k.p, lse + k.lse, T, H, k.p));
                TR_TRY(ops->attention_bwd(cp->dq_blk, cp->dk_blk, cp->dv_blk, dout + qo, q + qo,
                                          ck + ko, cv + ko, out + qo, cp->lse_blk, &bd));
                TR_TRY(ops->add(dq + qo, cp->dq_blk, (int64_t)k.p * H * D));
                TR_TRY(ops->add(dkv_k + ko, cp->dk_blk, (int64_t)k.p * G * D));
                TR_TRY(ops->add(dkv_v + ko, cp->dv_blk, (int64_t)k.p * G * D));
            }
    return TR_OK;
}
