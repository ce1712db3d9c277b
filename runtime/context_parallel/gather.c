/* cp_comm_type allgather (runtime/context_parallel/cp.h): every rank gathers the K and V of the
 * whole sequence in one all-gather over the CP group and computes the ring's blocks against
 * each owner's in the ring's order (so its output is the p2p ring's, bit for bit); backward
 * gathers them again, computes each owner's dK/dV share into its slot and reduce-scatters the
 * slots, which leaves every rank the sum of its own. Nothing overlaps the exchange: the variant
 * for layouts where a ring of CP hops costs more than one collective. */
#include "runtime/comm/comm.h"
#include "runtime/context_parallel/internal.h"
#include "runtime/device/device.h"

static tr_status gather_kv(tr_cp *cp, const float *k, const float *v) {
    size_t n = (size_t)tr_cp_kv_numel(cp);
    TR_TRY(tr_comm_all_gather(cp->comm, cp->group, k, cp->ag_k, n, TR_COMM_F32));
    return tr_comm_all_gather(cp->comm, cp->group, v, cp->ag_v, n, TR_COMM_F32);
}

/* The owner of step i's KV block, as the ring meets them. */
static int owner_of(const tr_cp *cp, int i) {
    return (cp->rank - i + cp->size) % cp->size;
}

tr_status tr_cp_ag_fwd(tr_cp *cp, float *out, float *lse, const float *q, const float *k,
                       const float *v, const tr_attn_desc *d) {
    TR_TRY(tr_cp_check_desc(cp, d));
    TR_TRY(tr_cp_find_segments(cp, d));
    TR_TRY(gather_kv(cp, k, v));
    int64_t n = tr_cp_kv_numel(cp);
    for (int i = 0; i < cp->size; i++) {
        if (i == 0 && tr_cp_step0_whole(d)) {
            TR_TRY(cp->ops->attention_fwd(out, lse, q, k, v, d));
            continue;
        }
        int64_t at = (int64_t)owner_of(cp, i) * n;
        TR_TRY(tr_cp_fwd_blocks(cp, i, out, lse, q, cp->ag_k + at, cp->ag_v + at, d));
    }
    return TR_OK;
}

tr_status tr_cp_ag_bwd(tr_cp *cp, float *dq, float *dk, float *dv, const float *dout,
                       const float *q, const float *k, const float *v, const float *out,
                       const float *lse, const tr_attn_desc *d) {
    TR_TRY(tr_cp_check_desc(cp, d));
    TR_TRY(tr_cp_find_segments(cp, d));
    TR_TRY(gather_kv(cp, k, v));
    int64_t n = tr_cp_kv_numel(cp);
    for (int i = 0; i < cp->size; i++) {
        int64_t at = (int64_t)owner_of(cp, i) * n;
        if (i == 0 && tr_cp_step0_whole(d))
            TR_TRY(cp->ops->attention_bwd(dq, cp->ag_dk + at, cp->ag_dv + at, dout, q, k, v, out,
                                          lse, d));
        else
            TR_TRY(tr_cp_bwd_blocks(cp, i, dq, cp->ag_dk + at, cp->ag_dv + at, dout, q,
                                    cp->ag_k + at, cp->ag_v + at, out, lse, d));
    }
    TR_TRY(tr_comm_reduce_scatter(cp->comm, cp->group, cp->ag_dk, dk, (size_t)n, TR_COMM_F32,
                                  TR_COMM_SUM));
    return tr_comm_reduce_scatter(cp->comm, cp->group, cp->ag_dv, dv, (size_t)n, TR_COMM_F32,
                                  TR_COMM_SUM);
}
