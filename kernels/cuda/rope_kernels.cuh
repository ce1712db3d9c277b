/* Internal: the rotation kernel of rope.cu (which explains it), in a header so that host C++
 * compiles it too (tests/emu). */
#ifndef TR_CUDA_ROPE_KERNELS_CUH
#define TR_CUDA_ROPE_KERNELS_CUH

#include "kernels/cuda/cuda_common.cuh"

/* One thread per (b, t, h, channel c < head_dim): c < half rotates the pair (c, c + half), c in
 * [half, rot_dim) is done by its partner, c >= rot_dim is copied unless in place. */
__global__ void rope_kernel(float *y, const float *x, const float *cs, const float *sn,
                            int64_t total, int seq, int heads, int head_dim, int rot_dim,
                            float sign) {
    int half = rot_dim / 2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int c = (int)(i % head_dim);
        int64_t rh = i / head_dim; /* (b*seq + t)*heads + h */
        int t = (int)((rh / heads) % seq);
        int64_t base = rh * head_dim;
        if (c < half) {
            float x1 = x[base + c], x2 = x[base + c + half];
            float co = cs[(int64_t)t * half + c], s = sign * sn[(int64_t)t * half + c];
            y[base + c] = x1 * co - x2 * s;
            y[base + c + half] = x2 * co + x1 * s;
        } else if (c >= rot_dim && y != x) {
            y[base + c] = x[base + c];
        }
    }
}

#endif
