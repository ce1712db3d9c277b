/* Flat helpers, activations, dropout and embeddings: element-wise grid-stride kernels over the
 * shared scalar maths of kernels/common, so each element is computed by the CPU's expression. */
#include "kernels/cuda/cuda_impl.cuh"
#include "kernels/cuda/elementwise_kernels.cuh"

#define LAUNCH(kernel, n, ...)                                                                     \
    do {                                                                                           \
        kernel<<<tr_cuda_blocks((n), TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(         \
            __VA_ARGS__);                                                                          \
        TR_CUDA_LAUNCHED();                                                                        \
    } while (0)

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

tr_status tr_cuda_row_sum_squares(float *out, const float *x, int rows, int cols) {
    if (rows < 0 || cols < 0 || (rows && (!out || (cols && !x)))) return TR_ERR_INVALID;
    if (!rows) return TR_OK;
    TR_CUDA_CTX("row_sum_squares");
    row_ssq_kernel<<<(unsigned)rows, 256, 0, ctx->stream>>>(out, x, cols);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_col_scale(float *y, const float *s, int rows, int cols) {
    if (rows < 0 || cols < 0 || (rows && cols && (!y || !s))) return TR_ERR_INVALID;
    int64_t n = (int64_t)rows * cols;
    if (!n) return TR_OK;
    TR_CUDA_CTX("col_scale");
    LAUNCH(col_scale_kernel, n, y, s, n, cols);
    return TR_OK;
}

tr_status tr_cuda_col_dot(float *out, const float *a, const float *b, const float *s, int rows,
                          int cols) {
    if (rows < 0 || cols < 0 || (cols && (!out || !s || (rows && (!a || !b)))))
        return TR_ERR_INVALID;
    if (!cols) return TR_OK;
    TR_CUDA_CTX("col_dot");
    LAUNCH(col_dot_kernel, cols, out, a, b, s, rows, cols);
    return TR_OK;
}

tr_status tr_cuda_norm_scale(float *scale, float *inv, const float *mag, const float *sq, int n) {
    if (n < 0 || (n && (!scale || !inv || !mag || !sq))) return TR_ERR_INVALID;
    if (!n) return TR_OK;
    TR_CUDA_CTX("norm_scale");
    LAUNCH(norm_scale_kernel, n, scale, inv, mag, sq, (int64_t)n);
    return TR_OK;
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
