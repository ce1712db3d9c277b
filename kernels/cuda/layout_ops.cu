/* Strided copies and fills and the masked loss mean (kernels/cpu/layout_ops.c on device
 * pointers): the same element mapping, and the loss summed in double in row order by one
 * thread, so the mean is bitwise the CPU's. */
#include "kernels/common/loss_mean.h"
#include "kernels/cuda/cuda_impl.cuh"

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

__global__ void copy_2d_kernel(float *dst, int64_t ldd, const float *src, int64_t lds,
                               int64_t total, int64_t cols) {
    GRID_STRIDE(i, total) {
        int64_t r = i / cols, c = i % cols;
        dst[r * ldd + c] = src[r * lds + c];
    }
}

__global__ void fill_2d_kernel(float *x, int64_t ld, int64_t total, int64_t cols, float value) {
    GRID_STRIDE(i, total) {
        int64_t r = i / cols, c = i % cols;
        x[r * ld + c] = value;
    }
}

/* Rows are at most a microbatch's tokens: one thread keeps the CPU's summation order. */
__global__ void loss_mean_kernel(float *out, const float *losses, const int32_t *targets,
                                 int rows) {
    *out = tr_masked_loss_mean(losses, targets, rows);
}

static bool overlaps(const float *a, int64_t lda, const float *b, int64_t ldb, int64_t rows,
                     int64_t cols) {
    const char *ab = (const char *)a, *ae = (const char *)(a + (rows - 1) * lda + cols);
    const char *bb = (const char *)b, *be = (const char *)(b + (rows - 1) * ldb + cols);
    return ab < be && bb < ae;
}

tr_status tr_cuda_copy_2d(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                          int64_t cols) {
    if (rows < 0 || cols < 0 || ldd < cols || lds < cols) return TR_ERR_INVALID;
    if (!rows || !cols) return TR_OK;
    if (!dst || !src || overlaps(dst, ldd, src, lds, rows, cols)) return TR_ERR_INVALID;
    TR_CUDA_CTX("copy_2d");
    int64_t total = rows * cols;
    copy_2d_kernel<<<tr_cuda_blocks(total, TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(
        dst, ldd, src, lds, total, cols);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_fill_2d(float *x, int64_t ld, int64_t rows, int64_t cols, float value) {
    if (rows < 0 || cols < 0 || ld < cols) return TR_ERR_INVALID;
    if (!rows || !cols) return TR_OK;
    if (!x) return TR_ERR_INVALID;
    TR_CUDA_CTX("fill_2d");
    int64_t total = rows * cols;
    fill_2d_kernel<<<tr_cuda_blocks(total, TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(
        x, ld, total, cols, value);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_loss_mean(float *out, const float *losses, const int32_t *targets, int rows) {
    if (!out || rows < 0 || (rows && (!losses || !targets))) return TR_ERR_INVALID;
    TR_CUDA_CTX("loss_mean");
    loss_mean_kernel<<<1, 1, 0, ctx->stream>>>(out, losses, targets, rows);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}
