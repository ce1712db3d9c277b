/* The log-sum-exp merge of partial attentions (context parallelism's ring): one query row of one
 * head whose keys were split into two disjoint sets, each with its normalised output and lse,
 * becomes the row over both sets. Shared by the CPU op and the CUDA kernel so both compute each
 * element by the same expression. */
#ifndef TR_KERNELS_LSE_MERGE_H
#define TR_KERNELS_LSE_MERGE_H

#include <math.h>

#include "kernels/common/hostdev.h"

/* log(exp(a) + exp(b)), exact for -inf on either side (a set with no keys). */
TR_HOST_DEVICE float tr_lse_merge(float a, float b) {
    if (a == -INFINITY) return b;
    if (b == -INFINITY) return a;
    float hi = a > b ? a : b, lo = a > b ? b : a;
    return hi + log1pf(expf(lo - hi));
}

/* One row: out[0..dim) and *lse become the merged row; a running row with lse -inf takes the
 * other row as it is (its out may hold anything). */
TR_HOST_DEVICE void tr_lse_merge_row(float *out, float *lse, const float *out_b, float lse_b,
                                     int dim) {
    float a = *lse, m = tr_lse_merge(a, lse_b);
    if (a == -INFINITY) {
        for (int e = 0; e < dim; e++) out[e] = out_b[e];
    } else if (lse_b != -INFINITY) {
        float wa = expf(a - m), wb = expf(lse_b - m);
        for (int e = 0; e < dim; e++) out[e] = wa * out[e] + wb * out_b[e];
    }
    *lse = m;
}

#endif
