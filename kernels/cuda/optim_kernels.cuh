/* Internal: the optimizer kernels of optim.cu (which explains them), in a header so that host C++
 * compiles them too (tests/emu). */
#ifndef TR_CUDA_OPTIM_KERNELS_CUH
#define TR_CUDA_OPTIM_KERNELS_CUH

#include "kernels/cuda/cuda_common.cuh"

/* torch.optim.AdamW order: decoupled weight decay scaled by lr first, then the Adam update. */
__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, int64_t n, float lr,
                             float b1, float b2, float eps, float wd, float bc1, float bc2,
                             float gs) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float gi = g[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float pi = p[i] * (1.0f - lr * wd);
        p[i] = pi - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    }
}

/* torch.optim.SGD, dampening 0; a zeroed buffer makes the first step's buf equal g. */
__global__ void sgd_kernel(float *p, const float *g, float *buf, int64_t n, float lr, float mom,
                           float wd, int nesterov) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float d = g[i] + wd * p[i];
        if (mom != 0.0f) {
            float b = mom * buf[i] + d;
            buf[i] = b;
            d = nesterov ? d + mom * b : b;
        }
        p[i] -= lr * d;
    }
}

#endif
