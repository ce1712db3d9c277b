/* Casts between fp32 master copies and bf16/fp16 working copies, and the fp16 loss-scale check. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_mixed.h"

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

/* Overlap would let one thread read an element another already overwrote. */
static bool overlaps(const void *a, size_t abytes, const void *b, size_t bbytes) {
    const char *pa = (const char *)a, *pb = (const char *)b;
    return pa < pb + bbytes && pb < pa + abytes;
}

template <typename Dst, typename Src>
static tr_status cast(const char *name, Dst *dst, const Src *src, int64_t n) {
    if (n < 0 || (n && (!dst || !src))) return TR_ERR_INVALID;
    if (!n) return TR_OK;
    if (overlaps(dst, (size_t)n * sizeof(Dst), src, (size_t)n * sizeof(Src))) return TR_ERR_INVALID;
    TR_CUDA_CTX(name);
    cast_kernel<Dst, Src>
        <<<tr_cuda_blocks(n, TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(dst, src, n);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

extern "C" tr_status tr_cuda_f32_to_bf16(uint16_t *dst, const float *src, int64_t n) {
    return cast("f32_to_bf16", (__nv_bfloat16 *)dst, src, n);
}
extern "C" tr_status tr_cuda_bf16_to_f32(float *dst, const uint16_t *src, int64_t n) {
    return cast("bf16_to_f32", dst, (const __nv_bfloat16 *)src, n);
}
extern "C" tr_status tr_cuda_f32_to_f16(uint16_t *dst, const float *src, int64_t n) {
    return cast("f32_to_f16", (__half *)dst, src, n);
}
extern "C" tr_status tr_cuda_f16_to_f32(float *dst, const uint16_t *src, int64_t n) {
    return cast("f16_to_f32", dst, (const __half *)src, n);
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

extern "C" tr_status tr_cuda_unscale_check(float *g, int64_t n, float inv_scale, float *found_inf) {
    if (n < 0 || !found_inf || (n && !g)) return TR_ERR_INVALID;
    if (!n) return TR_OK;
    TR_CUDA_CTX("unscale_check");
    unscale_check_kernel<<<tr_cuda_blocks(n, TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(
        g, n, inv_scale, found_inf);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}
