/* LayerNorm / RMSNorm over the last dim, one block per row. As on the CPU, row statistics and
 * the backward row sums are accumulated in double and the per-element maths is the CPU's float
 * expression; dw / db use the deterministic column sums. */
#include "kernels/cuda/cuda_impl.cuh"
#include "kernels/cuda/norm_kernels.cuh"

tr_status tr_cuda_colsum(tr_cuda_ctx *ctx, float *sum_xhat, float *sum_dy, const float *dy,
                         const float *x, const float *mean, const float *rstd, int rows, int cols) {
    if (!sum_xhat && !sum_dy) return TR_OK;
    if (rows == 0 || cols == 0) return TR_OK;
    int chunk = colsum_chunk(rows);
    int chunks = (rows + chunk - 1) / chunk;
    size_t n = (size_t)chunks * cols;
    void *scratch;
    TR_TRY(tr_cuda_scratch(ctx, 2 * n * sizeof(double), &scratch));
    double *pa = sum_xhat ? (double *)scratch : NULL, *pb = sum_dy ? (double *)scratch + n : NULL;
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)chunks), block(32, COLSUM_ROWS);
    colsum_partial_kernel<<<grid, block, 0, ctx->stream>>>(pa, pb, dy, x, mean, rstd, rows, cols,
                                                           chunk);
    TR_CUDA_LAUNCHED();
    colsum_final_kernel<<<(unsigned)((cols + 255) / 256), 256, 0, ctx->stream>>>(
        sum_xhat, sum_dy, pa, pb, chunks, cols);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

static tr_status check_shape(int rows, int dim) {
    /* gridDim.x limit; rows of one launch are blocks */
    return rows < 0 || dim <= 0 ? TR_ERR_INVALID : TR_OK;
}

tr_status tr_cuda_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w,
                                const float *b, int rows, int dim, float eps, int zero_centered) {
    TR_TRY(check_shape(rows, dim));
    if (rows && (!y || !mean || !rstd || !x || !w)) return TR_ERR_INVALID;
    if (!rows) return TR_OK;
    TR_CUDA_CTX("layernorm_fwd");
    norm_fwd_kernel<false><<<(unsigned)rows, NORM_THREADS, 0, ctx->stream>>>(
        y, mean, rstd, x, w, b, dim, eps, zero_centered ? 1.0f : 0.0f);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                                const float *w, const float *mean, const float *rstd, int rows,
                                int dim, int zero_centered) {
    TR_TRY(check_shape(rows, dim));
    if (rows && (!dx || !dy || !x || !w || !mean || !rstd)) return TR_ERR_INVALID;
    if (!rows) return TR_OK;
    TR_CUDA_CTX("layernorm_bwd");
    norm_bwd_kernel<false><<<(unsigned)rows, NORM_THREADS, 0, ctx->stream>>>(
        dx, dy, x, w, mean, rstd, dim, zero_centered ? 1.0f : 0.0f);
    TR_CUDA_LAUNCHED();
    return tr_cuda_colsum(ctx, dw, db, dy, x, mean, rstd, rows, dim);
}

tr_status tr_cuda_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int rows,
                              int dim, float eps, int zero_centered) {
    TR_TRY(check_shape(rows, dim));
    if (rows && (!y || !rstd || !x || !w)) return TR_ERR_INVALID;
    if (!rows) return TR_OK;
    TR_CUDA_CTX("rmsnorm_fwd");
    norm_fwd_kernel<true><<<(unsigned)rows, NORM_THREADS, 0, ctx->stream>>>(
        y, NULL, rstd, x, w, NULL, dim, eps, zero_centered ? 1.0f : 0.0f);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                              const float *rstd, int rows, int dim, int zero_centered) {
    TR_TRY(check_shape(rows, dim));
    if (rows && (!dx || !dy || !x || !w || !rstd)) return TR_ERR_INVALID;
    if (!rows) return TR_OK;
    TR_CUDA_CTX("rmsnorm_bwd");
    norm_bwd_kernel<true><<<(unsigned)rows, NORM_THREADS, 0, ctx->stream>>>(
        dx, dy, x, w, NULL, rstd, dim, zero_centered ? 1.0f : 0.0f);
    TR_CUDA_LAUNCHED();
    return tr_cuda_colsum(ctx, dw, NULL, dy, x, NULL, rstd, rows, dim);
}
