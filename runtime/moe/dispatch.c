/* The alltoall token dispatcher (Megatron-Core's MoEAlltoAllTokenDispatcher; expert TP between
 * the exchanges, runtime/moe/etp.c):
 * the per-expert row counts go first over the EP group (all-to-all), then the rows (all-to-all-v,
 * each rank's block being the rows of the experts it holds, contiguous because rows are sorted by
 * global expert), are sorted by local expert, run through the local experts, unsorted and sent
 * back. The backward moves the gradient rows the same two ways. */
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/moe/internal.h"

/* Per slot: the received rows' input, fc1 output, activation and fc2 output, and the counts and
 * offsets; then three [ep_rows, h] exchange buffers. */
void tr_moe_ep_sizes(const tr_moe_layer *L, int64_t *floats, int64_t *ints) {
    int64_t R = L->ep_rows, h = L->d.hidden, slots = L->d.slots;
    *floats = R * (h + L->fc1_dim + L->s.ffn + h) * slots + 3 * R * h;
    *ints = ((int64_t)L->ep * L->El + L->El + 1) * slots;
}

tr_status tr_moe_ep_alloc(tr_moe_layer *L) {
    int64_t R = L->ep_rows, h = L->d.hidden, slots = L->d.slots;
    int64_t per = R * (h + L->fc1_dim + L->s.ffn + h);
    int64_t iper = (int64_t)L->ep * L->El + L->El + 1;
    int64_t floats, ints;
    tr_moe_ep_sizes(L, &floats, &ints);
    L->ep_buf = tr_moe_buf_alloc(L, floats * (int64_t)sizeof(float));
    L->ep_ibuf = tr_moe_buf_alloc(L, ints * (int64_t)sizeof(int32_t));
    if (!L->ep_buf || !L->ep_ibuf) return TR_ERR_NOMEM;
    for (int64_t i = 0; i < slots; i++) {
        tr_moe_state *st = &L->st[i];
        float *at = L->ep_buf + per * i;
        st->cnt = L->ep_ibuf + iper * i;
        st->loc_off = st->cnt + (int64_t)L->ep * L->El;
        st->loc = (tr_moe_rows){L->El,
                                st->loc_off,
                                at,
                                at + R * h,
                                at + R * (h + L->fc1_dim),
                                at + R * (h + L->fc1_dim + L->s.ffn)};
    }
    L->a2a = L->ep_buf + per * slots;
    L->d_loc = L->a2a + R * h;
    L->dx_loc = L->d_loc + R * h;
    return TR_OK;
}

/* Elements per peer of the row exchange: sent (this rank's rows by destination) and received
 * (the rows for this rank's experts by source), with their displacements. */
typedef struct sizes {
    size_t sc[TR_MOE_MAX_EXPERTS], sd[TR_MOE_MAX_EXPERTS];
    size_t rc[TR_MOE_MAX_EXPERTS], rd[TR_MOE_MAX_EXPERTS];
} sizes;

static void exchange_sizes(const tr_moe_layer *L, const tr_moe_state *st, sizes *z) {
    size_t h = (size_t)L->d.hidden, at = 0;
    for (int j = 0; j < L->ep; j++) {
        int r0 = st->off[j * L->El], r1 = st->off[(j + 1) * L->El];
        z->sd[j] = (size_t)r0 * h;
        z->sc[j] = (size_t)(r1 - r0) * h;
        size_t n = 0;
        for (int le = 0; le < L->El; le++) n += (size_t)st->cnt[j * L->El + le];
        z->rd[j] = at;
        z->rc[j] = n * h;
        at += n * h;
    }
}

/* Rows between the exchange's order (by source rank, then local expert) and the experts' (by
 * local expert, then source rank); to_local picks the direction. */
static void sort_rows(const tr_moe_layer *L, const tr_moe_state *st, const float *from, float *to,
                      bool to_local) {
    size_t h = (size_t)L->d.hidden;
    int64_t src = 0; /* row in the exchange's order */
    int64_t fill[TR_MOE_MAX_EXPERTS];
    for (int le = 0; le < L->El; le++) fill[le] = st->loc_off[le];
    for (int i = 0; i < L->ep; i++) {
        for (int le = 0; le < L->El; le++) {
            int64_t n = st->cnt[i * L->El + le];
            const float *a = from + (to_local ? src : fill[le]) * (int64_t)h;
            float *b = to + (to_local ? fill[le] : src) * (int64_t)h;
            memcpy(b, a, (size_t)n * h * sizeof(float));
            src += n;
            fill[le] += n;
        }
    }
}

tr_status tr_moe_dispatch_fwd(tr_moe_layer *L, tr_moe_state *st) {
    int32_t send[TR_MOE_MAX_EXPERTS];
    for (int e = 0; e < L->E; e++) send[e] = st->off[e + 1] - st->off[e];
    TR_TRY(tr_comm_all_to_all(L->d.comm, TR_GROUP_EP, send, st->cnt, (size_t)L->El, TR_COMM_I32));
    st->loc_off[0] = 0;
    for (int le = 0; le < L->El; le++) {
        int n = 0;
        for (int i = 0; i < L->ep; i++) n += st->cnt[i * L->El + le];
        st->loc_off[le + 1] = st->loc_off[le] + n;
    }
    if (st->loc_off[L->El] > L->ep_rows) return TR_ERR_INVALID;
    sizes *z = malloc(sizeof *z);
    if (!z) return TR_ERR_NOMEM;
    exchange_sizes(L, st, z);
    tr_status s = tr_comm_all_to_allv(L->d.comm, TR_GROUP_EP, st->xp, z->sc, z->sd, L->a2a, z->rc,
                                      z->rd, TR_COMM_F32);
    if (s == TR_OK) {
        sort_rows(L, st, L->a2a, st->loc.xp, true);
        s = tr_moe_local_fwd(L, st, &st->loc);
    }
    if (s == TR_OK) {
        sort_rows(L, st, st->loc.ye, L->a2a, false);
        s = tr_comm_all_to_allv(L->d.comm, TR_GROUP_EP, L->a2a, z->rc, z->rd, st->ye, z->sc, z->sd,
                                TR_COMM_F32);
    }
    free(z);
    return s;
}

tr_status tr_moe_dispatch_bwd(tr_moe_layer *L, tr_moe_state *st) {
    sizes *z = malloc(sizeof *z);
    if (!z) return TR_ERR_NOMEM;
    exchange_sizes(L, st, z);
    tr_status s = tr_comm_all_to_allv(L->d.comm, TR_GROUP_EP, L->d_rows, z->sc, z->sd, L->a2a,
                                      z->rc, z->rd, TR_COMM_F32);
    if (s == TR_OK) {
        sort_rows(L, st, L->a2a, L->d_loc, true);
        s = tr_moe_local_bwd(L, st, &st->loc, L->d_loc, L->dx_loc);
    }
    if (s == TR_OK) {
        sort_rows(L, st, L->dx_loc, L->a2a, false);
        s = tr_comm_all_to_allv(L->d.comm, TR_GROUP_EP, L->a2a, z->rc, z->rd, L->d_x, z->sc, z->sd,
                                TR_COMM_F32);
    }
    free(z);
    return s;
}
