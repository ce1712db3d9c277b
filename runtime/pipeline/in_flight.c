/* What a rank's action list keeps alive: the activation sets of each chunk (microbatches
 * forwarded, not yet backwarded) and the stage-transfer buffers the executor holds at once. The
 * executor sizes its model with the first; the planner (runtime/plan) reads both, counted as the
 * list is made (tr_pp_schedule_count_plan) rather than from a stored list. */
#include <string.h>

#include "runtime/pipeline/pipeline.h"

void tr_pp_counts_init(tr_pp_counts *k, const bool *has_embedding, const bool *has_loss, int vpp,
                       bool half) {
    memset(k, 0, sizeof *k);
    k->has_embedding = has_embedding;
    k->has_loss = has_loss;
    k->vpp = vpp;
    k->half = half;
    if (vpp < 1 || vpp > 64) k->st = TR_ERR_INVALID;
}

/* Slots: a forward of chunk c adds one live set of c, its backward takes it back.
 * Buffers: the executor's buffer life cycle (runtime/pipeline/executor.c), counted instead of
 * allocated: a receive takes an fp32 buffer (and, with half-precision messages, a packed one
 * until its WAIT); a forward without the loss takes its output buffer and gives back its input;
 * a backward without the embedding takes its input-gradient buffer and gives back its output
 * gradient; a send holds its fp32 buffer until the WAIT, or in half precision holds a packed
 * copy until then and gives the fp32 one back at once. Pools only grow when empty, so the
 * buffers allocated are the most held at once. */
void tr_pp_counts_add(tr_pp_counts *k, const tr_pp_action *a) {
    if (k->st != TR_OK) return;
    bool in_range = a->chunk >= 0 && a->chunk < k->vpp;
    if (in_range && a->op == TR_PP_FWD && ++k->live[a->chunk] > k->slots[a->chunk])
        k->slots[a->chunk] = k->live[a->chunk];
    if (in_range && a->op == TR_PP_BWD) k->live[a->chunk]--;
    if (!k->has_embedding) return; /* slots only */
    /* Per post group (modulo 64: at most a few are open at once): the fp32 and packed buffers
     * its WAIT gives back. */
    int g = a->group >= 0 ? a->group % 64 : 0;
    switch (a->op) {
    case TR_PP_FWD:
        if (!in_range) {
            k->st = TR_ERR_INVALID;
            return;
        }
        if (!k->has_loss[a->chunk]) k->f++;
        if (k->f > k->pf) k->pf = k->f;
        if (!k->has_embedding[a->chunk]) k->f--;
        break;
    case TR_PP_BWD:
        if (!in_range) {
            k->st = TR_ERR_INVALID;
            return;
        }
        if (!k->has_embedding[a->chunk]) k->f++;
        if (k->f > k->pf) k->pf = k->f;
        if (!k->has_loss[a->chunk]) k->f--;
        break;
    case TR_PP_RECV_ACT:
    case TR_PP_RECV_GRAD:
        k->f++;
        if (k->half) k->h++, k->back_h[g]++;
        break;
    case TR_PP_SEND_ACT:
    case TR_PP_SEND_GRAD:
        if (k->half) {
            k->h++, k->back_h[g]++;
            if (k->h > k->ph) k->ph = k->h;
            k->f--;
        } else {
            k->back_f[g]++;
        }
        break;
    case TR_PP_WAIT:
        k->f -= k->back_f[g], k->h -= k->back_h[g];
        k->back_f[g] = k->back_h[g] = 0;
        break;
    default:
        break;
    }
    if (k->f > k->pf) k->pf = k->f;
    if (k->h > k->ph) k->ph = k->h;
}

tr_status tr_pp_counts_finish(const tr_pp_counts *k, int *slots, int *max_slots, int *fp32_peak,
                              int *half_peak) {
    if (k->st != TR_OK) return k->st;
    int most = 0;
    for (int ch = 0; ch < k->vpp; ch++) {
        if (slots) slots[ch] = k->slots[ch] < 1 ? 1 : k->slots[ch];
        int s = k->slots[ch] < 1 ? 1 : k->slots[ch];
        if (s > most) most = s;
    }
    if (max_slots) *max_slots = most;
    if (fp32_peak) *fp32_peak = k->pf;
    if (half_peak) *half_peak = k->ph;
    return TR_OK;
}

tr_status tr_pp_slots_in_flight(const tr_pp_schedule *s, int vpp, int *slots, int *max_slots) {
    tr_pp_counts k;
    tr_pp_counts_init(&k, NULL, NULL, vpp, false);
    for (int i = 0; i < s->n; i++) tr_pp_counts_add(&k, &s->actions[i]);
    return tr_pp_counts_finish(&k, slots, max_slots, NULL, NULL);
}

tr_status tr_pp_transfer_buffers(const tr_pp_schedule *s, const bool *has_embedding,
                                 const bool *has_loss, int vpp, bool half, int *fp32_peak,
                                 int *half_peak) {
    tr_pp_counts k;
    tr_pp_counts_init(&k, has_embedding, has_loss, vpp, half);
    for (int i = 0; i < s->n; i++) tr_pp_counts_add(&k, &s->actions[i]);
    return tr_pp_counts_finish(&k, NULL, NULL, fp32_peak, half_peak);
}
