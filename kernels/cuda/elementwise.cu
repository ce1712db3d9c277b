/* Flat helpers, activations, dropout and embeddings: element-wise grid-stride kernels over the
 * shared scalar maths of kernels/common, so each element is computed by the CPU's expression. */
#include "kernels/common/activations.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/cuda_impl.cuh"

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

#define LAUNCH(kernel, n, ...)                                                                     \
    do {                                                                                           \
        kernel<<<tr_cuda_blocks((n), TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(         \
            __VA_ARGS__);                                                                          \
        TR_CUDA_LAUNCHED();                                                                        \
    } while (0)

__global__ void add_kernel(float *y, const float *x, int64_t n) {
    GRID_STRIDE(i, n) y[i] += x[i];
}
__global__ void fill_kernel(float *y, int64_t n, float v) {
    GRID_STRIDE(i, n) y[i] = v;
}
__global__ void scale_kernel(float *y, int64_t n, float s) {
    GRID_STRIDE(i, n) y[i] *= s;
}

tr_status tr_cuda_add(float *y, const float *x, int64_t n) {
    if (n < 0 || (n && (!y || !x))) return TR_ERR_INVALID;
    if (!n) return TR_OK;
    TR_CUDA_CTX("add");
    LAUNCH(add_kernel, n, y, x, n);
    return TR_OK;
}

tr_status tr_cuda_fill(float *x, int64_t n, float value) {
    if (n < 0 || (n && !x)) return TR_ERR_INVALID;
    if (!n) return TR_OK;
    TR_CUDA_CTX("fill");
    LAUNCH(fill_kernel, n, x, n, value);
    return TR_OK;
}

tr_status tr_cuda_scale(float *x, int64_t n, float s) {
    if (n < 0 || (n && !x)) return TR_ERR_INVALID;
    if (!n) return TR_OK;
    TR_CUDA_CTX("scale");
    LAUNCH(scale_kernel, n, x, n, s);
    return TR_OK;
}

/* The CPU's fixed 4096-element blocks, each summed in double; then the block sums in a fixed
 * order. The result does not depend on the grid, like the CPU's on the thread count. */
#define SSQ_BLOCK 4096

__global__ void ssq_blocks_kernel(double *partial, const float *x, int64_t n) {
    int64_t i0 = (int64_t)blockIdx.x * SSQ_BLOCK, i1 = min(n, i0 + SSQ_BLOCK);
    double s = 0.0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) s += (double)x[i] * x[i];
    s = tr_block_sum(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void ssq_final_kernel(float *out, const double *partial, int64_t nb) {
    double s = 0.0;
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) s += partial[b];
    s = tr_block_sum(s);
    if (threadIdx.x == 0) *out = (float)s;
}

tr_status tr_cuda_sum_squares(float *out, const float *x, int64_t n) {
    if (!out || n < 0 || (n && !x)) return TR_ERR_INVALID;
    TR_CUDA_CTX("sum_squares");
    int64_t nb = (n + SSQ_BLOCK - 1) / SSQ_BLOCK;
    if (nb > 0x7fffffff) return TR_ERR_INVALID; /* 8.8e12 elements: beyond any device */
    void *scratch;
    TR_TRY(tr_cuda_scratch(ctx, (size_t)(nb ? nb : 1) * sizeof(double), &scratch));
    double *partial = (double *)scratch;
    if (nb) {
        ssq_blocks_kernel<<<(unsigned)nb, 256, 0, ctx->stream>>>(partial, x, n);
        TR_CUDA_LAUNCHED();
    }
    ssq_final_kernel<<<1, 1024, 0, ctx->stream>>>(out, partial, nb);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

__global__ void gelu_fwd_kernel(float *y, const float *x, int64_t n, int tanh_approx) {
    GRID_STRIDE(i, n) y[i] = tanh_approx ? tr_gelu_tanh(x[i]) : tr_gelu_erf(x[i]);
}
__global__ void gelu_bwd_kernel(float *dx, const float *dy, const float *x, int64_t n,
                                int tanh_approx) {
    GRID_STRIDE(i, n)
    dx[i] = dy[i] * (tanh_approx ? tr_gelu_tanh_grad(x[i]) : tr_gelu_erf_grad(x[i]));
}

tr_status tr_cuda_gelu_fwd(float *y, const float *x, int64_t n, int tanh_approx) {
    if (n < 0 || (n && (!y || !x))) return TR_ERR_INVALID;
    if (!n) return TR_OK;
    TR_CUDA_CTX("gelu_fwd");
    LAUNCH(gelu_fwd_kernel, n, y, x, n, tanh_approx != 0);
    return TR_OK;
}

tr_status tr_cuda_gelu_bwd(float *dx, const float *dy, const float *x, int64_t n, int tanh_approx) {
    if (n < 0 || (n && (!dx || !dy || !x))) return TR_ERR_INVALID;
    if (!n) return TR_OK;
    TR_CUDA_CTX("gelu_bwd");
    LAUNCH(gelu_bwd_kernel, n, dx, dy, x, n, tanh_approx != 0);
    return TR_OK;
}

__global__ void swiglu_fwd_kernel(float *y, const float *x, int64_t total, int ffn) {
    GRID_STRIDE(i, total) {
        int64_t r = i / ffn, j = i % ffn;
        const float *gate = x + r * 2 * ffn;
        y[i] = tr_silu(gate[j]) * gate[ffn + j];
    }
}

__global__ void swiglu_bwd_kernel(float *dx, const float *dy, const float *x, int64_t total,
                                  int ffn) {
    GRID_STRIDE(i, total) {
        int64_t r = i / ffn, j = i % ffn;
        const float *gate = x + r * 2 * ffn;
        float g = gate[j], u = gate[ffn + j], d = dy[i];
        dx[r * 2 * ffn + j] = d * u * tr_silu_grad(g);
        dx[r * 2 * ffn + ffn + j] = d * tr_silu(g);
    }
}

tr_status tr_cuda_swiglu_fwd(float *y, const float *x, int rows, int ffn) {
    if (rows < 0 || ffn <= 0 || (rows && (!y || !x))) return TR_ERR_INVALID;
    if (!rows) return TR_OK;
    TR_CUDA_CTX("swiglu_fwd");
    int64_t total = (int64_t)rows * ffn;
    LAUNCH(swiglu_fwd_kernel, total, y, x, total, ffn);
    return TR_OK;
}

/* dx must not alias x or dy, as on the CPU (gate and up are both read after a write). */
tr_status tr_cuda_swiglu_bwd(float *dx, const float *dy, const float *x, int rows, int ffn) {
    if (rows < 0 || ffn <= 0 || (rows && (!dx || !dy || !x))) return TR_ERR_INVALID;
    if (rows && (dx == x || dx == dy)) return TR_ERR_INVALID;
    if (!rows) return TR_OK;
    TR_CUDA_CTX("swiglu_bwd");
    int64_t total = (int64_t)rows * ffn;
    LAUNCH(swiglu_bwd_kernel, total, dx, dy, x, total, ffn);
    return TR_OK;
}

/* Element i keeps iff the Philox uniform of global index offset + i is >= p: the CPU's mapping,
 * so a mask made on one backend is the mask of the other. */
__global__ void dropout_kernel(float *y, const float *x, int64_t n, float p, uint64_t seed,
                               uint64_t offset) {
    float keep_scale = 1.0f / (1.0f - p);
    GRID_STRIDE(i, n) {
        float u = tr_philox_uniform(seed, offset + (uint64_t)i);
        y[i] = u >= p ? x[i] * keep_scale : 0.0f;
    }
}

static tr_status dropout_apply(float *y, const float *x, int64_t n, float p, uint64_t seed,
                               uint64_t offset) {
    if (n < 0 || (n && (!y || !x)) || !(p >= 0.0f && p < 1.0f)) return TR_ERR_INVALID;
    if (!n) return TR_OK;
    TR_CUDA_CTX("dropout");
    LAUNCH(dropout_kernel, n, y, x, n, p, seed, offset);
    return TR_OK;
}

tr_status tr_cuda_dropout_fwd(float *y, const float *x, int64_t n, float p, uint64_t seed,
                              uint64_t offset) {
    return dropout_apply(y, x, n, p, seed, offset);
}

tr_status tr_cuda_dropout_bwd(float *dx, const float *dy, int64_t n, float p, uint64_t seed,
                              uint64_t offset) {
    return dropout_apply(dx, dy, n, p, seed, offset);
}

__global__ void emb_fwd_kernel(float *out, const int32_t *ids, const float *table, int64_t total,
                               int dim, int start, int end) {
    GRID_STRIDE(i, total) {
        int64_t r = i / dim, j = i % dim;
        int32_t id = ids[r];
        out[i] = id >= start && id < end ? table[(int64_t)(id - start) * dim + j] : 0.0f;
    }
}

/* One thread per column walks the tokens in order, as the CPU's column stripes do: repeated ids
 * never race and the float sums happen in the same order (bitwise equal to the CPU). */
__global__ void emb_bwd_kernel(float *dtable, const int32_t *ids, const float *dout, int n, int dim,
                               int start, int end) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= dim) return;
    for (int r = 0; r < n; r++) {
        int32_t id = ids[r];
        if (id < start || id >= end) continue;
        dtable[(int64_t)(id - start) * dim + j] += dout[(int64_t)r * dim + j];
    }
}

tr_status tr_cuda_embedding_fwd(float *out, const int32_t *ids, const float *table, int n, int dim,
                                int vocab_start, int vocab_end) {
    if (n < 0 || dim < 0 || vocab_end < vocab_start) return TR_ERR_INVALID;
    if (n && dim && (!out || !ids || (vocab_end > vocab_start && !table))) return TR_ERR_INVALID;
    if (!n || !dim) return TR_OK;
    TR_CUDA_CTX("embedding_fwd");
    int64_t total = (int64_t)n * dim;
    LAUNCH(emb_fwd_kernel, total, out, ids, table, total, dim, vocab_start, vocab_end);
    return TR_OK;
}

tr_status tr_cuda_embedding_bwd(float *dtable, const int32_t *ids, const float *dout, int n,
                                int dim, int vocab_start, int vocab_end) {
    if (n < 0 || dim < 0 || vocab_end < vocab_start) return TR_ERR_INVALID;
    if (n && dim && (!dout || !ids || (vocab_end > vocab_start && !dtable))) return TR_ERR_INVALID;
    if (!n || !dim || vocab_end == vocab_start) return TR_OK;
    TR_CUDA_CTX("embedding_bwd");
    emb_bwd_kernel<<<(unsigned)((dim + 127) / 128), 128, 0, ctx->stream>>>(
        dtable, ids, dout, n, dim, vocab_start, vocab_end);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

__global__ void pos_fwd_kernel(float *x, const float *wpe, int64_t total, int seq, int dim,
                               int pos) {
    GRID_STRIDE(i, total) {
        int64_t r = i / dim, j = i % dim;
        int t = (int)(r % seq);
        x[i] += wpe[(int64_t)(pos + t) * dim + j];
    }
}

/* Thread per (t, j), batch rows added in order into the destination, as on the CPU. */
__global__ void pos_bwd_kernel(float *dwpe, const float *dx, int batch, int64_t total, int seq,
                               int dim, int pos) {
    GRID_STRIDE(i, total) {
        int64_t t = i / dim, j = i % dim;
        float *d = dwpe + (pos + t) * dim + j;
        for (int b = 0; b < batch; b++) *d += dx[((int64_t)b * seq + t) * dim + j];
    }
}

tr_status tr_cuda_pos_embedding_fwd(float *x, const float *wpe, int batch, int seq, int dim,
                                    int pos_offset) {
    if (batch < 0 || seq < 0 || dim < 0 || pos_offset < 0) return TR_ERR_INVALID;
    if (batch && seq && dim && (!x || !wpe)) return TR_ERR_INVALID;
    if (!batch || !seq || !dim) return TR_OK;
    TR_CUDA_CTX("pos_embedding_fwd");
    int64_t total = (int64_t)batch * seq * dim;
    LAUNCH(pos_fwd_kernel, total, x, wpe, total, seq, dim, pos_offset);
    return TR_OK;
}

tr_status tr_cuda_pos_embedding_bwd(float *dwpe, const float *dx, int batch, int seq, int dim,
                                    int pos_offset) {
    if (batch < 0 || seq < 0 || dim < 0 || pos_offset < 0) return TR_ERR_INVALID;
    if (batch && seq && dim && (!dx || !dwpe)) return TR_ERR_INVALID;
    if (!batch || !seq || !dim) return TR_OK;
    TR_CUDA_CTX("pos_embedding_bwd");
    int64_t total = (int64_t)seq * dim;
    LAUNCH(pos_bwd_kernel, total, dwpe, dx, batch, total, seq, dim, pos_offset);
    return TR_OK;
}
