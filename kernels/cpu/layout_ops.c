/* Strided copies and fills, and the masked loss mean: what the model used to do with host loops
 * over its buffers, as ops so the same code runs on device memory. */
#include <string.h>

#include "kernels/common/loss_mean.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threadpool.h"

/* The span [first, last) of a strided view, for the overlap check. */
static void span(const float *p, int64_t ld, int64_t rows, int64_t cols, const char **b,
                 const char **e) {
    *b = (const char *)p;
    *e = (const char *)(p + (rows - 1) * ld + cols);
}

typedef struct copy_ctx {
    float *dst;
    int64_t ldd;
    const float *src;
    int64_t lds;
    size_t bytes;
} copy_ctx;

static void copy_rows(void *vc, int64_t r0, int64_t r1) {
    const copy_ctx *c = vc;
    for (int64_t r = r0; r < r1; r++) memcpy(c->dst + r * c->ldd, c->src + r * c->lds, c->bytes);
}

tr_status tr_cpu_copy_2d(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                         int64_t cols) {
    if (rows < 0 || cols < 0 || ldd < cols || lds < cols) return TR_ERR_INVALID;
    if (!rows || !cols) return TR_OK;
    if (!dst || !src) return TR_ERR_INVALID;
    const char *db, *de, *sb, *se;
    span(dst, ldd, rows, cols, &db, &de);
    span(src, lds, rows, cols, &sb, &se);
    if (db < se && sb < de) return TR_ERR_INVALID;
    copy_ctx c = {dst, ldd, src, lds, (size_t)cols * sizeof(float)};
    /* rows over the pool, at least ~64 KiB a chunk: the QKV split's strided copies of a few
     * hundred bytes a row are latency-bound on one core */
    int64_t grain = (int64_t)((65536 + c.bytes - 1) / c.bytes);
    tr_cpu_parallel_for(rows, grain, copy_rows, &c);
    return TR_OK;
}

tr_status tr_cpu_fill_2d(float *x, int64_t ld, int64_t rows, int64_t cols, float value) {
    if (rows < 0 || cols < 0 || ld < cols) return TR_ERR_INVALID;
    if (!rows || !cols) return TR_OK;
    if (!x) return TR_ERR_INVALID;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) x[r * ld + c] = value;
    return TR_OK;
}

tr_status tr_cpu_loss_mean(float *out, const float *losses, const int32_t *targets, int rows) {
    if (!out || rows < 0 || (rows && (!losses || !targets))) return TR_ERR_INVALID;
    *out = tr_masked_loss_mean(losses, targets, rows);
    return TR_OK;
}
