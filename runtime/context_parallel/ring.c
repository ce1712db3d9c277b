/* Ring attention (cp_comm_type p2p; runtime/context_parallel/cp.h). Rank r holds chunks r and
 * 2N-1-r (N = CP). Step 0 is the local pair with the causal mask (the pair is in global order);
 * at step i >= 1 the KV block of rank j = r - i (mod N) is here: for j < r every local query
 * sees chunk j and none sees chunk 2N-1-j, for j > r only the second local chunk sees anything
 * and it sees both, so every later step is two unmasked c x c blocks on every rank. Each block's
 * output and lse are merged into the running ones (tr_ops.attention_merge). The next KV block is
 * received while the current one is used. Backward recomputes the same blocks from the merged
 * output and lse (flash attention's backward needs nothing else), and the dK/dV of each block
 * travel with it, so after the last hop every rank has the gradient of its own K and V.
 *
 * Packed sequences: the same per document (each local document is its two pieces). Attention
 * dropout: every block draws the whole sequence's mask at its tokens' coordinates, so step 0 is
 * split into its three blocks too. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/context_parallel/cp.h"
#include "runtime/device/device.h"

enum { TAG_K = 1, TAG_V, TAG_DK, TAG_DV };

static int64_t kv_numel(const tr_cp *cp) {
    return (int64_t)cp->batch * cp->seq * cp->groups * cp->head_dim;
}

tr_status tr_cp_create(tr_cp *cp, struct tr_device *dev, struct tr_comm *comm, int group, int batch,
                       int seq_local, int heads, int groups, int head_dim) {
    memset(cp, 0, sizeof *cp);
    if (!dev || !comm || batch < 1 || seq_local < 2 || seq_local % 2 || heads < 1 || groups < 1 ||
        heads % groups || head_dim < 1)
        return TR_ERR_INVALID;
    cp->size = tr_comm_group_size(comm, group);
    cp->rank = tr_comm_group_rank(comm, group);
    if (cp->size < 2 || cp->rank < 0) return TR_ERR_INVALID;
    cp->comm = comm, cp->group = group, cp->dev = dev, cp->ops = tr_device_ops(dev);
    cp->batch = batch, cp->seq = seq_local, cp->heads = heads, cp->groups = groups;
    cp->head_dim = head_dim;
    size_t kv = (size_t)kv_numel(cp) * sizeof(float);
    int64_t c = seq_local / 2;
    size_t qblk = (size_t)(c * heads * head_dim) * sizeof(float);
    size_t kblk = (size_t)(c * groups * head_dim) * sizeof(float);
    struct {
        float **p;
        size_t bytes;
    } want[] = {{&cp->kv[0][0], kv},
                {&cp->kv[0][1], kv},
                {&cp->kv[1][0], kv},
                {&cp->kv[1][1], kv},
                {&cp->dkv[0][0], kv},
                {&cp->dkv[0][1], kv},
                {&cp->dkv[1][0], kv},
                {&cp->dkv[1][1], kv},
                {&cp->dstep[0], kv},
                {&cp->dstep[1], kv},
                {&cp->o_blk, qblk},
                {&cp->dq_blk, qblk},
                {&cp->dk_blk, kblk},
                {&cp->dv_blk, kblk},
                {&cp->lse_blk, (size_t)(c * heads) * sizeof(float)}};
    size_t rows = (size_t)batch * (size_t)seq_local;
    cp->ds_host = malloc(rows * sizeof *cp->ds_host);
    cp->seg_start = malloc(rows * sizeof *cp->seg_start);
    cp->seg_len = malloc(rows * sizeof *cp->seg_len);
    cp->n_seg = malloc((size_t)batch * sizeof *cp->n_seg);
    if (!cp->ds_host || !cp->seg_start || !cp->seg_len || !cp->n_seg) {
        tr_cp_free(cp);
        return TR_ERR_NOMEM;
    }
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        tr_status st = tr_device_alloc(dev, TR_MEM_ACTIVATIONS, want[i].bytes, (void **)want[i].p);
        if (st != TR_OK) {
            tr_cp_free(cp);
            return st;
        }
    }
    return TR_OK;
}

void tr_cp_free(tr_cp *cp) {
    free(cp->ds_host), free(cp->seg_start), free(cp->seg_len), free(cp->n_seg);
    cp->ds_host = cp->seg_start = cp->seg_len = NULL;
    cp->n_seg = NULL;
    if (!cp->dev) return;
    float **all[] = {&cp->kv[0][0],  &cp->kv[0][1],  &cp->kv[1][0],  &cp->kv[1][1], &cp->dkv[0][0],
                     &cp->dkv[0][1], &cp->dkv[1][0], &cp->dkv[1][1], &cp->dstep[0], &cp->dstep[1],
                     &cp->o_blk,     &cp->dq_blk,    &cp->dk_blk,    &cp->dv_blk,   &cp->lse_blk};
    /* Newest first: the CUDA arena releases its most recent allocation at once. */
    for (int i = (int)(sizeof all / sizeof all[0]) - 1; i >= 0; i--) {
        tr_device_free(cp->dev, TR_MEM_ACTIVATIONS, *all[i]);
        *all[i] = NULL;
    }
    cp->dev = NULL;
}

int64_t tr_cp_ring_bytes_fwd(const tr_cp *cp) {
    return (int64_t)(cp->size - 1) * 2 * kv_numel(cp) * (int64_t)sizeof(float);
}

int64_t tr_cp_ring_bytes_bwd(const tr_cp *cp) {
    return (int64_t)(2 * cp->size - 1) * 2 * kv_numel(cp) * (int64_t)sizeof(float);
}

static int next_rank(const tr_cp *cp) {
    return (cp->rank + 1) % cp->size;
}
static int prev_rank(const tr_cp *cp) {
    return (cp->rank + cp->size - 1) % cp->size;
}

static tr_status check_desc(const tr_cp *cp, const tr_attn_desc *d) {
    if (!d || d->batch != cp->batch || d->seq != cp->seq || d->heads != cp->heads ||
        d->groups != cp->groups || d->head_dim != cp->head_dim || !d->causal)
        return TR_ERR_INVALID;
    return TR_OK;
}

/* The documents of each local row: one per row without a document mask; else read from the
 * mask (a copy to the host: on a device one synchronisation per call), each the two pieces of
 * one document, so of even length. */
static tr_status find_segments(tr_cp *cp, const tr_attn_desc *d) {
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

/* One block: piece qh of document `seg` of row b against piece kh of the same document held
 * by rank `owner` (the KV block's). */
typedef struct block {
    int b, p;       /* the row; rows of each piece */
    int64_t qr, kr; /* first rows of the pieces in [B, 2c, .] */
    int64_t lse;    /* the query piece's first lse entry in [B, H, 2c] */
    int64_t gq, gk; /* the pieces' first tokens in the whole sequence */
    bool causal;    /* a piece against itself */
} block;

/* A document at local row s0 starts at token N s0 of the whole sequence (each earlier document
 * left 1/N of its tokens here); its piece i starts i p tokens further. */
static int64_t piece_token(const tr_cp *cp, int64_t s0, int p, int owner, int h) {
    int piece = h ? 2 * cp->size - 1 - owner : owner;
    return (int64_t)cp->size * s0 + (int64_t)piece * p;
}

static block block_at(const tr_cp *cp, int b, int seg, int qh, int kh, int owner) {
    int64_t at = (int64_t)b * cp->seq + seg, s0 = cp->seg_start[at];
    int64_t row = (int64_t)b * cp->seq + s0;
    int p = cp->seg_len[at] / 2;
    return (block){.b = b,
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
static tr_attn_desc block_desc(const tr_cp *cp, const tr_attn_desc *d, const block *k) {
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
static int step_blocks(const tr_cp *cp, int i, int qh[3], int kh[3], int *owner) {
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
static bool step0_whole(const tr_attn_desc *d) {
    return d->dropout == 0.0f;
}

static tr_status start_kv(tr_cp *cp, const float *k, const float *v, int into,
                          tr_comm_request *req[4]) {
    size_t n = (size_t)kv_numel(cp);
    TR_TRY(tr_comm_irecv(cp->comm, cp->group, cp->kv[into][0], n, TR_COMM_F32, prev_rank(cp), TAG_K,
                         &req[0]));
    TR_TRY(tr_comm_irecv(cp->comm, cp->group, cp->kv[into][1], n, TR_COMM_F32, prev_rank(cp), TAG_V,
                         &req[1]));
    TR_TRY(tr_comm_isend(cp->comm, cp->group, k, n, TR_COMM_F32, next_rank(cp), TAG_K, &req[2]));
    return tr_comm_isend(cp->comm, cp->group, v, n, TR_COMM_F32, next_rank(cp), TAG_V, &req[3]);
}

/* A step of the forward in blocks, each block's output merged into out and lse (at step 0 lse
 * starts at -inf, so the first block of a row is taken as it is). */
static tr_status fwd_blocks(tr_cp *cp, int i, float *out, float *lse, const float *q,
                            const float *ck, const float *cv, const tr_attn_desc *d) {
    const tr_ops *ops = cp->ops;
    int T = cp->seq, H = cp->heads, G = cp->groups, D = cp->head_dim, owner;
    if (i == 0) TR_TRY(ops->fill_2d(lse, T, (int64_t)cp->batch * H, T, -INFINITY));
    int qh[3], kh[3], n = step_blocks(cp, i, qh, kh, &owner);
    for (int b = 0; b < cp->batch; b++)
        for (int sg = 0; sg < cp->n_seg[b]; sg++)
            for (int e = 0; e < n; e++) {
                block k = block_at(cp, b, sg, qh[e], kh[e], owner);
                tr_attn_desc bd = block_desc(cp, d, &k);
                TR_TRY(ops->attention_fwd(cp->o_blk, cp->lse_blk, q + k.qr * H * D,
                                          ck + k.kr * G * D, cv + k.kr * G * D, &bd));
                TR_TRY(ops->attention_merge(out + k.qr * H * D, lse + k.lse, T, cp->o_blk,
                                            cp->lse_blk, k.p, H, D));
            }
    return TR_OK;
}

tr_status tr_cp_attn_fwd(tr_cp *cp, float *out, float *lse, const float *q, const float *k,
                         const float *v, const tr_attn_desc *d) {
    TR_TRY(check_desc(cp, d));
    TR_TRY(find_segments(cp, d));
    int N = cp->size;
    tr_comm_request *req[4] = {0};
    tr_status st = TR_OK;
    for (int i = 0; i < N && st == TR_OK; i++) {
        const float *ck = i == 0 ? k : cp->kv[i & 1][0], *cv = i == 0 ? v : cp->kv[i & 1][1];
        if (i + 1 < N) st = start_kv(cp, ck, cv, (i + 1) & 1, req);
        if (st == TR_OK)
            st = i == 0 && step0_whole(d) ? cp->ops->attention_fwd(out, lse, q, k, v, d)
                                          : fwd_blocks(cp, i, out, lse, q, ck, cv, d);
        tr_status w = tr_comm_wait_all(cp->comm, req, 4);
        if (st == TR_OK) st = w;
    }
    return st;
}

/* A step's blocks: dq accumulates (zeroed first at step 0), the step's dK/dV go into dkv_k and
 * dkv_v (zeroed first). */
static tr_status bwd_blocks(tr_cp *cp, int i, float *dq, float *dkv_k, float *dkv_v,
                            const float *dout, const float *q, const float *ck, const float *cv,
                            const float *out, const float *lse, const tr_attn_desc *d) {
    const tr_ops *ops = cp->ops;
    int T = cp->seq, H = cp->heads, G = cp->groups, D = cp->head_dim, owner;
    size_t kv = (size_t)kv_numel(cp) * sizeof(float);
    TR_TRY(tr_device_memset0(cp->dev, dkv_k, kv));
    TR_TRY(tr_device_memset0(cp->dev, dkv_v, kv));
    if (i == 0)
        TR_TRY(tr_device_memset0(cp->dev, dq,
                                 (size_t)cp->batch * (size_t)T * (size_t)(H * D) * sizeof(float)));
    int qh[3], kh[3], n = step_blocks(cp, i, qh, kh, &owner);
    for (int b = 0; b < cp->batch; b++)
        for (int sg = 0; sg < cp->n_seg[b]; sg++)
            for (int e = 0; e < n; e++) {
                block k = block_at(cp, b, sg, qh[e], kh[e], owner);
                tr_attn_desc bd = block_desc(cp, d, &k);
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

tr_status tr_cp_attn_bwd(tr_cp *cp, float *dq, float *dk, float *dv, const float *dout,
                         const float *q, const float *k, const float *v, const float *out,
                         const float *lse, const tr_attn_desc *d) {
    TR_TRY(check_desc(cp, d));
    TR_TRY(find_segments(cp, d));
    const tr_ops *ops = cp->ops;
    int N = cp->size;
    int64_t n = kv_numel(cp);
    /* kreq: the KV block for the next step; rreq / sreq: the dK/dV arriving for the next step
     * and the one sent on. */
    tr_comm_request *kreq[4] = {0}, *rreq[2] = {0}, *sreq[2] = {0};
    tr_status st = TR_OK;
    for (int i = 0; i < N && st == TR_OK; i++) {
        int cur = i & 1, nxt = cur ^ 1;
        const float *ck = i == 0 ? k : cp->kv[cur][0], *cv = i == 0 ? v : cp->kv[cur][1];
        if (i + 1 < N) st = start_kv(cp, ck, cv, nxt, kreq);
        /* Step 0 writes the first dK/dV of the own block into dkv[0], later steps into dstep. */
        if (st == TR_OK && i == 0 && step0_whole(d))
            st = ops->attention_bwd(dq, cp->dkv[0][0], cp->dkv[0][1], dout, q, k, v, out, lse, d);
        else if (st == TR_OK && i == 0)
            st = bwd_blocks(cp, 0, dq, cp->dkv[0][0], cp->dkv[0][1], dout, q, k, v, out, lse, d);
        if (st == TR_OK && i > 0)
            st = bwd_blocks(cp, i, dq, cp->dstep[0], cp->dstep[1], dout, q, ck, cv, out, lse, d);
        /* What came from the previous rank for this block, plus this rank's share. */
        if (st == TR_OK && i > 0) st = tr_comm_wait_all(cp->comm, rreq, 2);
        if (st == TR_OK && i > 0) st = ops->add(cp->dkv[cur][0], cp->dstep[0], n);
        if (st == TR_OK && i > 0) st = ops->add(cp->dkv[cur][1], cp->dstep[1], n);
        /* dkv[nxt] was sent on at the last step; it receives the next block's once that is
         * done. After the last step the owner's gradient lands in dk, dv. */
        if (st == TR_OK) st = tr_comm_wait_all(cp->comm, sreq, 2);
        float *rk = i + 1 < N ? cp->dkv[nxt][0] : dk, *rv = i + 1 < N ? cp->dkv[nxt][1] : dv;
        if (st == TR_OK)
            st = tr_comm_irecv(cp->comm, cp->group, rk, (size_t)n, TR_COMM_F32, prev_rank(cp),
                               TAG_DK, &rreq[0]);
        if (st == TR_OK)
            st = tr_comm_irecv(cp->comm, cp->group, rv, (size_t)n, TR_COMM_F32, prev_rank(cp),
                               TAG_DV, &rreq[1]);
        if (st == TR_OK)
            st = tr_comm_isend(cp->comm, cp->group, cp->dkv[cur][0], (size_t)n, TR_COMM_F32,
                               next_rank(cp), TAG_DK, &sreq[0]);
        if (st == TR_OK)
            st = tr_comm_isend(cp->comm, cp->group, cp->dkv[cur][1], (size_t)n, TR_COMM_F32,
                               next_rank(cp), TAG_DV, &sreq[1]);
        tr_status w = tr_comm_wait_all(cp->comm, kreq, 4);
        if (st == TR_OK) st = w;
    }
    tr_status w = tr_comm_wait_all(cp->comm, rreq, 2);
    if (st == TR_OK) st = w;
    w = tr_comm_wait_all(cp->comm, sreq, 2);
    return st == TR_OK ? w : st;
}
