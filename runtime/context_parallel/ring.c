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
#include <stdlib.h>

#include "runtime/comm/comm.h"
#include "runtime/context_parallel/internal.h"
#include "runtime/device/device.h"

enum { TAG_K = 1, TAG_V, TAG_DK, TAG_DV };

int64_t tr_cp_ring_bytes_fwd(const tr_cp *cp) {
    return (int64_t)(cp->size - 1) * 2 * tr_cp_kv_numel(cp) * (int64_t)sizeof(float);
}

int64_t tr_cp_ring_bytes_bwd(const tr_cp *cp) {
    return (int64_t)(2 * cp->size - 1) * 2 * tr_cp_kv_numel(cp) * (int64_t)sizeof(float);
}

static int next_rank(const tr_cp *cp) {
    return (cp->rank + 1) % cp->size;
}
static int prev_rank(const tr_cp *cp) {
    return (cp->rank + cp->size - 1) % cp->size;
}

static tr_status start_kv(tr_cp *cp, const float *k, const float *v, int into,
                          tr_comm_request *req[4]) {
    size_t n = (size_t)tr_cp_kv_numel(cp);
    TR_TRY(tr_comm_irecv(cp->comm, cp->group, cp->kv[into][0], n, TR_COMM_F32, prev_rank(cp), TAG_K,
                         &req[0]));
    TR_TRY(tr_comm_irecv(cp->comm, cp->group, cp->kv[into][1], n, TR_COMM_F32, prev_rank(cp), TAG_V,
                         &req[1]));
    TR_TRY(tr_comm_isend(cp->comm, cp->group, k, n, TR_COMM_F32, next_rank(cp), TAG_K, &req[2]));
    return tr_comm_isend(cp->comm, cp->group, v, n, TR_COMM_F32, next_rank(cp), TAG_V, &req[3]);
}

tr_status tr_cp_attn_fwd(tr_cp *cp, float *out, float *lse, const float *q, const float *k,
                         const float *v, const tr_attn_desc *d) {
    if (cp->type == TR_CP_ALL_GATHER) return tr_cp_ag_fwd(cp, out, lse, q, k, v, d);
    if (cp->type == TR_CP_A2A) return tr_cp_a2a_fwd(cp, out, lse, q, k, v, d);
    TR_TRY(tr_cp_check_desc(cp, d));
    TR_TRY(tr_cp_find_segments(cp, d));
    int N = cp->size;
    tr_comm_request *req[4] = {0};
    tr_status st = TR_OK;
    for (int i = 0; i < N && st == TR_OK; i++) {
        const float *ck = i == 0 ? k : cp->kv[i & 1][0], *cv = i == 0 ? v : cp->kv[i & 1][1];
        if (i + 1 < N) st = start_kv(cp, ck, cv, (i + 1) & 1, req);
        if (st == TR_OK)
            st = i == 0 && tr_cp_step0_whole(d) ? cp->ops->attention_fwd(out, lse, q, k, v, d)
                                                : tr_cp_fwd_blocks(cp, i, out, lse, q, ck, cv, d);
        tr_status w = tr_comm_wait_all(cp->comm, req, 4);
        if (st == TR_OK) st = w;
    }
    return st;
}

tr_status tr_cp_attn_bwd(tr_cp *cp, float *dq, float *dk, float *dv, const float *dout,
                         const float *q, const float *k, const float *v, const float *out,
                         const float *lse, const tr_attn_desc *d) {
    if (cp->type == TR_CP_ALL_GATHER)
        return tr_cp_ag_bwd(cp, dq, dk, dv, dout, q, k, v, out, lse, d);
    if (cp->type == TR_CP_A2A) return tr_cp_a2a_bwd(cp, dq, dk, dv, dout, q, k, v, out, lse, d);
    TR_TRY(tr_cp_check_desc(cp, d));
    TR_TRY(tr_cp_find_segments(cp, d));
    const tr_ops *ops = cp->ops;
    int N = cp->size;
    int64_t n = tr_cp_kv_numel(cp);
    /* kreq: the KV block for the next step; rreq / sreq: the dK/dV arriving for the next step
     * and the one sent on. */
    tr_comm_request *kreq[4] = {0}, *rreq[2] = {0}, *sreq[2] = {0};
    tr_status st = TR_OK;
    for (int i = 0; i < N && st == TR_OK; i++) {
        int cur = i & 1, nxt = cur ^ 1;
        const float *ck = i == 0 ? k : cp->kv[cur][0], *cv = i == 0 ? v : cp->kv[cur][1];
        if (i + 1 < N) st = start_kv(cp, ck, cv, nxt, kreq);
        /* Step 0 writes the first dK/dV of the own block into dkv[0], later steps into dstep. */
        if (st == TR_OK && i == 0 && tr_cp_step0_whole(d))
            st = ops->attention_bwd(dq, cp->dkv[0][0], cp->dkv[0][1], dout, q, k, v, out, lse, d);
        else if (st == TR_OK && i == 0)
            st = tr_cp_bwd_blocks(cp, 0, dq, cp->dkv[0][0], cp->dkv[0][1], dout, q, k, v, out, lse,
                                  d);
        if (st == TR_OK && i > 0)
            st = tr_cp_bwd_blocks(cp, i, dq, cp->dstep[0], cp->dstep[1], dout, q, ck, cv, out, lse,
                                  d);
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
