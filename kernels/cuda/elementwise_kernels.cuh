/* Internal: the element-wise, sum-of-squares, activation, dropout and embedding kernels of
 * elementwise.cu (which explains them), in a header so that host C++ compiles them too
 * (tests/emu). */
#ifndef TR_CUDA_ELEMENTWISE_KERNELS_CUH
#define TR_CUDA_ELEMENTWISE_KERNELS_CUH

#include "kernels/common/activations.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/cuda_common.cuh"

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

__global__ void add_kernel(float *y, const float *x, int64_t n) {
    GRID_STRIDE(i, n) y[i] += x[i];
}

__global__ void fill_kernel(float *y, int64_t n, float v) {
    GRID_STRIDE(i, n) y[i] = v;
}

__global__ void scale_kernel(float *y, int64_t n, float s) {
    GRID_STRIDE(i, n) y[i] *= s;
}

/* The CPU's fixed 4096-element blocks, each summed in double; then the block sums in a fixed
 * order. The result does not depend on the grid, like the CPU's on the thread count. */
#define SSQ_BLOCK 4096

__global__ void ssq_blocks_kernel(double *partial, const float *x, int64_t n) {
    int64_t i0 = (int64_t)blockIdx.x * SSQ_BLOCK, i1 = min(n, i0 + SSQ_BLOCK);
    double s = 0.0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) s += (double)x[i] * x[i];
    s = tr_block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void ssq_final_kernel(float *out, const double *partial, int64_t nb) {
    double s = 0.0;
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) s += partial[b];
    s = tr_block_sum(s);
    if (threadIdx.x == 0) *out = (float)s;
}

/* Row and column reductions (DoRA): one block per row, its threads' double partial sums
 * combined by tr_block_sum; one thread per column, rows in order (adjacent threads read
 * adjacent columns). */
__global__ void row_ssq_kernel(float *out, const float *x, int cols) {
    const float *row = x + (int64_t)blockIdx.x * cols;
    double s = 0.0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) s += (double)row[j] * row[j];
    s = tr_block_sum(s);
    if (threadIdx.x == 0) out[blockIdx.x] = (float)s;
}

__global__ void col_scale_kernel(float *y, const float *s, int64_t n, int cols) {
    GRID_STRIDE(i, n) y[i] *= s[i % cols];
}

__global__ void col_dot_kernel(float *out, const float *a, const float *b, const float *s, int rows,
                               int cols) {
    GRID_STRIDE(j, cols) {
        double acc = 0.0;
        for (int64_t r = 0; r < rows; r++) acc += (double)a[r * cols + j] * b[r * cols + j];
        out[j] += s[j] * (float)acc;
    }
}

__global__ void norm_scale_kernel(float *scale, float *inv, const float *mag, const float *sq,
                                  int64_t n) {
    GRID_STRIDE(i, n) {
        inv[i] = 1.0f / sqrtf(sq[i]);
        scale[i] = mag[i] * inv[i];
    }
}

__global__ void gelu_fwd_kernel(float *y, const float *x, int64_t n, int tanh_approx) {
    GRID_STRIDE(i, n) y[i] = tanh_approx ? tr_gelu_tanh(x[i]) : tr_gelu_erf(x[i]);
}

__global__ void gelu_bwd_kernel(float *dx, const float *dy, const float *x, int64_t n,
                                int tanh_approx) {
    GRID_STRIDE(i, n)
    dx[i] = dy[i] * (tanh_approx ? tr_gelu_tanh_grad(x[i]) : tr_gelu_erf_grad(x[i]));
}

__global__ void swiglu_fwd_kernel(float *y, const float *x, int64_t total, int ffn) {
    GRID_STRIDE(i, total) {
        int64_t r = i / ffn, j = i % ffn;
        const float *gate = x + r * 2 * ffn;
        y[i] = tr_silu(gate[j]) * gate[ffn + j];
    }
}

__global__ void swiglu_bwd_kernel(float *dx, const float *dy, const float *x, int64_t total,
                                  int ffn) {
    GRID_STRIDE(i, total) {
        int64_t r = i / ffn, j = i % ffn;
        const float *gate = x + r * 2 * ffn;
        float g = gate[j], u = gate[ffn + j], d = dy[i];
        dx[r * 2 * ffn + j] = d * u * tr_silu_grad(g);
        dx[r * 2 * ffn + ffn + j] = d * tr_silu(g);
    }
}

/* Element i keeps iff the Philox uniform of global index offset + i is >= p: the CPU's mapping,
 * so a mask made on one backend is the mask of the other. */
__global__ void dropout_kernel(float *y, const float *x, int64_t n, float p, uint64_t seed,
                               uint64_t offset) {
    float keep_scale = 1.0f / (1.0f - p);
    GRID_STRIDE(i, n) {
        float u = tr_philox_uniform(seed, offset + (uint64_t)i);
        y[i] = u >= p ? x[i] * keep_scale : 0.0f;
    }
}

__global__ void emb_fwd_kernel(float *out, const int32_t *ids, const float *table, int64_t total,
                               int dim, int start, int end) {
    GRID_STRIDE(i, total) {
        int64_t r = i / dim, j = i % dim;
        int32_t id = ids[r];
        out[i] = id >= start && id < end ? table[(int64_t)(id - start) * dim + j] : 0.0f;
    }
}

/* One thread per column walks the tokens in order, as the CPU's column stripes do: repeated ids
 * never race and the float sums happen in the same order (bitwise equal to the CPU). */
__global__ void emb_bwd_kernel(float *dtable, const int32_t *ids, const float *dout, int n, int dim,
                               int start, int end) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= dim) return;
    for (int r = 0; r < n; r++) {
        int32_t id = ids[r];
        if (id < start || id >= end) continue;
        dtable[(int64_t)(id - start) * dim + j] += dout[(int64_t)r * dim + j];
    }
}

__global__ void pos_fwd_kernel(float *x, const float *wpe, int64_t total, int seq, int dim,
                               int pos) {
    GRID_STRIDE(i, total) {
        int64_t r = i / dim, j = i % dim;
        int t = (int)(r % seq);
        x[i] += wpe[(int64_t)(pos + t) * dim + j];
    }
}

/* Thread per (t, j), batch rows added in order into the destination, as on the CPU. */
__global__ void pos_bwd_kernel(float *dwpe, const float *dx, int batch, int64_t total, int seq,
                               int dim, int pos) {
    GRID_STRIDE(i, total) {
        int64_t t = i / dim, j = i % dim;
        float *d = dwpe + (pos + t) * dim + j;
        for (int b = 0; b < batch; b++) *d += dx[((int64_t)b * seq + t) * dim + j];
    }
}

#endif
