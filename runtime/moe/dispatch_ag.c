/* The allgather token dispatcher (Megatron-Core's MoEAllGatherTokenDispatcher at expert TP 1):
 * every rank of the EP group (TR_GROUP_TP_EP, which is the EP group when expert TP is 1; under
 * TP with SP its ranks route their own sequence chunks) all-gathers the group's hidden states,
 * routing probabilities and routing choices, keeps the rows routed to its local experts (drops
 * already made by each rank's router on its own tokens), runs them grouped by local expert,
 * scatters the probability-weighted outputs back into the gathered token order and
 * reduce-scatters them, so each rank receives its own tokens' sums. The backward all-gathers the
 * output gradient, runs the local experts' backward and reduce-scatters the input gradient and
 * the probabilities' gradient (each assignment's computed by the rank holding its expert, zero
 * elsewhere) back to the tokens' owners. */
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/moe/internal.h"

/* Per slot: loc's rows (input, fc1 output, activation, fc2 output) and the gathered
 * probabilities; then the scratch: gathered tokens, the outputs to reduce-scatter, two
 * [ep_rows, h] gradient blocks and the probabilities' gradients. Ints per slot loc's offsets and
 * the rows' assignments, then the gathered and own choices. */
void tr_moe_ag_sizes(const tr_moe_layer *L, int64_t *floats, int64_t *ints) {
    int64_t R = L->ep_rows, h = L->d.hidden, slots = L->d.slots;
    int64_t GT = (int64_t)L->ep * L->T, k = L->k;
    *floats =
        (R * (h + L->fc1_dim + L->s.ffn + h) + GT * k) * slots + 2 * GT * h + 2 * R * h + GT * k;
    *ints = (L->El + 1 + R) * slots + GT * k + (int64_t)L->T * k;
}

tr_status tr_moe_ag_alloc(tr_moe_layer *L) {
    int64_t R = L->ep_rows, h = L->d.hidden, slots = L->d.slots;
    int64_t GT = (int64_t)L->ep * L->T, k = L->k;
    int64_t per = R * (h + L->fc1_dim + L->s.ffn + h) + GT * k, iper = L->El + 1 + R;
    int64_t floats, ints;
    tr_moe_ag_sizes(L, &floats, &ints);
    L->ep_buf = tr_moe_buf_alloc(L, floats * (int64_t)sizeof(float));
    L->ep_ibuf = tr_moe_buf_alloc(L, ints * (int64_t)sizeof(int32_t));
    if (!L->ep_buf || !L->ep_ibuf) return TR_ERR_NOMEM;
    for (int64_t i = 0; i < slots; i++) {
        tr_moe_state *st = &L->st[i];
        float *at = L->ep_buf + per * i;
        st->loc_off = L->ep_ibuf + iper * i;
        st->ag_a = st->loc_off + L->El + 1;
        st->loc = (tr_moe_rows){L->El,
                                st->loc_off,
                                at,
                                at + R * h,
                                at + R * (h + L->fc1_dim),
                                at + R * (h + L->fc1_dim + L->s.ffn)};
        st->ag_prob = at + R * (h + L->fc1_dim + L->s.ffn + h);
    }
    L->ag_x = L->ep_buf + per * slots;
    L->ag_out = L->ag_x + GT * h;
    L->d_loc = L->ag_out + GT * h;
    L->dx_loc = L->d_loc + R * h;
    L->ag_dprob = L->dx_loc + R * h;
    L->ag_sel = L->ep_ibuf + iper * slots;
    return TR_OK;
}

/* The gathered blocks are in group-rank order: rank i's tokens are block i, so this rank's
 * place in TR_GROUP_TP_EP must be its EP rank (expert TP 1). */
static tr_status check_group(const tr_moe_layer *L) {
    if (tr_comm_group_size(L->d.comm, TR_GROUP_TP_EP) != L->ep ||
        tr_comm_group_rank(L->d.comm, TR_GROUP_TP_EP) != L->ep_rank)
        return TR_ERR_INVALID;
    return TR_OK;
}

tr_status tr_moe_ag_fwd(tr_moe_layer *L, tr_moe_state *st, float *y) {
    TR_TRY(check_group(L));
    tr_comm *c = L->d.comm;
    int T = L->T, k = L->k, El = L->El, e0 = L->ep_rank * L->El;
    int64_t h = L->d.hidden, GTk = (int64_t)L->ep * T * k;
    int32_t *sel = L->ag_sel + GTk; /* this rank's choices, -1 where the router dropped */
    for (int a = 0; a < T * k; a++) sel[a] = st->pos[a] >= 0 ? st->idx[a] : -1;
    TR_TRY(tr_comm_all_gather(c, TR_GROUP_TP_EP, st->x, L->ag_x, (size_t)T * h, TR_COMM_F32));
    TR_TRY(
        tr_comm_all_gather(c, TR_GROUP_TP_EP, st->prob, st->ag_prob, (size_t)T * k, TR_COMM_F32));
    TR_TRY(tr_comm_all_gather(c, TR_GROUP_TP_EP, sel, L->ag_sel, (size_t)T * k, TR_COMM_I32));
    /* the local rows: by local expert, then in the gathered token order (Megatron's permute of
     * the local routing map) */
    int32_t *off = st->loc_off;
    memset(off, 0, (size_t)(El + 1) * sizeof *off);
    for (int64_t a = 0; a < GTk; a++) {
        int le = L->ag_sel[a] - e0;
        if (le >= 0 && le < El) off[le + 1]++;
    }
    for (int le = 0; le < El; le++) off[le + 1] += off[le];
    if (off[El] > L->ep_rows) return TR_ERR_INVALID;
    int32_t fill[TR_MOE_MAX_EXPERTS];
    memcpy(fill, off, (size_t)El * sizeof *fill);
    for (int64_t a = 0; a < GTk; a++) {
        int le = L->ag_sel[a] - e0;
        if (le < 0 || le >= El) continue;
        int r = fill[le]++;
        st->ag_a[r] = (int32_t)a;
        memcpy(st->loc.xp + r * h, L->ag_x + a / k * h, (size_t)h * sizeof(float));
    }
    TR_TRY(tr_moe_experts_fwd(L, &st->loc));
    /* unpermute with the probabilities, into the gathered order, then each rank's block summed
     * over the group onto it */
    memset(L->ag_out, 0, (size_t)(GTk / k * h) * sizeof(float));
    for (int r = 0; r < off[El]; r++) {
        int a = st->ag_a[r];
        float p = st->ag_prob[a], *o = L->ag_out + a / k * h;
        const float *ye = st->loc.ye + r * h;
        for (int64_t i = 0; i < h; i++) o[i] += p * ye[i];
    }
    return tr_comm_reduce_scatter(c, TR_GROUP_TP_EP, L->ag_out, y, (size_t)T * h, TR_COMM_F32,
                                  TR_COMM_SUM);
}

tr_status tr_moe_ag_bwd(tr_moe_layer *L, tr_moe_state *st, const float *dy, float *dx) {
    TR_TRY(check_group(L));
    tr_comm *c = L->d.comm;
    int T = L->T, k = L->k, n = st->loc_off[L->El];
    int64_t h = L->d.hidden, GTk = (int64_t)L->ep * T * k;
    TR_TRY(tr_comm_all_gather(c, TR_GROUP_TP_EP, dy, L->ag_x, (size_t)T * h, TR_COMM_F32));
    /* the combine's backward: d expert output = prob dy, d prob = <dy, expert output> */
    memset(L->ag_dprob, 0, (size_t)GTk * sizeof(float));
    for (int r = 0; r < n; r++) {
        int a = st->ag_a[r];
        const float *g = L->ag_x + a / k * h, *ye = st->loc.ye + r * h;
        float p = st->ag_prob[a], *d = L->d_loc + r * h;
        double dot = 0.0;
        for (int64_t i = 0; i < h; i++) {
            d[i] = p * g[i];
            dot += (double)g[i] * ye[i];
        }
        L->ag_dprob[a] = (float)dot;
    }
    TR_TRY(tr_moe_experts_bwd(L, &st->loc, L->d_loc, L->dx_loc));
    memset(L->ag_out, 0, (size_t)(GTk / k * h) * sizeof(float));
    for (int r = 0; r < n; r++) {
        float *o = L->ag_out + st->ag_a[r] / k * h;
        const float *g = L->dx_loc + r * h;
        for (int64_t i = 0; i < h; i++) o[i] += g[i];
    }
    TR_TRY(tr_comm_reduce_scatter(c, TR_GROUP_TP_EP, L->ag_out, dx, (size_t)T * h, TR_COMM_F32,
                                  TR_COMM_SUM));
    return tr_comm_reduce_scatter(c, TR_GROUP_TP_EP, L->ag_dprob, L->d_prob, (size_t)T * k,
                                  TR_COMM_F32, TR_COMM_SUM);
}
