/* LayerNorm / RMSNorm over the last dim, one block per row. As on the CPU, row statistics and
 * the backward row sums are accumulated in double and the per-element maths is the CPU's float
 * expression; dw / db use the deterministic column sums. */
#include "kernels/cuda/cuda_impl.cuh"

#define NORM_THREADS 256
#define COLSUM_CHUNK 256 /* rows per partial (at least); partials are summed in chunk order */
#define COLSUM_ROWS  8   /* threadIdx.y extent */

template <bool RMS>
__global__ void norm_fwd_kernel(float *y, float *mean, float *rstd, const float *x, const float *w,
                                const float *b, int dim, float eps, float gshift) {
    int64_t row = blockIdx.x;
    const float *xr = x + row * dim;
    float *yr = y + row * dim;
    double mu = 0.0;
    if (!RMS) {
        double s = 0.0;
        for (int j = threadIdx.x; j < dim; j += blockDim.x) s += xr[j];
        mu = tr_block_sum(s) / dim;
    }
    double v = 0.0;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) v += (xr[j] - mu) * (xr[j] - mu);
    v = tr_block_sum(v) / dim;
    float rs = (float)(1.0 / sqrt(v + (double)eps)), m = (float)mu;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) {
        float o = (xr[j] - m) * rs * (w[j] + gshift);
        yr[j] = b ? o + b[j] : o;
    }
    if (threadIdx.x == 0) {
        if (mean) mean[row] = m;
        rstd[row] = rs;
    }
}

/* dx += rstd * (g*dy - mean(g*dy) - xhat * mean(g*dy*xhat)); RMSNorm has no mean(g*dy) term. */
template <bool RMS>
__global__ void norm_bwd_kernel(float *dx, const float *dy, const float *x, const float *w,
                                const float *mean, const float *rstd, int dim, float gshift) {
    int64_t row = blockIdx.x;
    const float *xr = x + row * dim, *dyr = dy + row * dim;
    float *dxr = dx + row * dim;
    float m = RMS ? 0.0f : mean[row], rs = rstd[row];
    double a = 0.0, bs = 0.0;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) {
        float g = dyr[j] * (w[j] + gshift);
        a += g;
        bs += (double)g * ((xr[j] - m) * rs);
    }
    a = tr_block_sum(a);
    bs = tr_block_sum(bs);
    float ma = RMS ? 0.0f : (float)(a / dim), mb = (float)(bs / dim);
    for (int j = threadIdx.x; j < dim; j += blockDim.x) {
        float xhat = (xr[j] - m) * rs;
        dxr[j] += rs * (dyr[j] * (w[j] + gshift) - ma - xhat * mb);
    }
}

__global__ void colsum_partial_kernel(double *pa, double *pb, const float *dy, const float *x,
                                      const float *mean, const float *rstd, int rows, int cols,
                                      int chunk) {
    __shared__ double sa_s[COLSUM_ROWS][32], sb_s[COLSUM_ROWS][32];
    int j = blockIdx.x * 32 + threadIdx.x, c = blockIdx.y;
    int r0 = c * chunk, r1 = min(rows, r0 + chunk);
    double sa = 0.0, sb = 0.0;
    if (j < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += COLSUM_ROWS) {
            int64_t i = (int64_t)r * cols + j;
            float d = dy[i];
            sb += d;
            if (pa) {
                float xh = x ? (x[i] - (mean ? mean[r] : 0.0f)) * rstd[r] : 1.0f;
                sa += (double)d * xh;
            }
        }
    sa_s[threadIdx.y][threadIdx.x] = sa;
    sb_s[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
        for (int t = 1; t < COLSUM_ROWS; t++)
            sa += sa_s[t][threadIdx.x], sb += sb_s[t][threadIdx.x];
        if (pa) pa[(int64_t)c * cols + j] = sa;
        if (pb) pb[(int64_t)c * cols + j] = sb;
    }
}

__global__ void colsum_final_kernel(float *da, float *db, const double *pa, const double *pb,
                                    int chunks, int cols) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    double sa = 0.0, sb = 0.0;
    for (int c = 0; c < chunks; c++) {
        if (pa) sa += pa[(int64_t)c * cols + j];
        if (pb) sb += pb[(int64_t)c * cols + j];
    }
    if (da) da[j] += (float)sa;
    if (db) db[j] += (float)sb;
}

tr_status tr_cuda_colsum(tr_cuda_ctx *ctx, float *sum_xhat, float *sum_dy, const float *dy,
                         const float *x, const float *mean, const float *rstd, int rows, int cols) {
    if (!sum_xhat && !sum_dy) return TR_OK;
    if (rows == 0 || cols == 0) return TR_OK;
    /* grid.y holds the chunks: past 65535 of them, make each chunk longer */
    int chunk = COLSUM_CHUNK;
    if ((rows + chunk - 1) / chunk > 65535) chunk = (rows + 65534) / 65535;
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
