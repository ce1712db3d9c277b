/* What a rank's action list keeps alive: the activation sets of each chunk (microbatches
 * forwarded, not yet backwarded) and the stage-transfer buffers the executor holds at once. The
 * executor sizes its model with the first; the planner (runtime/plan) reads both. */
#include "runtime/pipeline/pipeline.h"

tr_status tr_pp_slots_in_flight(const tr_pp_schedule *s, int vpp, int *slots, int *max_slots) {
    if (vpp < 1 || vpp > 64) return TR_ERR_INVALID;
    int live[64] = {0};
    for (int ch = 0; ch < vpp; ch++) slots[ch] = 0;
    for (int i = 0; i < s->n; i++) {
        const tr_pp_action *a = &s->actions[i];
        if (a->chunk < 0 || a->chunk >= vpp) continue;
        if (a->op == TR_PP_FWD && ++live[a->chunk] > slots[a->chunk])
            slots[a->chunk] = live[a->chunk];
        if (a->op == TR_PP_BWD) live[a->chunk]--;
    }
    *max_slots = 0;
    for (int ch = 0; ch < vpp; ch++) {
        if (slots[ch] < 1) slots[ch] = 1;
        if (slots[ch] > *max_slots) *max_slots = slots[ch];
    }
    return TR_OK;
}

/* The executor's buffer life cycle (runtime/pipeline/executor.c), counted instead of allocated:
 * a receive takes an fp32 buffer (and, with half-precision messages, a packed one until its
 * WAIT); a forward without the loss takes its output buffer and gives back its input; a backward
 * without the embedding takes its input-gradient buffer and gives back its output gradient; a
 * send holds its fp32 buffer until the WAIT, or in half precision holds a packed copy until
 * then and gives the fp32 one back at once. Pools only grow when empty, so the buffers allocated
 * are the most held at once. */
tr_status tr_pp_transfer_buffers(const tr_pp_schedule *s, const bool *has_embedding,
                                 const bool *has_loss, int vpp, bool half, int *fp32_peak,
                                 int *half_peak) {
    if (vpp < 1 || vpp > 64) return TR_ERR_INVALID;
    int f = 0, h = 0, pf = 0, ph = 0;
    /* Per post group (modulo 64: at most a few are open at once): the fp32 and packed buffers
     * its WAIT gives back. */
    int back_f[64] = {0}, back_h[64] = {0};
    for (int i = 0; i < s->n; i++) {
        const tr_pp_action *a = &s->actions[i];
        int g = a->group >= 0 ? a->group % 64 : 0;
        switch (a->op) {
        case TR_PP_FWD:
            if (a->chunk < 0 || a->chunk >= vpp) return TR_ERR_INVALID;
            if (!has_loss[a->chunk]) f++;
            if (f > pf) pf = f;
            if (!has_embedding[a->chunk]) f--;
            break;
        case TR_PP_BWD:
            if (a->chunk < 0 || a->chunk >= vpp) return TR_ERR_INVALID;
            if (!has_embedding[a->chunk]) f++;
            if (f > pf) pf = f;
            if (!has_loss[a->chunk]) f--;
            break;
        case TR_PP_RECV_ACT:
        case TR_PP_RECV_GRAD:
            f++;
            if (half) h++, back_h[g]++;
            break;
        case TR_PP_SEND_ACT:
        case TR_PP_SEND_GRAD:
            if (half) {
                h++, back_h[g]++;
                if (h > ph) ph = h;
                f--;
            } else {
                back_f[g]++;
            }
            break;
        case TR_PP_WAIT:
            f -= back_f[g], h -= back_h[g];
            back_f[g] = back_h[g] = 0;
            break;
        default:
            break;
        }
        if (f > pf) pf = f;
        if (h > ph) ph = h;
    }
    *fp32_peak = pf;
    *half_peak = ph;
    return TR_OK;
}
