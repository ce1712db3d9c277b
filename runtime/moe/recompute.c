/* Activation recomputation of an MoE layer (Megatron's `moe`, `moe_act` and `shared_experts`
 * recompute modules; full recomputation reruns the whole layer like `moe`). The rerun calls the
 * forward's own code on the same inputs, parameters (the expert bias and the router change only
 * at the step's end) and jitter / adapter-dropout keys, so routing, capacity drops and every
 * tensor come out bit for bit those of the forward. */
#include "runtime/moe/internal.h"

tr_status tr_moe_recompute(tr_moe_layer *L, int slot, const float *x, float *y, uint64_t seed,
                           uint64_t round) {
    if (slot < 0 || slot >= L->d.slots) return TR_ERR_INVALID;
    unsigned rc = L->d.rc;
    if (rc & TR_MOE_RC_ALL) {
        if (!x) return TR_ERR_INVALID;
        L->replay = true;
        tr_status s = tr_moe_forward(L, slot, x, y ? y : L->d_out, true, seed, round);
        L->replay = false;
        return s;
    }
    tr_moe_state *st = &L->st[slot];
    /* the slot's adapter-dropout round, as its forward drew it */
    tr_moe_lora_begin(L, slot, false, false, 0, 0);
    if (rc & TR_MOE_RC_SHARED) TR_TRY(tr_moe_shared_fwd(L, st, L->d_out));
    if (rc & TR_MOE_RC_ACT) {
        tr_moe_rows rows = {L->E, st->off, st->xp, st->fc1, st->act, st->ye};
        TR_TRY(tr_moe_experts_act(L, L->etp > 1 ? &st->etp : L->ep > 1 ? &st->loc : &rows));
    }
    return TR_OK;
}
