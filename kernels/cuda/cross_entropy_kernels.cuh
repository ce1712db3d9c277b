/* Internal: the cross-entropy kernels of cross_entropy.cu (which explains them), in a header so
 * that host C++ compiles them too (tests/emu). */
#ifndef TR_CUDA_CROSS_ENTROPY_KERNELS_CUH
#define TR_CUDA_CROSS_ENTROPY_KERNELS_CUH

#include "kernels/common/ce_stats.h"
#include "kernels/cuda/cuda_common.cuh"

#define CE_THREADS 256

__global__ void ce_stats_kernel(float *stats, const float *logits, const int32_t *targets, int rows,
                                int vlocal, int vstart) {
    int64_t r = blockIdx.x;
    const float *x = logits + r * vlocal;
    /* The running sum in double, like the CPU's (a thread sums ~500 terms of a 128k vocab). */
    float m = -INFINITY;
    double s = 0.0;
    for (int j = threadIdx.x; j < vlocal; j += blockDim.x) {
        float v = x[j];
        if (v > m) {
            s = (m == -INFINITY ? 0.0 : s * (double)expf(m - v)) + 1.0;
            m = v;
        } else if (v != -INFINITY) { /* a -inf logit adds 0, also before any finite one */
            s += (double)expf(v - m);
        }
    }
    float gm = tr_block_max(m);
    double part = m == -INFINITY ? 0.0 : (double)s * exp((double)m - gm);
    double total = tr_block_sum(part);
    if (threadIdx.x == 0) {
        int32_t t = targets[r] - vstart;
        stats[r] = gm;
        stats[rows + r] = (float)total;
        stats[2 * rows + r] = targets[r] >= 0 && t >= 0 && t < vlocal ? x[t] : 0.0f;
    }
}

__global__ void ce_merge_kernel(float *stats, const float *other, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) tr_ce_merge_row(stats, other, rows, r);
}

__global__ void ce_rebase_kernel(float *stats, const float *global_max, int rows, int *bad) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    /* not the max over all shards: the row is left as it is, and reported */
    if (r < rows && !tr_ce_rebase_row(stats, global_max[r], rows, r)) atomicExch(bad, 1);
}

__global__ void ce_loss_kernel(float *loss, const float *stats, const int32_t *targets, int rows) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) loss[r] = tr_ce_row_loss(stats, targets, rows, r);
}

/* logits <- dloss[r] * (softmax - onehot), in place; ignored rows become zeros. */
__global__ void ce_bwd_kernel(float *logits, const float *stats, const int32_t *targets,
                              const float *dloss, int rows, int vlocal, int vstart) {
    int64_t r = blockIdx.x;
    float *x = logits + r * vlocal;
    if (targets[r] < 0) {
        for (int j = threadIdx.x; j < vlocal; j += blockDim.x) x[j] = 0.0f;
        return;
    }
    float m = stats[r], g = dloss ? dloss[r] : 1.0f, k = g / stats[rows + r];
    int32_t t = targets[r] - vstart;
    for (int j = threadIdx.x; j < vlocal; j += blockDim.x) {
        float v = expf(x[j] - m) * k;
        x[j] = j == t ? v - g : v;
    }
}

#endif
