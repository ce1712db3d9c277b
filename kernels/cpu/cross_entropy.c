/* Vocab-parallel cross entropy. Each shard reduces its logits to three numbers per row
 * (max, sum exp(x - max), target logit); those merge associatively, so the loss never needs
 * the full vocabulary in one place, and backward rewrites the logits buffer with its own
 * gradient so the [rows, V] gradient is never a second allocation. */
#include <math.h>
#include <string.h>

#include "kernels/common/ce_stats.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd/simd.h"
#include "kernels/cpu/threadpool.h"

/* Chunk the vocab so the max pass and the exp pass reuse the chunk from L1/L2. */
#define TR_CE_CHUNK 2048

typedef struct ce_ctx {
    float *stats, *logits, *loss;
    const float *clogits, *cstats, *dloss;
    const int32_t *targets;
    const tr_cpu_simd *simd;
    int rows, vlocal, vstart;
} ce_ctx;

static void ce_stats_rows(void *vc, int64_t r0, int64_t r1) {
    ce_ctx *c = vc;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = c->clogits + r * c->vlocal;
        float m = -INFINITY;
        double s = 0.0;
        for (int j0 = 0; j0 < c->vlocal; j0 += TR_CE_CHUNK) {
            int n = j0 + TR_CE_CHUNK < c->vlocal ? TR_CE_CHUNK : c->vlocal - j0;
            float cm = c->simd->row_max(x + j0, n);
            if (cm > m) {
                if (m > -INFINITY) s *= exp((double)m - cm);
                m = cm;
            }
            s += c->simd->sum_exp(x + j0, n, m);
        }
        int32_t t = c->targets[r] - c->vstart;
        c->stats[r] = m;
        c->stats[c->rows + r] = (float)s;
        c->stats[2 * c->rows + r] = c->targets[r] >= 0 && t >= 0 && t < c->vlocal ? x[t] : 0.0f;
    }
}

tr_status tr_cpu_ce_stats(float *stats, const float *logits, const int32_t *targets, int rows,
                          int vocab_local, int vocab_start) {
    if (rows < 0 || vocab_local < 0 || vocab_start < 0) return TR_ERR_INVALID;
    if (rows && (!stats || !targets || (vocab_local && !logits))) return TR_ERR_INVALID;
    ce_ctx c = {.stats = stats,
                .clogits = logits,
                .targets = targets,
                .rows = rows,
                .vlocal = vocab_local,
                .vstart = vocab_start,
                .simd = tr_cpu_simd_active()};
    tr_cpu_parallel_for(rows, 1, ce_stats_rows, &c);
    return TR_OK;
}

tr_status tr_cpu_ce_merge(float *stats, const float *other, int rows) {
    if (rows < 0 || (rows && (!stats || !other))) return TR_ERR_INVALID;
    for (int r = 0; r < rows; r++) tr_ce_merge_row(stats, other, rows, r);
    return TR_OK;
}

tr_status tr_cpu_ce_rebase(float *stats, const float *global_max, int rows) {
    if (rows < 0 || (rows && (!stats || !global_max))) return TR_ERR_INVALID;
    for (int r = 0; r < rows; r++)
        if (!tr_ce_rebase_row(stats, global_max[r], rows, r))
            return TR_ERR_INVALID; /* not the max over all shards */
    return TR_OK;
}

tr_status tr_cpu_ce_loss(float *loss, const float *stats, const int32_t *targets, int rows) {
    if (rows < 0 || (rows && (!loss || !stats || !targets))) return TR_ERR_INVALID;
    for (int r = 0; r < rows; r++) loss[r] = tr_ce_row_loss(stats, targets, rows, r);
    return TR_OK;
}

static void ce_bwd_rows(void *vc, int64_t r0, int64_t r1) {
    ce_ctx *c = vc;
    for (int64_t r = r0; r < r1; r++) {
        float *x = c->logits + r * c->vlocal;
        if (c->targets[r] < 0) {
            for (int j = 0; j < c->vlocal; j++) x[j] = 0.0f;
            continue;
        }
        float m = c->cstats[r], g = c->dloss ? c->dloss[r] : 1.0f;
        c->simd->scaled_exp(x, c->vlocal, m, g / c->cstats[c->rows + r]);
        int32_t t = c->targets[r] - c->vstart;
        if (t >= 0 && t < c->vlocal) x[t] -= g;
    }
}

tr_status tr_cpu_ce_bwd(float *logits, const float *stats, const int32_t *targets,
                        const float *dloss, int rows, int vocab_local, int vocab_start) {
    if (rows < 0 || vocab_local < 0 || vocab_start < 0) return TR_ERR_INVALID;
    if (rows && (!stats || !targets || (vocab_local && !logits))) return TR_ERR_INVALID;
    ce_ctx c = {.logits = logits,
                .cstats = stats,
                .dloss = dloss,
                .targets = targets,
                .rows = rows,
                .vlocal = vocab_local,
                .vstart = vocab_start,
                .simd = tr_cpu_simd_active()};
    tr_cpu_parallel_for(rows, 1, ce_bwd_rows, &c);
    return TR_OK;
}
