/* GEMM and bias: the linear layer's three products all map onto one row-major sgemm. */
#include <cblas.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threadpool.h"

tr_status tr_cpu_gemm(tr_transpose ta, tr_transpose tb, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc) {
    if (m < 0 || n < 0 || k < 0) return TR_ERR_INVALID;
    if (m == 0 || n == 0) return TR_OK;
    /* Row-major: op(A) is m x k, so A itself is m x k (lda >= k) or k x m (lda >= m). */
    if (lda < (ta == TR_TRANS ? m : k) || ldb < (tb == TR_TRANS ? k : n) || ldc < n)
        return TR_ERR_INVALID;
    if (!c || (k > 0 && (!a || !b))) return TR_ERR_INVALID;
    if (k == 0) { /* BLAS semantics: beta == 0 overwrites C, even NaN */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(int64_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(int64_t)i * ldc + j];
        return TR_OK;
    }
    cblas_sgemm(CblasRowMajor, ta == TR_TRANS ? CblasTrans : CblasNoTrans,
                tb == TR_TRANS ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                ldc);
    return TR_OK;
}

typedef struct bias_ctx {
    float *y;
    const float *bias;
    const float *dy;
    int rows, cols;
} bias_ctx;

static void bias_add_rows(void *vctx, int64_t r0, int64_t r1) {
    bias_ctx *c = vctx;
    for (int64_t r = r0; r < r1; r++) {
        float *yr = c->y + r * c->cols;
        for (int j = 0; j < c->cols; j++) yr[j] += c->bias[j];
    }
}

tr_status tr_cpu_bias_add(float *y, const float *bias, int rows, int cols) {
    if (rows < 0 || cols < 0 || (rows && cols && (!y || !bias))) return TR_ERR_INVALID;
    bias_ctx c = {.y = y, .bias = bias, .rows = rows, .cols = cols};
    tr_cpu_parallel_for(rows, 16, bias_add_rows, &c);
    return TR_OK;
}

/* Split over columns rather than rows: each column's sum is owned by one task, which keeps the
 * result deterministic without per-thread partial buffers. */
static void bias_grad_cols(void *vctx, int64_t j0, int64_t j1) {
    bias_ctx *c = vctx;
    for (int64_t j = j0; j < j1; j++) {
        double s = 0.0;
        for (int r = 0; r < c->rows; r++) s += c->dy[(int64_t)r * c->cols + j];
        c->y[j] += (float)s;
    }
}

tr_status tr_cpu_bias_grad(float *dbias, const float *dy, int rows, int cols) {
    if (rows < 0 || cols < 0 || (rows && cols && (!dbias || !dy))) return TR_ERR_INVALID;
    bias_ctx c = {.y = dbias, .dy = dy, .rows = rows, .cols = cols};
    tr_cpu_parallel_for(cols, 8, bias_grad_cols, &c);
    return TR_OK;
}
