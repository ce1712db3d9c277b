/* The MoE ops (kernels/cpu/moe.c on device pointers).
 *
 * Router top-k: a thread per token running the CPU's per-token body (kernels/common/moe_route.h)
 * with its scratch in the context's stream-ordered scratch (3 E floats and 3 E ints per token),
 * so the choices, their tie-breaking and the probabilities are the CPU's float expressions. k
 * passes over E experts per token are cheap next to the router GEMM for the k <= 8, E <= 256 of
 * the models Trestle builds; a block-per-token selection is the upgrade a profile would ask for.
 *
 * Permutation: element-wise gathers; the token-side sums (permute_bwd, unpermute) walk a token's
 * k choices in order in one thread, so there are no atomics and the results are the CPU's order;
 * dprob is a block reduction in double per assignment.
 *
 * There is no grouped GEMM op: the experts' GEMMs are runtime/moe/experts.c's loop over the
 * expert blocks, one `gemm` / `gemm_lowp` call each on the bound stream (docs/cuda.md says why). */
#include "kernels/cuda/cuda_impl.cuh"
#include "kernels/cuda/moe_kernels.cuh"

static tr_status route_scratch(tr_cuda_ctx *ctx, const tr_route_desc *d, bool ints, float **wf,
                               int32_t **wi) {
    size_t nf = (size_t)d->tokens * (size_t)tr_route_work_floats(d->experts);
    size_t ni = ints ? (size_t)d->tokens * (size_t)tr_route_work_ints(d->experts) : 0;
    void *p;
    TR_TRY(tr_cuda_scratch(ctx, (nf + ni) * 4 + 256, &p));
    *wf = (float *)p;
    *wi = (int32_t *)((char *)p + (nf * 4 + 255) / 256 * 256);
    return TR_OK;
}

tr_status tr_cuda_moe_topk(int32_t *idx, float *prob, const float *logits, const tr_route_desc *d) {
    if (!tr_route_valid(d)) return TR_ERR_INVALID;
    if (d->tokens && (!idx || !prob || !logits)) return TR_ERR_INVALID;
    if (!d->tokens) return TR_OK;
    TR_CUDA_CTX("moe_topk");
    float *wf;
    int32_t *wi;
    TR_TRY(route_scratch(ctx, d, true, &wf, &wi));
    unsigned blocks = (unsigned)((d->tokens + MOE_ROUTE_THREADS - 1) / MOE_ROUTE_THREADS);
    moe_topk_kernel<<<blocks, MOE_ROUTE_THREADS, 0, ctx->stream>>>(idx, prob, logits, *d, wf, wi);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_moe_topk_bwd(float *dlogits, const float *dprob, const float *logits,
                               const int32_t *idx, const tr_route_desc *d) {
    if (!tr_route_valid(d)) return TR_ERR_INVALID;
    if (d->tokens && (!dlogits || !dprob || !logits || !idx)) return TR_ERR_INVALID;
    if (!d->tokens) return TR_OK;
    TR_CUDA_CTX("moe_topk_bwd");
    float *wf;
    int32_t *wi;
    TR_TRY(route_scratch(ctx, d, false, &wf, &wi));
    unsigned blocks = (unsigned)((d->tokens + MOE_ROUTE_THREADS - 1) / MOE_ROUTE_THREADS);
    moe_topk_bwd_kernel<<<blocks, MOE_ROUTE_THREADS, 0, ctx->stream>>>(dlogits, dprob, logits, idx,
                                                                       *d, wf);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_moe_permute(float *xp, const float *x, const int32_t *row_a, int rows, int tokens,
                              int topk, int dim) {
    if (!tr_moe_permute_check(xp, x, row_a, rows, tokens, topk, dim)) return TR_ERR_INVALID;
    if (!rows || !dim) return TR_OK;
    TR_CUDA_CTX("moe_permute");
    int64_t n = (int64_t)rows * dim;
    moe_permute_kernel<<<tr_cuda_blocks(n, TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(
        xp, x, row_a, rows, (int64_t)tokens * topk, topk, dim);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_moe_permute_bwd(float *dx, const float *dxp, const int32_t *pos, int rows,
                                  int tokens, int topk, int dim) {
    if (!tr_moe_gather_check(dx, dxp, NULL, pos, rows, tokens, topk, dim, 0)) return TR_ERR_INVALID;
    if (!tokens || !dim) return TR_OK;
    TR_CUDA_CTX("moe_permute_bwd");
    int64_t n = (int64_t)tokens * dim;
    moe_permute_bwd_kernel<<<tr_cuda_blocks(n, TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(
        dx, dxp, pos, rows, tokens, topk, dim);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_moe_unpermute(float *y, const float *ye, const float *prob, const int32_t *pos,
                                int rows, int tokens, int topk, int dim) {
    if (!tr_moe_gather_check(y, ye, prob, pos, rows, tokens, topk, dim, 1)) return TR_ERR_INVALID;
    if (!tokens || !dim) return TR_OK;
    TR_CUDA_CTX("moe_unpermute");
    int64_t n = (int64_t)tokens * dim;
    moe_unpermute_kernel<<<tr_cuda_blocks(n, TR_CUDA_THREADS), TR_CUDA_THREADS, 0, ctx->stream>>>(
        y, ye, prob, pos, rows, tokens, topk, dim);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_moe_unpermute_bwd(float *dye, float *dprob, const float *dy, const float *ye,
                                    const float *prob, const int32_t *row_a, const int32_t *pos,
                                    int rows, int tokens, int topk, int dim) {
    if (!tr_moe_unpermute_bwd_check(dye, dprob, dy, ye, prob, row_a, pos, rows, tokens, topk, dim))
        return TR_ERR_INVALID;
    int64_t n_a = (int64_t)tokens * topk, n = (int64_t)rows * dim;
    if (!n && !n_a) return TR_OK;
    TR_CUDA_CTX("moe_unpermute_bwd");
    if (n) {
        moe_unpermute_bwd_rows_kernel<<<tr_cuda_blocks(n, TR_CUDA_THREADS), TR_CUDA_THREADS, 0,
                                        ctx->stream>>>(dye, dy, prob, row_a, rows, n_a, topk, dim);
        TR_CUDA_LAUNCHED();
    }
    if (n_a) {
        unsigned blocks = (unsigned)(n_a < 65535 * 8 ? n_a : 65535 * 8);
        moe_unpermute_bwd_prob_kernel<<<blocks, MOE_DOT_THREADS, 0, ctx->stream>>>(
            dprob, dy, ye, pos, rows, n_a, topk, dim);
        TR_CUDA_LAUNCHED();
    }
    return TR_OK;
}
