/* The op table's mixed-precision entries on the GPU: gemm_lowp casts the fp32 operands into
 * bf16/fp16 scratch (round to nearest even, fp16 overflowing to inf: __float2half_rn) and runs
 * the cuBLASLt GEMM with fp32 accumulation; round_lowp is the cast there and back. The CPU
 * backend (kernels/cpu/gemm_lowp.c) rounds the same way, so both compute the same products up
 * to the summation order. */
#include "kernels/cuda/cuda_impl.cuh"
#include "kernels/cuda/cuda_mixed.h"
#include "kernels/cuda/gemm_lowp_kernels.cuh"

template <typename T>
static tr_status pack_cast(tr_cuda_ctx *ctx, T *dst, const float *src, int rows, int cols, int ld) {
    pack_cast_kernel<T>
        <<<grid_2d(rows, cols), TR_CUDA_THREADS, 0, ctx->stream>>>(dst, src, rows, cols, ld);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

/* Bytes of n half-precision values, rounded up so the next operand starts 256-byte aligned. */
static size_t padded_bytes(int64_t n) {
    return ((size_t)n * 2u + 255u) & ~(size_t)255u;
}

extern "C" tr_status tr_cuda_gemm_lowp(tr_lowp dtype, tr_transpose ta, tr_transpose tb, int m,
                                       int n, int k, float alpha, const float *a, int lda,
                                       const float *b, int ldb, float beta, float *c, int ldc) {
    if (dtype != TR_LOWP_BF16 && dtype != TR_LOWP_F16) return TR_ERR_INVALID;
    if (m < 0 || n < 0 || k < 0) return TR_ERR_INVALID;
    /* Nothing to cast: the fp32 op has the same semantics (k == 0 scales or clears C). */
    if (m == 0 || n == 0 || k == 0)
        return tr_cuda_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (lda < (ta == TR_TRANS ? m : k) || ldb < (tb == TR_TRANS ? k : n) || ldc < n)
        return TR_ERR_INVALID;
    if (!a || !b || !c) return TR_ERR_INVALID;
    TR_CUDA_CTX("gemm_lowp");
    /* The stored operands: A is m x k (k x m transposed), B is k x n (n x k transposed). */
    int a_rows = ta == TR_TRANS ? k : m, a_cols = ta == TR_TRANS ? m : k;
    int b_rows = tb == TR_TRANS ? n : k, b_cols = tb == TR_TRANS ? k : n;
    size_t a_bytes = padded_bytes((int64_t)a_rows * a_cols);
    void *scratch = NULL;
    TR_TRY(tr_cuda_scratch(ctx, a_bytes + padded_bytes((int64_t)b_rows * b_cols), &scratch));
    uint16_t *ha = (uint16_t *)scratch, *hb = (uint16_t *)((char *)scratch + a_bytes);
    if (dtype == TR_LOWP_BF16) {
        TR_TRY(pack_cast(ctx, (__nv_bfloat16 *)ha, a, a_rows, a_cols, lda));
        TR_TRY(pack_cast(ctx, (__nv_bfloat16 *)hb, b, b_rows, b_cols, ldb));
        return tr_cuda_gemm_bf16(ta, tb, m, n, k, alpha, ha, a_cols, hb, b_cols, beta, c,
                                 TR_CUDA_F32, ldc, NULL);
    }
    TR_TRY(pack_cast(ctx, (__half *)ha, a, a_rows, a_cols, lda));
    TR_TRY(pack_cast(ctx, (__half *)hb, b, b_rows, b_cols, ldb));
    return tr_cuda_gemm_f16(ta, tb, m, n, k, alpha, ha, a_cols, hb, b_cols, beta, c, ldc);
}

static size_t operand_scratch(tr_gemm_operand op, int rows, int cols) {
    return op.lowp ? 0 : padded_bytes((int64_t)rows * cols);
}

/* The operand as cuBLASLt takes it: a half-precision operand as it is, an fp32 one cast into
 * its scratch (packed, leading dimension cols). */
static tr_status operand_half(tr_cuda_ctx *ctx, tr_lowp dtype, tr_gemm_operand op, int rows,
                              int cols, uint16_t *scratch, const uint16_t **h, int *ld) {
    if (op.lowp) {
        *h = (const uint16_t *)op.p;
        *ld = op.ld;
        return TR_OK;
    }
    if (dtype == TR_LOWP_BF16)
        TR_TRY(pack_cast(ctx, (__nv_bfloat16 *)scratch, (const float *)op.p, rows, cols, op.ld));
    else
        TR_TRY(pack_cast(ctx, (__half *)scratch, (const float *)op.p, rows, cols, op.ld));
    *h = scratch;
    *ld = cols;
    return TR_OK;
}

extern "C" tr_status tr_cuda_gemm_lowp_ex(tr_lowp dtype, tr_transpose ta, tr_transpose tb, int m,
                                          int n, int k, float alpha, tr_gemm_operand a,
                                          tr_gemm_operand b, float beta, float *c, int ldc,
                                          const float *bias) {
    if (dtype != TR_LOWP_BF16 && dtype != TR_LOWP_F16) return TR_ERR_INVALID;
    if (m < 0 || n < 0 || k < 0 || (bias && beta != 0.0f)) return TR_ERR_INVALID;
    if (m == 0 || n == 0) return TR_OK;
    if (!c || ldc < n || a.ld < (ta == TR_TRANS ? m : k) || b.ld < (tb == TR_TRANS ? k : n))
        return TR_ERR_INVALID;
    if (k > 0 && (!a.p || !b.p)) return TR_ERR_INVALID;
    TR_CUDA_CTX("gemm_lowp_ex");
    if (k == 0) {
        /* The fp32 op clears or scales C without reading the operands; the bias follows. */
        TR_TRY(tr_cuda_gemm(ta, tb, m, n, 0, alpha, NULL, m > 1 ? m : 1, NULL, n, beta, c, ldc));
    } else {
        int a_rows = ta == TR_TRANS ? k : m, a_cols = ta == TR_TRANS ? m : k;
        int b_rows = tb == TR_TRANS ? n : k, b_cols = tb == TR_TRANS ? k : n;
        size_t a_bytes = operand_scratch(a, a_rows, a_cols);
        size_t bytes = a_bytes + operand_scratch(b, b_rows, b_cols);
        void *scratch = NULL;
        if (bytes) TR_TRY(tr_cuda_scratch(ctx, bytes, &scratch));
        const uint16_t *ha = NULL, *hb = NULL;
        int lda = 0, ldb = 0;
        TR_TRY(operand_half(ctx, dtype, a, a_rows, a_cols, (uint16_t *)scratch, &ha, &lda));
        TR_TRY(operand_half(ctx, dtype, b, b_rows, b_cols, (uint16_t *)((char *)scratch + a_bytes),
                            &hb, &ldb));
        /* bf16: cuBLASLt's BIAS epilogue adds the bias to the fp32 product (its own fallback
         * adds it after the GEMM when no fused kernel fits). */
        if (dtype == TR_LOWP_BF16)
            return tr_cuda_gemm_bf16(ta, tb, m, n, k, alpha, ha, lda, hb, ldb, beta, c, TR_CUDA_F32,
                                     ldc, bias);
        TR_TRY(tr_cuda_gemm_f16(ta, tb, m, n, k, alpha, ha, lda, hb, ldb, beta, c, ldc));
    }
    if (!bias) return TR_OK;
    bias_rows_2d_kernel<<<grid_2d(m, n), TR_CUDA_THREADS, 0, ctx->stream>>>(c, bias, m, n, ldc);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

extern "C" tr_status tr_cuda_cast_lowp(tr_lowp dtype, uint16_t *dst, const float *src, int64_t n) {
    if (dtype == TR_LOWP_BF16) return tr_cuda_f32_to_bf16(dst, src, n);
    if (dtype == TR_LOWP_F16) return tr_cuda_f32_to_f16(dst, src, n);
    return TR_ERR_INVALID;
}

extern "C" tr_status tr_cuda_round_lowp(tr_lowp dtype, float *x, int64_t n) {
    if ((dtype != TR_LOWP_BF16 && dtype != TR_LOWP_F16) || n < 0 || (n && !x))
        return TR_ERR_INVALID;
    if (!n) return TR_OK;
    TR_CUDA_CTX("round_lowp");
    unsigned blocks = tr_cuda_blocks(n, TR_CUDA_THREADS);
    if (dtype == TR_LOWP_BF16)
        round_trip_kernel<__nv_bfloat16><<<blocks, TR_CUDA_THREADS, 0, ctx->stream>>>(x, n);
    else
        round_trip_kernel<__half><<<blocks, TR_CUDA_THREADS, 0, ctx->stream>>>(x, n);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}
