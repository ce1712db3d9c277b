/* Mixed-precision ops on the CPU: the half-precision GEMM emulated exactly (operands rounded to
 * bf16/fp16, then an fp32 sgemm, which is a tensor-core GEMM with fp32 accumulation up to the
 * summation order), rounding of a buffer in place, and the loss-scaling unscale-and-check. */
#include <stdbool.h>
#include <stdlib.h>

#include "kernels/common/lowp_round.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threadpool.h"

typedef struct round_ctx {
    float *dst;
    const float *src;
    int cols, ld_src;
    tr_lowp dtype;
} round_ctx;

static void round_rows(void *vctx, int64_t r0, int64_t r1) {
    round_ctx *c = vctx;
    for (int64_t r = r0; r < r1; r++) {
        const float *s = c->src + r * c->ld_src;
        float *d = c->dst + r * c->cols;
        if (c->dtype == TR_LOWP_BF16)
            for (int j = 0; j < c->cols; j++) d[j] = tr_round_bf16(s[j]);
        else
            for (int j = 0; j < c->cols; j++) d[j] = tr_round_f16(s[j]);
    }
}

/* The rows x cols block of src (leading dimension ld) rounded into a packed buffer. */
static float *rounded_copy(tr_lowp dtype, const float *src, int rows, int cols, int ld) {
    float *dst = malloc((size_t)rows * (size_t)cols * sizeof *dst);
    if (!dst) return NULL;
    round_ctx c = {.dst = dst, .src = src, .cols = cols, .ld_src = ld, .dtype = dtype};
    tr_cpu_parallel_for(rows, 64, round_rows, &c);
    return dst;
}

static bool valid_lowp(tr_lowp dtype) {
    return dtype == TR_LOWP_BF16 || dtype == TR_LOWP_F16;
}

tr_status tr_cpu_gemm_lowp(tr_lowp dtype, tr_transpose ta, tr_transpose tb, int m, int n, int k,
                           float alpha, const float *a, int lda, const float *b, int ldb,
                           float beta, float *c, int ldc) {
    if (!valid_lowp(dtype)) return TR_ERR_INVALID;
    if (m < 0 || n < 0 || k < 0) return TR_ERR_INVALID;
    if (m == 0 || n == 0 || k == 0)
        return tr_cpu_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (lda < (ta == TR_TRANS ? m : k) || ldb < (tb == TR_TRANS ? k : n) || ldc < n)
        return TR_ERR_INVALID;
    if (!a || !b || !c) return TR_ERR_INVALID;
    /* Stored shapes: A is m x k (or k x m when transposed), B is k x n (or n x k). */
    int a_rows = ta == TR_TRANS ? k : m, a_cols = ta == TR_TRANS ? m : k;
    int b_rows = tb == TR_TRANS ? n : k, b_cols = tb == TR_TRANS ? k : n;
    float *ra = rounded_copy(dtype, a, a_rows, a_cols, lda);
    float *rb = ra ? rounded_copy(dtype, b, b_rows, b_cols, ldb) : NULL;
    tr_status s = TR_ERR_NOMEM;
    if (ra && rb) s = tr_cpu_gemm(ta, tb, m, n, k, alpha, ra, a_cols, rb, b_cols, beta, c, ldc);
    free(ra);
    free(rb);
    return s;
}

tr_status tr_cpu_round_lowp(tr_lowp dtype, float *x, int64_t n) {
    if (!valid_lowp(dtype) || n < 0 || (n && !x)) return TR_ERR_INVALID;
    /* One row of n elements would serialise; rows of 4096 let the pool share the work. */
    int64_t cols = n < 4096 ? n : 4096, full = cols ? n / cols : 0;
    if (full > 0) {
        round_ctx c = {.dst = x, .src = x, .cols = (int)cols, .ld_src = (int)cols, .dtype = dtype};
        tr_cpu_parallel_for(full, 16, round_rows, &c);
    }
    int64_t done = full * cols;
    if (done < n) {
        round_ctx c = {
            .dst = x + done, .src = x + done, .cols = (int)(n - done), .ld_src = 0, .dtype = dtype};
        round_rows(&c, 0, 1);
    }
    return TR_OK;
}

tr_status tr_cpu_unscale_check(float *g, int64_t n, float inv_scale, float *found_inf) {
    if (n < 0 || !found_inf || (n && !g)) return TR_ERR_INVALID;
    bool bad = false;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(g[i])) bad = true;
        g[i] *= inv_scale;
    }
    if (bad) *found_inf = 1.0f;
    return TR_OK;
}
