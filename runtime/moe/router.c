/* Megatron's TopKRouter on one rank: scores, (group-limited) top-k, probabilities, the capacity
 * drop, the balancing losses and their gradients (moe_utils.py's semantics, our own code). */
#include <math.h>
#include <string.h>

#include "kernels/common/moe_route.h"
#include "kernels/common/philox.h"
#include "runtime/comm/comm.h"
#include "runtime/moe/internal.h"

/* The score of logit x and its derivative; softmax; top-k with ties to the lower index: the
 * router op's own per-token helpers (kernels/common/moe_route.h), so the aux loss ranks and scores
 * as the routing does. */
static float score_of(int fn, float x, float *deriv) {
    return tr_route_score(fn == TR_MOE_SIGMOID ? TR_ROUTE_SIGMOID : TR_ROUTE_SQRTSOFTPLUS, x,
                          deriv);
}

static void softmax(const float *l, int n, float *p, double *lse) {
    tr_route_softmax(l, n, p, lse);
}

static void top_k(const float *v, int n, int k, int32_t *out) {
    tr_route_top_k(v, NULL, n, k, out);
}

/* The op's description of this layer's routing over its T tokens. */
static tr_route_desc route_desc(const tr_moe_layer *L) {
    const tr_moe_spec *s = &L->s;
    int fn = s->score == TR_MOE_SOFTMAX   ? TR_ROUTE_SOFTMAX
             : s->score == TR_MOE_SIGMOID ? TR_ROUTE_SIGMOID
                                          : TR_ROUTE_SQRTSOFTPLUS;
    bool grouped = s->groups > 0 && s->group_topk > 0;
    return (tr_route_desc){
        .tokens = L->T,
        .experts = L->E,
        .topk = L->k,
        .score = fn,
        .pre_softmax = s->pre_softmax ? 1 : 0,
        .groups = grouped ? s->groups : 0,
        .group_topk = grouped ? s->group_topk : 0,
        .topk_scale = s->topk_scale,
        /* the bias selects among sigmoid-type scores only (Megatron's semantics) */
        .bias = fn != TR_ROUTE_SOFTMAX && s->expert_bias ? L->p.bias : NULL,
    };
}

/* Per expert, which of its assignments stay under the capacity: the most probable ones
 * (ties: the earlier token) or the earliest; rows are laid out by expert, in token order. */
static void dispatch(tr_moe_layer *L, tr_moe_state *st) {
    int T = L->T, E = L->E, k = L->k, cap = L->capacity;
    int32_t *cnt = st->off; /* counts first, offsets after */
    for (int a = 0; a < T * k; a++) st->pos[a] = 0;
    if (cap > 0) {
        for (int e = 0; e < E; e++) {
            int n = 0;
            for (int a = 0; a < T * k; a++) n += st->idx[a] == e;
            if (n <= cap) continue;
            /* drop n - cap of them, the least probable (latest first on ties) or the latest */
            for (int drop = 0; drop < n - cap; drop++) {
                int worst = -1;
                for (int a = 0; a < T * k; a++) {
                    if (st->idx[a] != e || st->pos[a] < 0) continue;
                    if (worst < 0 || L->s.drop_position || st->prob[a] <= st->prob[worst])
                        worst = a;
                }
                st->pos[worst] = -1;
            }
        }
    }
    for (int e = 0; e <= E; e++) cnt[e] = 0;
    for (int a = 0; a < T * k; a++)
        if (st->pos[a] >= 0) cnt[st->idx[a] + 1]++;
    if (L->s.pad_capacity)
        for (int e = 0; e < E; e++) cnt[e + 1] = cap;
    for (int e = 0; e < E; e++) cnt[e + 1] += cnt[e];
    int fill[TR_MOE_MAX_EXPERTS];
    for (int e = 0; e < E; e++) fill[e] = st->off[e];
    for (int r = 0; r < st->off[E]; r++) st->row_a[r] = -1;
    for (int a = 0; a < T * k; a++) {
        if (st->pos[a] < 0) {
            st->prob[a] = 0.0f;
            continue;
        }
        int r = fill[st->idx[a]]++;
        st->pos[a] = r;
        st->row_a[r] = a;
    }
}

/* Scores for the aux loss over every expert: the softmax, or the sigmoid-type scores
 * normalised to sum 1 (compute_routing_scores_for_aux_loss). */
static void aux_scores(const tr_moe_layer *L, const float *l, float *sc) {
    int E = L->E;
    if (L->s.score == TR_MOE_SOFTMAX) {
        softmax(l, E, sc, NULL);
        return;
    }
    double sum = 0.0;
    float dv;
    for (int e = 0; e < E; e++) sum += sc[e] = score_of(L->s.score, l[e], &dv);
    for (int e = 0; e < E; e++) sc[e] = (float)(sc[e] / (sum + 1e-20));
}

static bool aux_on(const tr_moe_layer *L) {
    return L->s.balance != TR_MOE_LB_NONE && L->s.aux_coeff > 0.0f;
}

/* The switch load-balancing loss E / (k T^2) sum_e P_e N_e (per sequence for seq_aux_loss,
 * averaged over the batch; N averaged over the step's microbatches for global_aux_loss), divided
 * by its coefficient. st->aux_n keeps d loss / d score = coeff * the weight of each count. */
static tr_status aux_loss(tr_moe_layer *L, tr_moe_state *st, double *out) {
    int T = L->T, E = L->E, k = L->k, B = L->d.batch, S = L->d.seq;
    bool seq = L->s.balance == TR_MOE_LB_SEQ_AUX;
    int nb = seq ? B : 1, per = seq ? S : T;
    float sc[TR_MOE_MAX_EXPERTS];
    int32_t sel[TR_MOE_MAX_EXPERTS];
    double *N = L->aux_N, *P = L->aux_P;
    memset(N, 0, (size_t)nb * E * sizeof *N);
    memset(P, 0, (size_t)nb * E * sizeof *P);
    for (int t = 0; t < T; t++) {
        int b = seq ? t / S : 0;
        aux_scores(L, st->logits + (int64_t)t * E, sc);
        top_k(sc, E, k, sel);
        for (int j = 0; j < k; j++) N[b * E + sel[j]] += 1.0;
        for (int e = 0; e < E; e++) P[b * E + e] += sc[e];
    }
    int sp = L->d.sp > 1 ? L->d.sp : 1;
    if (sp > 1)
        TR_TRY(tr_comm_all_reduce_inplace(L->d.comm, TR_GROUP_TP_CP, N, (size_t)nb * E, TR_COMM_F64,
                                          TR_COMM_SUM));
    per *= sp;
    if (L->s.balance == TR_MOE_LB_GLOBAL_AUX) {
        for (int e = 0; e < E; e++) L->ga_counts[e] += N[e];
        L->ga_steps++;
        for (int e = 0; e < E; e++) N[e] = L->ga_counts[e] / L->ga_steps;
    }
    double f = (double)E / ((double)k * per * per * nb), loss = 0.0;
    for (int i = 0; i < nb * E; i++) {
        loss += f * P[i] * N[i];
        st->aux_n[i] = (float)(L->s.aux_coeff * f * N[i]);
    }
    *out = loss;
    return TR_OK;
}

static float jitter_noise(const tr_moe_layer *L, uint64_t seed, uint64_t round, int64_t i) {
    uint64_t key = seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(L->d.layer + 1));
    uint64_t n = (uint64_t)L->T * (uint64_t)L->d.hidden;
    float u = tr_philox_uniform(key, round * n + (uint64_t)i);
    return 1.0f + L->s.jitter * (2.0f * u - 1.0f);
}

tr_status tr_moe_route(tr_moe_layer *L, tr_moe_state *st, bool training, uint64_t seed,
                       uint64_t round, double *lb, double *z) {
    int T = L->T, E = L->E, h = L->d.hidden;
    const float *xr = st->x;
    if (st->noise) {
        for (int64_t i = 0; i < (int64_t)T * h; i++)
            st->noise[i] = training ? jitter_noise(L, seed, round, i) : 1.0f;
        for (int64_t i = 0; i < (int64_t)T * h; i++) L->d_x[i] = st->x[i] * st->noise[i];
        xr = L->d_x;
    }
    TR_TRY(tr_moe_gemm(L, L->s.router_lowp, TR_NOTRANS, TR_TRANS, T, E, h, xr, h, L->p.router, h,
                       0.0f, st->logits, E));
    tr_route_desc rd = route_desc(L);
    TR_TRY(L->ops->moe_topk(st->idx, st->prob, st->logits, &rd));
    dispatch(L, st);
    st->training = training;
    *lb = *z = 0.0;
    /* a recomputation's rerun: the counts, the losses and the aux weights (kept per slot) are
     * the forward's */
    if (!training || L->replay) return TR_OK;
    for (int e = 0; e < E; e++) {
        double n = st->off[e + 1] - st->off[e];
        L->seen[e] += n;
        if (L->s.expert_bias) L->counts[e] += n;
    }
    if (aux_on(L)) TR_TRY(aux_loss(L, st, lb));
    if (L->s.z_coeff > 0.0f) {
        double sum = 0.0;
        float p[TR_MOE_MAX_EXPERTS];
        for (int t = 0; t < T; t++) {
            double lse;
            softmax(st->logits + (int64_t)t * E, E, p, &lse);
            sum += lse * lse;
        }
        *z = sum / T / (L->d.sp > 1 ? L->d.sp : 1);
    }
    return TR_OK;
}

/* The aux loss's gradient dsc (per score) through the aux scores into dl. */
static void aux_bwd(const tr_moe_layer *L, const float *l, const float *dsc, float *dl) {
    int E = L->E;
    float sc[TR_MOE_MAX_EXPERTS];
    if (L->s.score == TR_MOE_SOFTMAX) {
        softmax(l, E, sc, NULL);
        double dot = 0.0;
        for (int e = 0; e < E; e++) dot += (double)dsc[e] * sc[e];
        for (int e = 0; e < E; e++) dl[e] += (float)(sc[e] * (dsc[e] - dot));
        return;
    }
    float dv[TR_MOE_MAX_EXPERTS];
    double sum = 0.0, dot = 0.0;
    for (int e = 0; e < E; e++) sum += sc[e] = score_of(L->s.score, l[e], &dv[e]);
    sum += 1e-20;
    for (int e = 0; e < E; e++) dot += (double)dsc[e] * sc[e];
    for (int e = 0; e < E; e++) dl[e] += (float)((dsc[e] / sum - dot / (sum * sum)) * dv[e]);
}

tr_status tr_moe_route_bwd(tr_moe_layer *L, const tr_moe_state *st, float aux_scale) {
    int T = L->T, E = L->E, S = L->d.seq;
    const tr_moe_spec *s = &L->s;
    /* the probabilities' part (overwriting), then the losses' parts added */
    tr_route_desc rd = route_desc(L);
    TR_TRY(L->ops->moe_topk_bwd(L->d_logits, L->d_prob, st->logits, st->idx, &rd));
    if (!st->training) return TR_OK;
    for (int t = 0; t < T; t++) {
        const float *l = st->logits + (int64_t)t * E;
        float *dl = L->d_logits + (int64_t)t * E;
        if (aux_on(L)) {
            int b = s->balance == TR_MOE_LB_SEQ_AUX ? t / S : 0;
            float dsc[TR_MOE_MAX_EXPERTS];
            for (int e = 0; e < E; e++) dsc[e] = aux_scale * st->aux_n[b * E + e];
            aux_bwd(L, l, dsc, dl);
        }
        if (s->z_coeff > 0.0f) {
            float p[TR_MOE_MAX_EXPERTS];
            double lse;
            softmax(l, E, p, &lse);
            float c = (float)(aux_scale * s->z_coeff * 2.0 * lse / T / (L->d.sp > 1 ? L->d.sp : 1));
            for (int e = 0; e < E; e++) dl[e] += c * p[e];
        }
    }
    return TR_OK;
}
