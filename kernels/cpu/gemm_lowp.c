/* Mixed-precision ops on the CPU: the half-precision GEMM emulated exactly (operands rounded to
 * bf16/fp16, then an fp32 sgemm, which is a tensor-core GEMM with fp32 accumulation up to the
 * summation order), rounding of a buffer in place, and the loss-scaling unscale-and-check. */
#include <stdbool.h>
#include <stdlib.h>

#include "kernels/common/lowp_bits.h"
#include "kernels/common/lowp_round.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threadpool.h"

/* An operand's stored rows as packed fp32 holding half-precision values: fp32 operands rounded
 * (in place too: round_lowp), half-precision bit patterns widened (exact, so the sgemm sees the
 * very values a rounded fp32 operand would give). */
typedef struct pack_ctx {
    float *dst;
    tr_gemm_operand src;
    int cols;
    tr_lowp dtype;
} pack_ctx;

static void pack_rows(void *vctx, int64_t r0, int64_t r1) {
    pack_ctx *c = vctx;
    const bool bf16 = c->dtype == TR_LOWP_BF16;
    for (int64_t r = r0; r < r1; r++) {
        float *d = c->dst + r * c->cols;
        if (c->src.lowp) {
            const uint16_t *s = (const uint16_t *)c->src.p + r * c->src.ld;
            for (int j = 0; j < c->cols; j++) d[j] = tr_lowp_value(bf16, s[j]);
            continue;
        }
        const float *s = (const float *)c->src.p + r * c->src.ld;
        if (bf16)
            for (int j = 0; j < c->cols; j++) d[j] = tr_round_bf16(s[j]);
        else
            for (int j = 0; j < c->cols; j++) d[j] = tr_round_f16(s[j]);
    }
}

/* The rows x cols block of an operand packed as above into a new buffer. */
static float *packed_copy(tr_lowp dtype, tr_gemm_operand op, int rows, int cols) {
    float *dst = malloc((size_t)rows * (size_t)cols * sizeof *dst);
    if (!dst) return NULL;
    pack_ctx c = {.dst = dst, .src = op, .cols = cols, .dtype = dtype};
    tr_cpu_parallel_for(rows, 64, pack_rows, &c);
    return dst;
}

static bool valid_lowp(tr_lowp dtype) {
    return dtype == TR_LOWP_BF16 || dtype == TR_LOWP_F16;
}

/* The fp32 GEMM on packed copies of both operands (k > 0, arguments checked). */
static tr_status packed_gemm(tr_lowp dtype, tr_transpose ta, tr_transpose tb, int m, int n, int k,
                             float alpha, tr_gemm_operand a, tr_gemm_operand b, float beta,
                             float *c, int ldc) {
    /* Stored shapes: A is m x k (or k x m when transposed), B is k x n (or n x k). */
    int a_rows = ta == TR_TRANS ? k : m, a_cols = ta == TR_TRANS ? m : k;
    int b_rows = tb == TR_TRANS ? n : k, b_cols = tb == TR_TRANS ? k : n;
    float *ra = packed_copy(dtype, a, a_rows, a_cols);
    float *rb = ra ? packed_copy(dtype, b, b_rows, b_cols) : NULL;
    tr_status s = TR_ERR_NOMEM;
    if (ra && rb) s = tr_cpu_gemm(ta, tb, m, n, k, alpha, ra, a_cols, rb, b_cols, beta, c, ldc);
    free(ra);
    free(rb);
    return s;
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
    return packed_gemm(dtype, ta, tb, m, n, k, alpha, (tr_gemm_operand){.p = a, .ld = lda},
                       (tr_gemm_operand){.p = b, .ld = ldb}, beta, c, ldc);
}

tr_status tr_cpu_gemm_lowp_ex(tr_lowp dtype, tr_transpose ta, tr_transpose tb, int m, int n, int k,
                              float alpha, tr_gemm_operand a, tr_gemm_operand b, float beta,
                              float *c, int ldc, const float *bias) {
    if (!valid_lowp(dtype)) return TR_ERR_INVALID;
    if (m < 0 || n < 0 || k < 0 || (bias && beta != 0.0f)) return TR_ERR_INVALID;
    if (m == 0 || n == 0) return TR_OK;
    if (!c || ldc < n || a.ld < (ta == TR_TRANS ? m : k) || b.ld < (tb == TR_TRANS ? k : n))
        return TR_ERR_INVALID;
    if (k == 0) {
        /* Nothing to round: the fp32 op clears or scales C (its operands are never read). */
        TR_TRY(tr_cpu_gemm(ta, tb, m, n, 0, alpha, NULL, m, NULL, n, beta, c, ldc));
    } else {
        if (!a.p || !b.p) return TR_ERR_INVALID;
        TR_TRY(packed_gemm(dtype, ta, tb, m, n, k, alpha, a, b, beta, c, ldc));
    }
    if (!bias) return TR_OK;
    /* The product first, then the bias, row by row as bias_add adds it, so a fused layer is
     * bitwise the GEMM followed by bias_add. */
    if (ldc == n) return tr_cpu_bias_add(c, bias, m, n);
    for (int r = 0; r < m; r++) TR_TRY(tr_cpu_bias_add(c + (int64_t)r * ldc, bias, 1, n));
    return TR_OK;
}

typedef struct cast_ctx {
    uint16_t *dst;
    const float *src;
    bool bf16;
} cast_ctx;

static void cast_blocks(void *vctx, int64_t b0, int64_t b1) {
    cast_ctx *c = vctx;
    for (int64_t i = b0 * 4096; i < b1 * 4096; i++) c->dst[i] = tr_lowp_bits(c->bf16, c->src[i]);
}

tr_status tr_cpu_cast_lowp(tr_lowp dtype, uint16_t *dst, const float *src, int64_t n) {
    if (!valid_lowp(dtype) || n < 0 || (n && (!dst || !src))) return TR_ERR_INVALID;
    const char *d = (const char *)dst, *s = (const char *)src;
    if (n && d < s + n * (int64_t)sizeof *src && s < d + n * (int64_t)sizeof *dst)
        return TR_ERR_INVALID;
    cast_ctx c = {.dst = dst, .src = src, .bf16 = dtype == TR_LOWP_BF16};
    int64_t full = n / 4096;
    if (full > 0) tr_cpu_parallel_for(full, 16, cast_blocks, &c);
    for (int64_t i = full * 4096; i < n; i++) dst[i] = tr_lowp_bits(c.bf16, src[i]);
    return TR_OK;
}

tr_status tr_cpu_round_lowp(tr_lowp dtype, float *x, int64_t n) {
    if (!valid_lowp(dtype) || n < 0 || (n && !x)) return TR_ERR_INVALID;
    /* One row of n elements would serialise; rows of 4096 let the pool share the work. */
    int64_t cols = n < 4096 ? n : 4096, full = cols ? n / cols : 0;
    if (full > 0) {
        pack_ctx c = {
            .dst = x, .src = {.p = x, .ld = (int)cols}, .cols = (int)cols, .dtype = dtype};
        tr_cpu_parallel_for(full, 16, pack_rows, &c);
    }
    int64_t done = full * cols;
    if (done < n) {
        pack_ctx c = {
            .dst = x + done, .src = {.p = x + done}, .cols = (int)(n - done), .dtype = dtype};
        pack_rows(&c, 0, 1);
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
