/* Row steps of vocab-parallel cross entropy that the CPU op and the CUDA kernels share, so the
 * merged statistics are the same bits on both. stats is [3][rows]: the row's max, its sum of
 * exp(x - max) and its target logit (kernels/cpu/cross_entropy.c explains them). */
#ifndef TR_KERNELS_CE_STATS_H
#define TR_KERNELS_CE_STATS_H

#include <math.h>
#include <stdint.h>

#include "kernels/common/hostdev.h"

/* Folds another shard's statistics of row r into stats; a row empty in both stays as it is. */
TR_HOST_DEVICE void tr_ce_merge_row(float *stats, const float *other, int rows, int r) {
    float m1 = stats[r], m2 = other[r], m = m1 > m2 ? m1 : m2;
    if (m == -INFINITY) return; /* both shards empty */
    double s = 0.0;
    if (m1 > -INFINITY) s += stats[rows + r] * exp((double)m1 - m);
    if (m2 > -INFINITY) s += other[rows + r] * exp((double)m2 - m);
    stats[r] = m;
    stats[rows + r] = (float)s;
    stats[2 * rows + r] += other[2 * rows + r];
}

/* Re-expresses row r's sum relative to the max over all shards g. Returns 0, leaving the row as
 * it is, when g is below the row's own max (so not that max). */
TR_HOST_DEVICE int tr_ce_rebase_row(float *stats, float g, int rows, int r) {
    float m = stats[r];
    if (g < m) return 0;
    stats[rows + r] = m > -INFINITY ? (float)(stats[rows + r] * exp((double)m - g)) : 0.0f;
    stats[r] = g;
    return 1;
}

/* Row r's loss, log sum exp - target logit from its merged statistics; 0 for an ignored row. */
TR_HOST_DEVICE float tr_ce_row_loss(const float *stats, const int32_t *targets, int rows, int r) {
    return targets[r] < 0
               ? 0.0f
               : (float)((double)stats[r] + log((double)stats[rows + r]) - stats[2 * rows + r]);
}

#endif
