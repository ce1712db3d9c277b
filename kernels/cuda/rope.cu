/* RoPE, non-interleaved (rotate-half): channel i pairs with i + rot_dim/2. The cos/sin table is
 * built on the host in double with the shared frequency formula (kernels/common/rope_freq.h),
 * exactly as the CPU builds it, then copied to the device: both backends rotate by identical
 * floats. */
#include <stdlib.h>

#include "kernels/cuda/cuda_impl.cuh"
#include "kernels/cuda/rope_kernels.cuh"

tr_status tr_cuda_rope_table(float *cos_t, float *sin_t, const tr_rope_params *p, int seq,
                             int pos_offset) {
    if (!p || !cos_t || !sin_t || seq < 0 || pos_offset < 0) return TR_ERR_INVALID;
    if (p->rot_dim <= 0 || p->rot_dim % 2 || !(p->base > 1.0)) return TR_ERR_INVALID;
    if (p->llama3 && (!(p->factor > 0) || !(p->high_freq_factor > p->low_freq_factor) ||
                      !(p->low_freq_factor > 0) || !(p->original_max_position > 0)))
        return TR_ERR_INVALID;
    if (!seq) return TR_OK;
    TR_CUDA_CTX("rope_table");
    int half = p->rot_dim / 2;
    size_t n = (size_t)seq * half;
    float *host = (float *)malloc(2 * n * sizeof(float));
    if (!host) return TR_ERR_NOMEM;
    for (int i = 0; i < half; i++) {
        double f = tr_rope_inv_freq(p, i);
        for (int t = 0; t < seq; t++) {
            double pos = (double)(pos_offset + t);
            if (p->interp_factor > 0) pos /= p->interp_factor;
            host[(size_t)t * half + i] = (float)cos(pos * f);
            host[n + (size_t)t * half + i] = (float)sin(pos * f);
        }
    }
    cudaError_t e =
        cudaMemcpyAsync(cos_t, host, n * sizeof(float), cudaMemcpyHostToDevice, ctx->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(sin_t, host + n, n * sizeof(float), cudaMemcpyHostToDevice,
                            ctx->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream); /* host is freed next */
    free(host);
    TR_CUDA_TRY(e);
    return TR_OK;
}

static tr_status rope_apply(float *y, const float *x, const float *cos_t, const float *sin_t,
                            int batch, int seq, int heads, int head_dim, int rot_dim, float sign) {
    if (batch < 0 || seq < 0 || heads <= 0 || head_dim <= 0) return TR_ERR_INVALID;
    if (rot_dim <= 0 || rot_dim % 2 || rot_dim > head_dim) return TR_ERR_INVALID;
    if (batch && seq && (!y || !x || !cos_t || !sin_t)) return TR_ERR_INVALID;
    if (!batch || !seq) return TR_OK;
    TR_CUDA_CTX("rope");
    int64_t total = (int64_t)batch * seq * heads * head_dim;
    rope_kernel<<<tr_cuda_blocks(total, TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(
        y, x, cos_t, sin_t, total, seq, heads, head_dim, rot_dim, sign);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_rope_fwd(float *y, const float *x, const float *cos_t, const float *sin_t,
                           int batch, int seq, int heads, int head_dim, int rot_dim) {
    return rope_apply(y, x, cos_t, sin_t, batch, seq, heads, head_dim, rot_dim, 1.0f);
}

/* The inverse of a rotation is the rotation by the negative angle. */
tr_status tr_cuda_rope_bwd(float *dx, const float *dy, const float *cos_t, const float *sin_t,
                           int batch, int seq, int heads, int head_dim, int rot_dim) {
    return rope_apply(dx, dy, cos_t, sin_t, batch, seq, heads, head_dim, rot_dim, -1.0f);
}
