/* Flat-buffer helpers used around the model: residual add, fill, clip scale, squared norm. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threadpool.h"

#define TR_EW_GRAIN 16384

typedef struct ew_ctx {
    float *y;
    const float *x;
    float s;
} ew_ctx;

static void add_range(void *vc, int64_t b, int64_t e) {
    ew_ctx *c = vc;
    for (int64_t i = b; i < e; i++) c->y[i] += c->x[i];
}

static void fill_range(void *vc, int64_t b, int64_t e) {
    ew_ctx *c = vc;
    for (int64_t i = b; i < e; i++) c->y[i] = c->s;
}

static void scale_range(void *vc, int64_t b, int64_t e) {
    ew_ctx *c = vc;
    for (int64_t i = b; i < e; i++) c->y[i] *= c->s;
}

tr_status tr_cpu_add(float *y, const float *x, int64_t n) {
    if (n < 0 || (n && (!y || !x))) return TR_ERR_INVALID;
    ew_ctx c = {.y = y, .x = x};
    tr_cpu_parallel_for(n, TR_EW_GRAIN, add_range, &c);
    return TR_OK;
}

tr_status tr_cpu_fill(float *x, int64_t n, float value) {
    if (n < 0 || (n && !x)) return TR_ERR_INVALID;
    ew_ctx c = {.y = x, .s = value};
    tr_cpu_parallel_for(n, TR_EW_GRAIN, fill_range, &c);
    return TR_OK;
}

tr_status tr_cpu_scale(float *x, int64_t n, float s) {
    if (n < 0 || (n && !x)) return TR_ERR_INVALID;
    ew_ctx c = {.y = x, .s = s};
    tr_cpu_parallel_for(n, TR_EW_GRAIN, scale_range, &c);
    return TR_OK;
}

/* Fixed-size blocks summed in index order: the result does not depend on the thread count,
 * which keeps the global grad norm (and so clipping) reproducible across machines. */
#define TR_SSQ_BLOCK 4096

typedef struct ssq_ctx {
    const float *x;
    int64_t n;
    double *partial;
} ssq_ctx;

static void ssq_blocks(void *vc, int64_t b0, int64_t b1) {
    ssq_ctx *c = vc;
    for (int64_t b = b0; b < b1; b++) {
        int64_t i0 = b * TR_SSQ_BLOCK, i1 = i0 + TR_SSQ_BLOCK < c->n ? i0 + TR_SSQ_BLOCK : c->n;
        double s = 0.0;
        for (int64_t i = i0; i < i1; i++) s += (double)c->x[i] * c->x[i];
        c->partial[b] = s;
    }
}

tr_status tr_cpu_sum_squares(float *out, const float *x, int64_t n) {
    if (!out || n < 0 || (n && !x)) return TR_ERR_INVALID;
    int64_t nb = (n + TR_SSQ_BLOCK - 1) / TR_SSQ_BLOCK;
    double stackbuf[64];
    double *partial = nb <= 64 ? stackbuf : malloc((size_t)nb * sizeof *partial);
    if (!partial) return TR_ERR_NOMEM;
    ssq_ctx c = {.x = x, .n = n, .partial = partial};
    tr_cpu_parallel_for(nb, 4, ssq_blocks, &c);
    double s = 0.0;
    for (int64_t b = 0; b < nb; b++) s += partial[b];
    if (partial != stackbuf) free(partial);
    *out = (float)s;
    return TR_OK;
}
