/* Internal: the cast and loss-scale kernels of mixed.cu, in a header so that host C++ compiles
 * them too (tests/emu). */
#ifndef TR_CUDA_MIXED_KERNELS_CUH
#define TR_CUDA_MIXED_KERNELS_CUH

#include "kernels/cuda/cuda_common.cuh"

template <typename Dst, typename Src> __device__ __forceinline__ Dst convert(Src x);
template <> __device__ __forceinline__ __nv_bfloat16 convert(float x) {
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ float convert(__nv_bfloat16 x) {
    return __bfloat162float(x);
}
template <> __device__ __forceinline__ __half convert(float x) {
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ float convert(__half x) {
    return __half2float(x);
}

template <typename Dst, typename Src>
__global__ void cast_kernel(Dst *dst, const Src *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = convert<Dst, Src>(src[i]);
}

/* Only a flag write when something is non-finite: a benign race, every writer stores 1. */
__global__ void unscale_check_kernel(float *g, int64_t n, float inv_scale, float *found_inf) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float x = g[i];
        if (!isfinite(x)) *found_inf = 1.0f;
        g[i] = x * inv_scale;
    }
}

#endif
