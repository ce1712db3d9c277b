/* Megatron's TopKRouter on one rank: scores, (group-limited) top-k, probabilities, the capacity
 * drop, the balancing losses and their gradients (moe_utils.py's semantics, our own code). */
#include <math.h>
#include <string.h>

#include "kernels/common/philox.h"
#include "runtime/comm/comm.h"
#include "runtime/moe/internal.h"

static float sigmoidf_(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* sqrt(softplus(x)), softplus computed without overflow. */
static float sqrtsoftplus(float x) {
    float sp = x > 20.0f ? x : log1pf(expf(x));
    return sqrtf(sp);
}

/* The score of logit x and its derivative. */
static float score_of(int fn, float x, float *deriv) {
    if (fn == TR_MOE_SIGMOID) {
        float s = sigmoidf_(x);
        *deriv = s * (1.0f - s);
        return s;
    }
    float s = sqrtsoftplus(x);
    *deriv = s > 0.0f ? sigmoidf_(x) / (2.0f * s) : 0.0f;
    return s;
}

static void softmax(const float *l, int n, float *p, double *lse) {
    float mx = l[0];
    for (int i = 1; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)(l[i] - mx));
    for (int i = 0; i < n; i++) p[i] = (float)(exp((double)(l[i] - mx)) / sum);
    if (lse) *lse = (double)mx + log(sum);
}

/* The k largest of v[0..n) not masked out, largest first; ties go to the lower index. */
static void top_k(const float *v, const bool *allowed, int n, int k, int32_t *out) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            if (allowed && !allowed[i]) continue;
            bool taken = false;
            for (int q = 0; q < j; q++) taken |= out[q] == i;
            if (taken) continue;
            if (best < 0 || v[i] > v[best]) best = i;
        }
        out[j] = best;
    }
}

/* Group-limited routing: each group scored by the sum of its top k / group_topk values, the
 * best group_topk groups kept, the top k taken among their experts. */
static void route_topk(const tr_moe_layer *L, const float *r, int32_t *idx) {
    const tr_moe_spec *s = &L->s;
    int E = L->E, k = L->k;
    if (s->groups <= 0 || s->group_topk <= 0) {
        top_k(r, NULL, E, k, idx);
        return;
    }
    int G = s->groups, per = E / G, pick = k / s->group_topk;
    float gscore[TR_MOE_MAX_EXPERTS];
    int32_t tmp[TR_MOE_MAX_EXPERTS], gsel[TR_MOE_MAX_EXPERTS];
    bool allowed[TR_MOE_MAX_EXPERTS];
    for (int g = 0; g < G; g++) {
        top_k(r + g * per, NULL, per, pick, tmp);
        double sum = 0.0;
        for (int j = 0; j < pick; j++) sum += r[g * per + tmp[j]];
        gscore[g] = (float)sum;
    }
    top_k(gscore, NULL, G, s->group_topk, gsel);
    for (int e = 0; e < E; e++) allowed[e] = false;
    for (int j = 0; j < s->group_topk; j++)
        for (int e = 0; e < per; e++) allowed[gsel[j] * per + e] = true;
    top_k(r, allowed, E, k, idx);
}

/* One token's experts and probabilities (before the capacity drop). */
static void route_token(const tr_moe_layer *L, const float *l, int32_t *idx, float *prob) {
    const tr_moe_spec *s = &L->s;
    int E = L->E, k = L->k;
    float r[TR_MOE_MAX_EXPERTS], sc[TR_MOE_MAX_EXPERTS], dv;
    if (s->score == TR_MOE_SOFTMAX) {
        if (s->pre_softmax) {
            softmax(l, E, sc, NULL);
            route_topk(L, sc, idx);
            for (int j = 0; j < k; j++) prob[j] = sc[idx[j]];
        } else {
            route_topk(L, l, idx);
            float sel[TR_MOE_MAX_EXPERTS];
            for (int j = 0; j < k; j++) sel[j] = l[idx[j]];
            softmax(sel, k, prob, NULL);
        }
    } else {
        for (int e = 0; e < E; e++) {
            sc[e] = score_of(s->score, l[e], &dv);
            r[e] = sc[e] + (s->expert_bias && L->p.bias ? L->p.bias[e] : 0.0f);
        }
        route_topk(L, r, idx);
        double sum = 0.0;
        for (int j = 0; j < k; j++) sum += sc[idx[j]];
        for (int j = 0; j < k; j++)
            prob[j] = k > 1 ? (float)(sc[idx[j]] / (sum + 1e-20)) : sc[idx[j]];
    }
    for (int j = 0; j < k; j++) prob[j] *= s->topk_scale;
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
        top_k(sc, NULL, E, k, sel);
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
    int T = L->T, E = L->E, k = L->k, h = L->d.hidden;
    const float *xr = st->x;
    if (st->noise) {
        for (int64_t i = 0; i < (int64_t)T * h; i++)
            st->noise[i] = training ? jitter_noise(L, seed, round, i) : 1.0f;
        for (int64_t i = 0; i < (int64_t)T * h; i++) L->d_x[i] = st->x[i] * st->noise[i];
        xr = L->d_x;
    }
    TR_TRY(tr_moe_gemm(L, L->s.router_lowp, TR_NOTRANS, TR_TRANS, T, E, h, xr, h, L->p.router, h,
                       0.0f, st->logits, E));
    for (int t = 0; t < T; t++)
        route_token(L, st->logits + (int64_t)t * E, st->idx + (int64_t)t * k,
                    st->prob + (int64_t)t * k);
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

/* dL/dlogits of one token from g, the gradient of its k probabilities. */
static void token_bwd(const tr_moe_layer *L, const float *l, const int32_t *idx, const float *g,
                      float *dl) {
    const tr_moe_spec *s = &L->s;
    int E = L->E, k = L->k;
    float sc[TR_MOE_MAX_EXPERTS];
    if (s->score == TR_MOE_SOFTMAX && s->pre_softmax) {
        softmax(l, E, sc, NULL);
        double dot = 0.0;
        for (int j = 0; j < k; j++) dot += (double)g[j] * sc[idx[j]];
        for (int e = 0; e < E; e++) dl[e] += (float)(-sc[e] * dot);
        for (int j = 0; j < k; j++) dl[idx[j]] += sc[idx[j]] * g[j];
    } else if (s->score == TR_MOE_SOFTMAX) {
        float sel[TR_MOE_MAX_EXPERTS], q[TR_MOE_MAX_EXPERTS];
        for (int j = 0; j < k; j++) sel[j] = l[idx[j]];
        softmax(sel, k, q, NULL);
        double dot = 0.0;
        for (int j = 0; j < k; j++) dot += (double)g[j] * q[j];
        for (int j = 0; j < k; j++) dl[idx[j]] += (float)(q[j] * (g[j] - dot));
    } else {
        float v[TR_MOE_MAX_EXPERTS], dv[TR_MOE_MAX_EXPERTS];
        double sum = 0.0, dot = 0.0;
        for (int j = 0; j < k; j++) {
            v[j] = score_of(s->score, l[idx[j]], &dv[j]);
            sum += v[j];
        }
        sum += 1e-20;
        for (int j = 0; j < k; j++) dot += (double)g[j] * v[j];
        for (int j = 0; j < k; j++) {
            double ds = k > 1 ? g[j] / sum - dot / (sum * sum) : g[j];
            dl[idx[j]] += (float)(ds * dv[j]);
        }
    }
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
    int T = L->T, E = L->E, k = L->k, S = L->d.seq;
    const tr_moe_spec *s = &L->s;
    memset(L->d_logits, 0, (size_t)T * E * sizeof(float));
    for (int t = 0; t < T; t++) {
        const float *l = st->logits + (int64_t)t * E;
        float *dl = L->d_logits + (int64_t)t * E;
        float g[TR_MOE_MAX_EXPERTS];
        for (int j = 0; j < k; j++) g[j] = s->topk_scale * L->d_prob[(int64_t)t * k + j];
        token_bwd(L, l, st->idx + (int64_t)t * k, g, dl);
        if (!st->training) continue;
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
