/* Internal: the MoE kernels of moe.cu (which explains them), in a header so that host C++
 * compiles them too (tests/emu). */
#ifndef TR_CUDA_MOE_KERNELS_CUH
#define TR_CUDA_MOE_KERNELS_CUH

#include "kernels/common/moe_perm.h"
#include "kernels/common/moe_route.h"
#include "kernels/cuda/cuda_common.cuh"

#define MOE_ROUTE_THREADS 128
#define MOE_DOT_THREADS   128

#define MOE_GRID_STRIDE(i, n)                                                                      \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

/* A thread per token; wf / wi: tr_route_work_floats / ints of scratch per token. */
__global__ void moe_topk_kernel(int32_t *idx, float *prob, const float *logits, tr_route_desc d,
                                float *wf, int32_t *wi) {
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (t >= d.tokens) return;
    int E = d.experts, k = d.topk;
    tr_route_token(&d, logits + t * E, idx + t * k, prob + t * k, wf + t * tr_route_work_floats(E),
                   wi + t * tr_route_work_ints(E));
}

__global__ void moe_topk_bwd_kernel(float *dlogits, const float *dprob, const float *logits,
                                    const int32_t *idx, tr_route_desc d, float *wf) {
    int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (t >= d.tokens) return;
    int E = d.experts, k = d.topk;
    tr_route_token_bwd(&d, logits + t * E, idx + t * k, dprob + t * k, dlogits + t * E,
                       wf + t * tr_route_work_floats(E));
}

/* xp[r, c] = x[a / topk, c] for a = row_a[r], 0 for padding rows. */
__global__ void moe_permute_kernel(float *xp, const float *x, const int32_t *row_a, int rows,
                                   int64_t n_assign, int topk, int dim) {
    MOE_GRID_STRIDE(i, (int64_t)rows * dim) {
        int64_t r = i / dim, c = i % dim, a = tr_moe_assign_of(row_a, r, n_assign);
        xp[i] = a < 0 ? 0.0f : x[a / topk * dim + c];
    }
}

/* A thread per (token, column) summing its choices in j order, the CPU's order: no atomics. */
__global__ void moe_permute_bwd_kernel(float *dx, const float *dxp, const int32_t *pos, int rows,
                                       int tokens, int topk, int dim) {
    MOE_GRID_STRIDE(i, (int64_t)tokens * dim) {
        int64_t t = i / dim, c = i % dim;
        float acc = 0.0f;
        for (int j = 0; j < topk; j++) {
            int r = tr_moe_row_of(pos, t * topk + j, rows);
            if (r >= 0) acc += dxp[(int64_t)r * dim + c];
        }
        dx[i] = acc;
    }
}

__global__ void moe_unpermute_kernel(float *y, const float *ye, const float *prob,
                                     const int32_t *pos, int rows, int tokens, int topk, int dim) {
    MOE_GRID_STRIDE(i, (int64_t)tokens * dim) {
        int64_t t = i / dim, c = i % dim;
        float acc = 0.0f;
        for (int j = 0; j < topk; j++) {
            int64_t a = t * topk + j;
            int r = tr_moe_row_of(pos, a, rows);
            if (r >= 0) acc += prob[a] * ye[(int64_t)r * dim + c];
        }
        y[i] = acc;
    }
}

/* dye[r, c] = prob[a] dy[a / topk, c], 0 for padding rows. */
__global__ void moe_unpermute_bwd_rows_kernel(float *dye, const float *dy, const float *prob,
                                              const int32_t *row_a, int rows, int64_t n_assign,
                                              int topk, int dim) {
    MOE_GRID_STRIDE(i, (int64_t)rows * dim) {
        int64_t r = i / dim, c = i % dim, a = tr_moe_assign_of(row_a, r, n_assign);
        dye[i] = a < 0 ? 0.0f : prob[a] * dy[a / topk * dim + c];
    }
}

/* A block per assignment (grid-strided): dprob[a] = <dy[t], ye[pos[a]]>, the threads' strided
 * partials in double combined in the block's fixed order (the CPU sums in column order: equal
 * up to the double sum's rounding, ~1e-16 before the one rounding to float). */
__global__ void moe_unpermute_bwd_prob_kernel(float *dprob, const float *dy, const float *ye,
                                              const int32_t *pos, int rows, int64_t n_assign,
                                              int topk, int dim) {
    for (int64_t a = blockIdx.x; a < n_assign; a += gridDim.x) {
        int r = tr_moe_row_of(pos, a, rows); /* the same for the whole block */
        double part = 0.0;
        if (r >= 0) {
            const float *g = dy + a / topk * dim, *e = ye + (int64_t)r * dim;
            for (int c = threadIdx.x; c < dim; c += blockDim.x) part += (double)g[c] * e[c];
        }
        double s = tr_block_sum(part);
        if (threadIdx.x == 0) dprob[a] = (float)s;
    }
}

#endif
