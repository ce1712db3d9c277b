/* LayerNorm and RMSNorm over the last dimension. Row statistics are accumulated in double so a
 * large mean does not swamp the variance; only mean/rstd per row are kept for backward. */
#include <math.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threadpool.h"

typedef struct norm_ctx {
    float *y, *mean, *rstd, *dx, *dw, *db;
    const float *x, *w, *b, *dy, *cmean, *crstd;
    int rows, dim, zc, rms;
    float eps;
} norm_ctx;

static inline float gamma_at(const norm_ctx *c, int j) {
    return c->w[j] + (c->zc ? 1.0f : 0.0f);
}

static void norm_fwd_rows(void *vc, int64_t r0, int64_t r1) {
    norm_ctx *c = vc;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = c->x + r * c->dim;
        float *y = c->y + r * c->dim;
        double mu = 0.0;
        if (!c->rms) {
            for (int j = 0; j < c->dim; j++) mu += x[j];
            mu /= c->dim;
        }
        double var = 0.0;
        for (int j = 0; j < c->dim; j++) var += (x[j] - mu) * (x[j] - mu);
        var /= c->dim;
        float rs = (float)(1.0 / sqrt(var + (double)c->eps));
        float m = (float)mu;
        for (int j = 0; j < c->dim; j++) {
            float v = (x[j] - m) * rs * gamma_at(c, j);
            y[j] = c->b ? v + c->b[j] : v;
        }
        if (c->mean) c->mean[r] = m;
        c->rstd[r] = rs;
    }
}

/* dx = rstd * (g*dy - mean(g*dy) - xhat * mean(g*dy*xhat)); RMSNorm drops the mean(g*dy) term
 * because it never subtracted the mean in forward. */
static void norm_bwd_rows(void *vc, int64_t r0, int64_t r1) {
    norm_ctx *c = vc;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = c->x + r * c->dim, *dy = c->dy + r * c->dim;
        float *dx = c->dx + r * c->dim;
        float m = c->rms ? 0.0f : c->cmean[r], rs = c->crstd[r];
        double a = 0.0, bsum = 0.0;
        for (int j = 0; j < c->dim; j++) {
            float g = dy[j] * gamma_at(c, j);
            a += g;
            bsum += (double)g * ((x[j] - m) * rs);
        }
        float ma = c->rms ? 0.0f : (float)(a / c->dim), mb = (float)(bsum / c->dim);
        for (int j = 0; j < c->dim; j++) {
            float xhat = (x[j] - m) * rs;
            dx[j] += rs * (dy[j] * gamma_at(c, j) - ma - xhat * mb);
        }
    }
}

/* Parameter grads sum over rows; splitting by column keeps each sum in one task. A task takes
 * NORM_COL_BLOCK adjacent columns and walks the rows once for all of them (contiguous loads),
 * each column's sums still in row order: bitwise what one column at a time gives. */
#define NORM_COL_BLOCK 16

static void norm_bwd_cols(void *vc, int64_t b0, int64_t b1) {
    norm_ctx *c = vc;
    int64_t j0 = b0 * NORM_COL_BLOCK,
            j1 = b1 * NORM_COL_BLOCK < c->dim ? b1 * NORM_COL_BLOCK : c->dim;
    for (; j0 + NORM_COL_BLOCK <= j1; j0 += NORM_COL_BLOCK) {
        double sw[NORM_COL_BLOCK] = {0}, sb[NORM_COL_BLOCK] = {0};
        for (int r = 0; r < c->rows; r++) {
            int64_t i = (int64_t)r * c->dim + j0;
            float m = c->rms ? 0.0f : c->cmean[r], rs = c->crstd[r];
            const float *dy = c->dy + i, *x = c->x + i;
            for (int l = 0; l < NORM_COL_BLOCK; l++) {
                sw[l] += (double)dy[l] * ((x[l] - m) * rs);
                sb[l] += dy[l];
            }
        }
        for (int l = 0; l < NORM_COL_BLOCK; l++) {
            if (c->dw) c->dw[j0 + l] += (float)sw[l];
            if (c->db) c->db[j0 + l] += (float)sb[l];
        }
    }
    for (int64_t j = j0; j < j1; j++) {
        double sw = 0.0, sb = 0.0;
        for (int r = 0; r < c->rows; r++) {
            int64_t i = (int64_t)r * c->dim + j;
            float m = c->rms ? 0.0f : c->cmean[r];
            sw += (double)c->dy[i] * ((c->x[i] - m) * c->crstd[r]);
            sb += c->dy[i];
        }
        if (c->dw) c->dw[j] += (float)sw;
        if (c->db) c->db[j] += (float)sb;
    }
}

static tr_status check_shape(int rows, int dim) {
    return rows < 0 || dim <= 0 ? TR_ERR_INVALID : TR_OK;
}

tr_status tr_cpu_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w,
                               const float *b, int rows, int dim, float eps, int zero_centered) {
    TR_TRY(check_shape(rows, dim));
    if (rows && (!y || !mean || !rstd || !x || !w)) return TR_ERR_INVALID;
    norm_ctx c = {.y = y,
                  .mean = mean,
                  .rstd = rstd,
                  .x = x,
                  .w = w,
                  .b = b,
                  .rows = rows,
                  .dim = dim,
                  .zc = zero_centered,
                  .eps = eps};
    tr_cpu_parallel_for(rows, 4, norm_fwd_rows, &c);
    return TR_OK;
}

tr_status tr_cpu_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                               const float *w, const float *mean, const float *rstd, int rows,
                               int dim, int zero_centered) {
    TR_TRY(check_shape(rows, dim));
    if (rows && (!dx || !dy || !x || !w || !mean || !rstd)) return TR_ERR_INVALID;
    norm_ctx c = {.dx = dx,
                  .dw = dw,
                  .db = db,
                  .dy = dy,
                  .x = x,
                  .w = w,
                  .cmean = mean,
                  .crstd = rstd,
                  .rows = rows,
                  .dim = dim,
                  .zc = zero_centered};
    tr_cpu_parallel_for(rows, 4, norm_bwd_rows, &c);
    if (dw || db)
        tr_cpu_parallel_for((dim + NORM_COL_BLOCK - 1) / NORM_COL_BLOCK, 1, norm_bwd_cols, &c);
    return TR_OK;
}

tr_status tr_cpu_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int rows,
                             int dim, float eps, int zero_centered) {
    TR_TRY(check_shape(rows, dim));
    if (rows && (!y || !rstd || !x || !w)) return TR_ERR_INVALID;
    norm_ctx c = {.y = y,
                  .rstd = rstd,
                  .x = x,
                  .w = w,
                  .rows = rows,
                  .dim = dim,
                  .zc = zero_centered,
                  .rms = 1,
                  .eps = eps};
    tr_cpu_parallel_for(rows, 4, norm_fwd_rows, &c);
    return TR_OK;
}

tr_status tr_cpu_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                             const float *rstd, int rows, int dim, int zero_centered) {
    TR_TRY(check_shape(rows, dim));
    if (rows && (!dx || !dy || !x || !w || !rstd)) return TR_ERR_INVALID;
    norm_ctx c = {.dx = dx,
                  .dw = dw,
                  .dy = dy,
                  .x = x,
                  .w = w,
                  .crstd = rstd,
                  .rows = rows,
                  .dim = dim,
                  .zc = zero_centered,
                  .rms = 1};
    tr_cpu_parallel_for(rows, 4, norm_bwd_rows, &c);
    if (dw) tr_cpu_parallel_for((dim + NORM_COL_BLOCK - 1) / NORM_COL_BLOCK, 1, norm_bwd_cols, &c);
    return TR_OK;
}
