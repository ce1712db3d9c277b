/* Internal: the normalisation and column-sum kernels of norm.cu (which explains them), in a
 * header so that host C++ compiles them too (tests/emu). */
#ifndef TR_CUDA_NORM_KERNELS_CUH
#define TR_CUDA_NORM_KERNELS_CUH

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/smem.cuh"

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
    TR_STATIC_SMEM(double, sa_s, [COLSUM_ROWS][32]);
    TR_STATIC_SMEM(double, sb_s, [COLSUM_ROWS][32]);
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

/* Rows per column-sum chunk: grid.y holds the chunks, so past 65535 of them each gets longer. */
static inline int colsum_chunk(int rows) {
    int chunk = COLSUM_CHUNK;
    if ((rows + chunk - 1) / chunk > 65535) chunk = (rows + 65534) / 65535;
    return chunk;
}

#endif
