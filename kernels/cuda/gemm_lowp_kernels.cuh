/* Internal: the cast and bias kernels of gemm_lowp.cu (which explains them) and their grid, in a
 * header so that host C++ compiles them too (tests/emu). */
#ifndef TR_CUDA_GEMM_LOWP_KERNELS_CUH
#define TR_CUDA_GEMM_LOWP_KERNELS_CUH

#include "kernels/cuda/cuda_common.cuh"

template <typename T> __device__ __forceinline__ T to_half(float x);
template <> __device__ __forceinline__ __nv_bfloat16 to_half(float x) {
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half to_half(float x) {
    return __float2half_rn(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
    return __bfloat162float(x);
}
__device__ __forceinline__ float to_float(__half x) {
    return __half2float(x);
}

/* rows x cols of src (leading dimension ld) into a packed dst (leading dimension cols). Rows run
 * along the grid's y dimension and columns along x, so no thread divides its flat index by the
 * row length (a 64-bit division per element would cost more than the cast). */
template <typename T>
__global__ void pack_cast_kernel(T *dst, const float *src, int rows, int cols, int64_t ld) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const float *s = src + r * ld;
        T *d = dst + r * cols;
        for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < cols; j += stride)
            d[j] = to_half<T>(s[j]);
    }
}

/* C[r, j] += bias[j] over rows x cols with leading dimension ldc, the same 2-D walk. */
__global__ void bias_rows_2d_kernel(float *c, const float *bias, int rows, int cols, int64_t ldc) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        float *cr = c + r * ldc;
        for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < cols; j += stride)
            cr[j] += bias[j];
    }
}

/* x covers a row (at most 65535 blocks, a grid-stride loop beyond), y the rows (the same cap). */
static dim3 grid_2d(int rows, int cols) {
    int64_t bx = ((int64_t)cols + TR_CUDA_THREADS - 1) / TR_CUDA_THREADS;
    return dim3((unsigned)(bx < 1       ? 1
                           : bx > 65535 ? 65535
                                        : bx),
                (unsigned)(rows < 1       ? 1
                           : rows > 65535 ? 65535
                                          : rows));
}

template <typename T> __global__ void round_trip_kernel(float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = to_float(to_half<T>(x[i]));
}

#endif
