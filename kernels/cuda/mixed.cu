/* Casts between fp32 master copies and bf16/fp16 working copies, and the fp16 loss-scale check. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_mixed.h"
#include "kernels/cuda/mixed_kernels.cuh"

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

extern "C" tr_status tr_cuda_unscale_check(float *g, int64_t n, float inv_scale, float *found_inf) {
    if (n < 0 || !found_inf || (n && !g)) return TR_ERR_INVALID;
    if (!n) return TR_OK;
    TR_CUDA_CTX("unscale_check");
    unscale_check_kernel<<<tr_cuda_blocks(n, TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(
        g, n, inv_scale, found_inf);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}
