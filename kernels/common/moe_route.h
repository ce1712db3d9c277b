/* One token's MoE routing, the body the CPU op (kernels/cpu/moe.c) loops over and the CUDA
 * kernel (kernels/cuda/moe_kernels.cuh) runs in one thread per token, so both give the same bits
 * for the same float maths. Megatron's TopKRouter semantics (moe_utils.py's
 * topk_routing_with_score_function, our own code), as runtime/moe/router.c computed them before
 * it called the op:
 *  - softmax, pre: top k of softmax(logits), probabilities those softmax values;
 *  - softmax, post: top k of the logits, probabilities the softmax over the k chosen logits;
 *  - sigmoid / sqrt(softplus): top k of score + bias (bias for the selection only), the
 *    probabilities the unbiased scores divided by their sum (+1e-20) when k > 1;
 *  - then every probability times topk_scale.
 * Top-k keeps the k largest, largest first, ties to the lower index (a strict comparison in
 * index order); group-limited routing scores a group by the double sum of its best
 * topk / group_topk values and keeps the best group_topk groups (same tie rule). The caller gives
 * the scratch (tr_route_work_*) so that a device thread needs no large local arrays. */
#ifndef TR_KERNELS_MOE_ROUTE_H
#define TR_KERNELS_MOE_ROUTE_H

#include <math.h>
#include <stdint.h>

#include "kernels/common/hostdev.h"
#include "kernels/common/moe_desc.h"

/* Scratch of one token: floats and ints. */
TR_HOST_DEVICE int tr_route_work_floats(int experts) {
    return 3 * experts;
}
TR_HOST_DEVICE int tr_route_work_ints(int experts) {
    return 3 * experts;
}

TR_HOST_DEVICE float tr_route_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* The score of logit x (sigmoid or sqrt(softplus), softplus without overflow) and its
 * derivative. */
TR_HOST_DEVICE float tr_route_score(int fn, float x, float *deriv) {
    if (fn == TR_ROUTE_SIGMOID) {
        float s = tr_route_sigmoid(x);
        *deriv = s * (1.0f - s);
        return s;
    }
    float sp = x > 20.0f ? x : log1pf(expf(x));
    float s = sqrtf(sp);
    *deriv = s > 0.0f ? tr_route_sigmoid(x) / (2.0f * s) : 0.0f;
    return s;
}

/* p = softmax(l[0..n)), the sum in double; lse (when not NULL) its log-sum-exp. */
TR_HOST_DEVICE void tr_route_softmax(const float *l, int n, float *p, double *lse) {
    float mx = l[0];
    for (int i = 1; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)(l[i] - mx));
    for (int i = 0; i < n; i++) p[i] = (float)(exp((double)(l[i] - mx)) / sum);
    if (lse) *lse = (double)mx + log(sum);
}

/* The k largest of v[0..n) with allowed[i] != 0 (allowed NULL: all), largest first, ties to the
 * lower index. k passes of n: k is small (<= 8 in the models Trestle builds). */
TR_HOST_DEVICE void tr_route_top_k(const float *v, const int32_t *allowed, int n, int k,
                                   int32_t *out) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            if (allowed && !allowed[i]) continue;
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= out[q] == i;
            if (taken) continue;
            if (best < 0 || v[i] > v[best]) best = i;
        }
        out[j] = best;
    }
}

/* The chosen experts idx[0..k) of selection values r[0..E), group-limited when the desc says. */
TR_HOST_DEVICE void tr_route_select(const tr_route_desc *d, const float *r, int32_t *idx, float *wf,
                                    int32_t *wi) {
    int E = d->experts, k = d->topk;
    if (d->groups <= 0 || d->group_topk <= 0) {
        tr_route_top_k(r, 0, E, k, idx);
        return;
    }
    int G = d->groups, per = E / G, pick = k / d->group_topk;
    float *gscore = wf;
    int32_t *tmp = wi, *gsel = wi + E, *allowed = wi + 2 * E;
    for (int g = 0; g < G; g++) {
        tr_route_top_k(r + g * per, 0, per, pick, tmp);
        double sum = 0.0;
        for (int j = 0; j < pick; j++) sum += r[g * per + tmp[j]];
        gscore[g] = (float)sum;
    }
    tr_route_top_k(gscore, 0, G, d->group_topk, gsel);
    for (int e = 0; e < E; e++) allowed[e] = 0;
    for (int j = 0; j < d->group_topk; j++)
        for (int e = 0; e < per; e++) allowed[gsel[j] * per + e] = 1;
    tr_route_top_k(r, allowed, E, k, idx);
}

/* Token logits l[0..E) to idx[0..k) and prob[0..k); wf / wi: tr_route_work_floats / ints. */
TR_HOST_DEVICE void tr_route_token(const tr_route_desc *d, const float *l, int32_t *idx,
                                   float *prob, float *wf, int32_t *wi) {
    int E = d->experts, k = d->topk;
    float *sc = wf, *r = wf + E, *gw = wf + 2 * E, dv;
    if (d->score == TR_ROUTE_SOFTMAX) {
        if (d->pre_softmax) {
            tr_route_softmax(l, E, sc, 0);
            tr_route_select(d, sc, idx, gw, wi);
            for (int j = 0; j < k; j++) prob[j] = sc[idx[j]];
        } else {
            tr_route_select(d, l, idx, gw, wi);
            for (int j = 0; j < k; j++) r[j] = l[idx[j]];
            tr_route_softmax(r, k, prob, 0);
        }
    } else {
        for (int e = 0; e < E; e++) {
            sc[e] = tr_route_score(d->score, l[e], &dv);
            r[e] = sc[e] + (d->bias ? d->bias[e] : 0.0f);
        }
        tr_route_select(d, r, idx, gw, wi);
        double sum = 0.0;
        for (int j = 0; j < k; j++) sum += sc[idx[j]];
        for (int j = 0; j < k; j++)
            prob[j] = k > 1 ? (float)(sc[idx[j]] / (sum + 1e-20)) : sc[idx[j]];
    }
    for (int j = 0; j < k; j++) prob[j] *= d->topk_scale;
}

/* dl[0..E) (overwritten) from dprob[0..k), the gradient of the token's prob, through the scores
 * of the chosen idx; an idx outside [0, E) contributes nothing. wf: tr_route_work_floats. */
TR_HOST_DEVICE void tr_route_token_bwd(const tr_route_desc *d, const float *l, const int32_t *idx,
                                       const float *dprob, float *dl, float *wf) {
    int E = d->experts, k = d->topk;
    float *sc = wf, *g = wf + E, *q = wf + 2 * E;
    for (int e = 0; e < E; e++) dl[e] = 0.0f;
    for (int j = 0; j < k; j++)
        if (idx[j] < 0 || idx[j] >= E) return;
    for (int j = 0; j < k; j++) g[j] = d->topk_scale * dprob[j];
    if (d->score == TR_ROUTE_SOFTMAX && d->pre_softmax) {
        tr_route_softmax(l, E, sc, 0);
        double dot = 0.0;
        for (int j = 0; j < k; j++) dot += (double)g[j] * sc[idx[j]];
        for (int e = 0; e < E; e++) dl[e] += (float)(-sc[e] * dot);
        for (int j = 0; j < k; j++) dl[idx[j]] += sc[idx[j]] * g[j];
    } else if (d->score == TR_ROUTE_SOFTMAX) {
        float *sel = sc;
        for (int j = 0; j < k; j++) sel[j] = l[idx[j]];
        tr_route_softmax(sel, k, q, 0);
        double dot = 0.0;
        for (int j = 0; j < k; j++) dot += (double)g[j] * q[j];
        for (int j = 0; j < k; j++) dl[idx[j]] += (float)(q[j] * (g[j] - dot));
    } else {
        float *v = sc, *dv = q;
        double sum = 0.0, dot = 0.0;
        for (int j = 0; j < k; j++) {
            v[j] = tr_route_score(d->score, l[idx[j]], &dv[j]);
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

/* The checks of a desc both backends make: 1 when it is valid. */
TR_HOST_DEVICE int tr_route_valid(const tr_route_desc *d) {
    if (!d || d->tokens < 0 || d->experts < 1 || d->experts > TR_ROUTE_MAX_EXPERTS || d->topk < 1 ||
        d->topk > d->experts || d->score < TR_ROUTE_SOFTMAX || d->score > TR_ROUTE_SQRTSOFTPLUS ||
        (d->bias && d->score == TR_ROUTE_SOFTMAX))
        return 0;
    if (d->groups > 0) {
        if (d->experts % d->groups || d->group_topk < 1 || d->group_topk > d->groups ||
            d->topk % d->group_topk || d->topk / d->group_topk > d->experts / d->groups)
            return 0;
    }
    return 1;
}

#endif
