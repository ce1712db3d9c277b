/* Expert tensor parallelism (Megatron-Core's expert TP in the alltoall dispatcher): each rank of
 * the expert-TP group holds a slice of every local expert (fc1's output columns, for SwiGLU of
 * gate and of up; fc2's input rows). The rows the local experts receive (after the EP exchange,
 * or the layer's own without EP) are all-gathered over the group with variable counts, every
 * rank runs its slices on all of them, and fc2's partial sums are reduce-scattered back, each
 * rank keeping the sum for its own rows; the backward gathers the output gradient the same way
 * and reduce-scatters the input gradient's partial sums. The variable-count collectives are
 * all-to-all-v calls: a gather sends the same rows to every peer, a reduce-scatter sends each
 * peer its block of partial sums, which the receiver adds in group-rank order. */
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/moe/internal.h"

/* Per slot the gathered rows' input, fc1 output and activation, then the scratch: the gathered
 * fc2 output (or output gradient), input gradient and the reduce-scatter's receive buffer (at
 * most etp x a rank's rows, the gathered rows' bound). Ints per slot: the counts and offsets. */
void tr_moe_etp_sizes(const tr_moe_layer *L, int64_t *floats, int64_t *ints) {
    int64_t G = L->etp_rows, h = L->d.hidden, slots = L->d.slots, nb = (int64_t)L->etp * L->El;
    *floats = G * (h + L->fc1_dim + L->s.ffn) * slots + 3 * G * h;
    *ints = (2 * nb + 1) * slots;
}

tr_status tr_moe_etp_alloc(tr_moe_layer *L) {
    int64_t G = L->etp_rows, h = L->d.hidden, slots = L->d.slots, nb = (int64_t)L->etp * L->El;
    int64_t per = G * (h + L->fc1_dim + L->s.ffn), floats, ints;
    tr_moe_etp_sizes(L, &floats, &ints);
    L->etp_buf = tr_moe_buf_alloc(L, floats * (int64_t)sizeof(float));
    L->etp_ibuf = tr_moe_buf_alloc(L, ints * (int64_t)sizeof(int32_t));
    if (!L->etp_buf || !L->etp_ibuf) return TR_ERR_NOMEM;
    for (int64_t i = 0; i < slots; i++) {
        tr_moe_state *st = &L->st[i];
        float *at = L->etp_buf + per * i;
        st->etp_cnt = L->etp_ibuf + (2 * nb + 1) * i;
        st->etp_off = st->etp_cnt + nb;
        st->etp =
            (tr_moe_rows){(int)nb, st->etp_off, at, at + G * h, at + G * (h + L->fc1_dim), NULL};
    }
    L->etp_y = L->etp_buf + per * slots;
    L->etp_dx = L->etp_y + G * h;
    L->etp_rs = L->etp_dx + G * h;
    return TR_OK;
}

/* Elements per peer: a gather's (this rank's n rows to each, peer j's rows at its block) and
 * the reverse for a reduce-scatter (peer j's block of the gathered rows to j, the peers' partial
 * sums of this rank's rows side by side). */
typedef struct vsizes {
    size_t mine[TR_MOE_MAX_EXPERTS], zero[TR_MOE_MAX_EXPERTS];
    size_t theirs[TR_MOE_MAX_EXPERTS], at[TR_MOE_MAX_EXPERTS], side[TR_MOE_MAX_EXPERTS];
} vsizes;

static void v_sizes(const tr_moe_layer *L, const tr_moe_state *st, size_t n, vsizes *z) {
    size_t h = (size_t)L->d.hidden;
    for (int j = 0; j < L->etp; j++) {
        const int32_t *off = st->etp.off;
        z->mine[j] = n * h;
        z->zero[j] = 0;
        z->theirs[j] = (size_t)(off[(j + 1) * L->El] - off[j * L->El]) * h;
        z->at[j] = (size_t)off[j * L->El] * h;
        z->side[j] = (size_t)j * n * h;
    }
}

/* rows [n, h] of this rank gathered into all [G, h] by rank. */
static tr_status gather(tr_moe_layer *L, const vsizes *z, const float *rows, float *all) {
    return tr_comm_all_to_allv(L->d.comm, TR_GROUP_EXPERT_TP, rows, z->mine, z->zero, all,
                               z->theirs, z->at, TR_COMM_F32);
}

/* The partial sums all [G, h] reduce-scattered: out [n, h] = sum over ranks in rank order of
 * their partial sums of this rank's rows. */
static tr_status scatter_sum(tr_moe_layer *L, const vsizes *z, size_t n, const float *all,
                             float *out) {
    TR_TRY(tr_comm_all_to_allv(L->d.comm, TR_GROUP_EXPERT_TP, all, z->theirs, z->at, L->etp_rs,
                               z->mine, z->side, TR_COMM_F32));
    size_t m = n * (size_t)L->d.hidden;
    memcpy(out, L->etp_rs, m * sizeof(float));
    for (int j = 1; j < L->etp; j++) {
        const float *p = L->etp_rs + (size_t)j * m;
        for (size_t i = 0; i < m; i++) out[i] += p[i];
    }
    return TR_OK;
}

tr_status tr_moe_local_fwd(tr_moe_layer *L, tr_moe_state *st, const tr_moe_rows *r) {
    if (L->etp <= 1) return tr_moe_experts_fwd(L, r);
    int32_t mine[TR_MOE_MAX_EXPERTS];
    for (int le = 0; le < L->El; le++) mine[le] = r->off[le + 1] - r->off[le];
    TR_TRY(tr_comm_all_gather(L->d.comm, TR_GROUP_EXPERT_TP, mine, st->etp_cnt, (size_t)L->El,
                              TR_COMM_I32));
    int32_t *off = st->etp_off;
    off[0] = 0;
    for (int b = 0; b < st->etp.n; b++) off[b + 1] = off[b] + st->etp_cnt[b];
    if (off[st->etp.n] > L->etp_rows) return TR_ERR_INVALID;
    size_t n = (size_t)r->off[L->El];
    vsizes *z = malloc(sizeof *z);
    if (!z) return TR_ERR_NOMEM;
    v_sizes(L, st, n, z);
    tr_moe_rows all = st->etp;
    all.ye = L->etp_y;
    tr_status s = gather(L, z, r->xp, all.xp);
    if (s == TR_OK) s = tr_moe_experts_fwd(L, &all);
    if (s == TR_OK) s = scatter_sum(L, z, n, all.ye, r->ye);
    free(z);
    return s;
}

tr_status tr_moe_local_bwd(tr_moe_layer *L, tr_moe_state *st, const tr_moe_rows *r, const float *dy,
                           float *dx) {
    if (L->etp <= 1) return tr_moe_experts_bwd(L, r, dy, dx);
    size_t n = (size_t)r->off[L->El];
    vsizes *z = malloc(sizeof *z);
    if (!z) return TR_ERR_NOMEM;
    v_sizes(L, st, n, z);
    tr_status s = gather(L, z, dy, L->etp_y);
    if (s == TR_OK) s = tr_moe_experts_bwd(L, &st->etp, L->etp_y, L->etp_dx);
    if (s == TR_OK) s = scatter_sum(L, z, n, L->etp_dx, dx);
    free(z);
    return s;
}
