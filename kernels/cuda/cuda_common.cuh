/* Internal to kernels/cuda: the context behind the bound thread, error-checking macros that turn
 * CUDA/cuBLAS failures into tr_status (never exit), launch geometry and warp/block reductions. */
#ifndef TR_CUDA_COMMON_CUH
#define TR_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

extern "C" {
#include "core/log.h"
}
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/smem.cuh"

struct tr_cuda_ctx {
    cudaStream_t stream;
    int owns_stream;
    cublasLtHandle_t lt;
    void *lt_workspace; /* cuBLASLt split-K / stream-K scratch */
    size_t lt_workspace_size;
    void *scratch; /* per-op temporaries (reduction partials, flags); grows, never shrinks */
    size_t scratch_size;
    int scratch_pooled; /* from cudaMallocAsync (else cudaMalloc: no memory pools on the GPU) */
    int *host_flag;     /* pinned: device-side validation results read back by a few ops */
    int check_only;     /* tr_cuda_ctx_create_check_only: ops stop after their argument checks */
};

#define TR_CUDA_LT_WORKSPACE (32u << 20)

tr_status tr_cuda_status_of(cudaError_t e, const char *what, const char *file, int line);
tr_status tr_cublas_status_of(cublasStatus_t s, const char *what, const char *file, int line);

/* Any CUDA runtime call: on failure logs the call, the CUDA error name and the place. */
#define TR_CUDA_TRY(call)                                                                          \
    do {                                                                                           \
        cudaError_t tr_cuda_e_ = (call);                                                           \
        if (tr_cuda_e_ != cudaSuccess)                                                             \
            return tr_cuda_status_of(tr_cuda_e_, #call, __FILE__, __LINE__);                       \
    } while (0)

#define TR_CUBLAS_TRY(call)                                                                        \
    do {                                                                                           \
        cublasStatus_t tr_cublas_s_ = (call);                                                      \
        if (tr_cublas_s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            return tr_cublas_status_of(tr_cublas_s_, #call, __FILE__, __LINE__);                   \
    } while (0)

/* After a <<<...>>> launch: configuration errors show up here, faults only at a later sync. */
#define TR_CUDA_LAUNCHED() TR_CUDA_TRY(cudaGetLastError())

/* The context bound to this thread; NULL (and an error logged) when none is. Every op names it
 * after its argument checks and before any device work, which a check-only context skips. */
tr_cuda_ctx *tr_cuda_need_ctx(const char *op);
#define TR_CUDA_CTX(op)                                                                            \
    tr_cuda_ctx *ctx = tr_cuda_need_ctx(op);                                                       \
    if (!ctx) return TR_ERR_INVALID;                                                               \
    if (ctx->check_only) return TR_OK

/* Scratch of at least `bytes`, stream-ordered: valid until the next call that asks for scratch. */
tr_status tr_cuda_scratch(tr_cuda_ctx *ctx, size_t bytes, void **out);

#define TR_CUDA_THREADS 256

static inline unsigned tr_cuda_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    /* Grid-stride loops cover the rest; 65535*8 blocks keep every SM busy. */
    return (unsigned)(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

__device__ __forceinline__ float tr_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double tr_warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float tr_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, <= 1024), returned to every thread. The
 * combination order is fixed by thread index, so results do not vary from run to run. */
template <typename T> __device__ T tr_block_sum(T v) {
    TR_STATIC_SMEM(T, partial, [32]);
    __syncthreads(); /* partial may still be read by a previous call */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    T s = lane < nw ? partial[lane] : (T)0;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

__device__ __forceinline__ float tr_block_max(float v) {
    TR_STATIC_SMEM(float, partial, [32]);
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = tr_warp_max(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    float s = lane < nw ? partial[lane] : -INFINITY;
    return tr_warp_max(s);
}

#endif
