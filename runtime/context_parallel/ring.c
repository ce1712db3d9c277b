/* Ring attention (cp_comm_type p2p; runtime/context_parallel/cp.h). Rank r holds chunks r and
 * 2N-1-r (N = CP). Step 0 is the local pair with the causal mask (the pair is in global order);
 * at step i >= 1 the KV block of rank j = r - i (mod N) is here: for j < r every local query
 * sees chunk j and none sees chunk 2N-1-j, for j > r only the second local chunk sees anything
 * and it sees both, so every later step is two unmasked c x c blocks on every rank. Each block's
 * output and lse are merged into the running ones (tr_ops.attention_merge). The next KV block is
 * received while the current one is used. Backward recomputes the same blocks from the merged
 * output and lse (flash attention's backward needs nothing else), and the dK/dV of each block
 * travel with it, so after the last hop every rank has the gradient of its own K and V. */
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

/* The descriptor of one c x c block of one sequence: no mask, nothing of the local ones. */
static tr_attn_desc block_desc(const tr_cp *cp, const tr_attn_desc *d) {
    return (tr_attn_desc){.batch = 1,
                          .seq = cp->seq / 2,
                          .heads = cp->heads,
                          .groups = cp->groups,
                          .head_dim = cp->head_dim,
                          .scale = d->scale,
                          .causal = 0,
                          .lowp = d->lowp};
}

static tr_status check_desc(const tr_cp *cp, const tr_attn_desc *d) {
    if (!d || d->batch != cp->batch || d->seq != cp->seq || d->heads != cp->heads ||
        d->groups != cp->groups || d->head_dim != cp->head_dim || !d->causal)
        return TR_ERR_INVALID;
    /* Refused by the dry run (runtime.cp_*); never silently ignored. */
    if (d->doc_start || d->dropout != 0.0f) return TR_ERR_INVALID;
    return TR_OK;
}

/* The blocks (query half, key half) step `i` computes: *n of them. */
static int step_blocks(const tr_cp *cp, int i, int qh[2], int kh[2]) {
    int j = (cp->rank - i + cp->size) % cp->size;
    if (j < cp->rank) {
        qh[0] = 0, kh[0] = 0, qh[1] = 1, kh[1] = 0;
    } else {
        qh[0] = 1, kh[0] = 0, qh[1] = 1, kh[1] = 1;
    }
    return 2;
}

/* Offsets of half h of sequence b in a [B, 2c, width] tensor. */
static int64_t half_off(const tr_cp *cp, int b, int h, int64_t width) {
    return ((int64_t)b * cp->seq + (int64_t)h * (cp->seq / 2)) * width;
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

tr_status tr_cp_attn_fwd(tr_cp *cp, float *out, float *lse, const float *q, const float *k,
                         const float *v, const tr_attn_desc *d) {
    TR_TRY(check_desc(cp, d));
    const tr_ops *ops = cp->ops;
    int N = cp->size, T = cp->seq, c = T / 2, H = cp->heads, G = cp->groups, D = cp->head_dim;
    tr_attn_desc bd = block_desc(cp, d);
    tr_comm_request *req[4] = {0};
    tr_status st = TR_OK;
    for (int i = 0; i < N && st == TR_OK; i++) {
        const float *ck = i == 0 ? k : cp->kv[i & 1][0], *cv = i == 0 ? v : cp->kv[i & 1][1];
        if (i + 1 < N) st = start_kv(cp, ck, cv, (i + 1) & 1, req);
        if (st == TR_OK && i == 0) st = ops->attention_fwd(out, lse, q, k, v, d);
        int qh[2], kh[2], n = i == 0 ? 0 : step_blocks(cp, i, qh, kh);
        for (int b = 0; b < cp->batch && st == TR_OK; b++)
            for (int e = 0; e < n && st == TR_OK; e++) {
                st = ops->attention_fwd(cp->o_blk, cp->lse_blk, q + half_off(cp, b, qh[e], H * D),
                                        ck + half_off(cp, b, kh[e], G * D),
                                        cv + half_off(cp, b, kh[e], G * D), &bd);
                if (st == TR_OK)
                    st = ops->attention_merge(out + half_off(cp, b, qh[e], H * D),
                                              lse + (int64_t)b * H * T + (int64_t)qh[e] * c, T,
                                              cp->o_blk, cp->lse_blk, c, H, D);
            }
        tr_status w = tr_comm_wait_all(cp->comm, req, 4);
        if (st == TR_OK) st = w;
    }
    return st;
}

/* One later step's blocks: dq accumulates, the step's dK/dV go into dstep (zeroed first). */
static tr_status bwd_blocks(tr_cp *cp, int i, float *dq, const float *dout, const float *q,
                            const float *ck, const float *cv, const float *out, const float *lse,
                            const tr_attn_desc *d) {
    const tr_ops *ops = cp->ops;
    int T = cp->seq, c = T / 2, H = cp->heads, G = cp->groups, D = cp->head_dim;
    tr_attn_desc bd = block_desc(cp, d);
    size_t kv = (size_t)kv_numel(cp) * sizeof(float);
    TR_TRY(tr_device_memset0(cp->dev, cp->dstep[0], kv));
    TR_TRY(tr_device_memset0(cp->dev, cp->dstep[1], kv));
    int qh[2], kh[2], n = step_blocks(cp, i, qh, kh);
    for (int b = 0; b < cp->batch; b++)
        for (int e = 0; e < n; e++) {
            int64_t qo = half_off(cp, b, qh[e], H * D), ko = half_off(cp, b, kh[e], G * D);
            TR_TRY(ops->copy_2d(cp->lse_blk, c, lse + (int64_t)b * H * T + (int64_t)qh[e] * c, T, H,
                                c));
            TR_TRY(ops->attention_bwd(cp->dq_blk, cp->dk_blk, cp->dv_blk, dout + qo, q + qo,
                                      ck + ko, cv + ko, out + qo, cp->lse_blk, &bd));
            TR_TRY(ops->add(dq + qo, cp->dq_blk, (int64_t)c * H * D));
            TR_TRY(ops->add(cp->dstep[0] + ko, cp->dk_blk, (int64_t)c * G * D));
            TR_TRY(ops->add(cp->dstep[1] + ko, cp->dv_blk, (int64_t)c * G * D));
        }
    return TR_OK;
}

tr_status tr_cp_attn_bwd(tr_cp *cp, float *dq, float *dk, float *dv, const float *dout,
                         const float *q, const float *k, const float *v, const float *out,
                         const float *lse, const tr_attn_desc *d) {
    TR_TRY(check_desc(cp, d));
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
        if (st == TR_OK && i == 0)
            st = ops->attention_bwd(dq, cp->dkv[0][0], cp->dkv[0][1], dout, q, k, v, out, lse, d);
        if (st == TR_OK && i > 0) st = bwd_blocks(cp, i, dq, dout, q, ck, cv, out, lse, d);
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
