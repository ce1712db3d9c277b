/* Vocab-parallel cross entropy (planar stats [3, rows]: max, sum exp(x - max), target logit),
 * the same contract as kernels/cpu/cross_entropy.c. One block per row reads the logits once with
 * an online max/sum per thread; merge, rebase and loss use the CPU's double expressions. */
#include "kernels/cuda/cross_entropy_kernels.cuh"
#include "kernels/cuda/cuda_impl.cuh"

tr_status tr_cuda_ce_stats(float *stats, const float *logits, const int32_t *targets, int rows,
                           int vocab_local, int vocab_start) {
    if (rows < 0 || vocab_local < 0 || vocab_start < 0) return TR_ERR_INVALID;
    if (rows && (!stats || !targets || (vocab_local && !logits))) return TR_ERR_INVALID;
    if (!rows) return TR_OK;
    TR_CUDA_CTX("ce_stats");
    ce_stats_kernel<<<(unsigned)rows, CE_THREADS, 0, ctx->stream>>>(stats, logits, targets, rows,
                                                                    vocab_local, vocab_start);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_ce_merge(float *stats, const float *other, int rows) {
    if (rows < 0 || (rows && (!stats || !other))) return TR_ERR_INVALID;
    if (!rows) return TR_OK;
    TR_CUDA_CTX("ce_merge");
    ce_merge_kernel<<<(unsigned)((rows + 255) / 256), 256, 0, ctx->stream>>>(stats, other, rows);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

/* The one op that must read a result back: a global max below a shard's max is a caller bug
 * that the CPU reports as TR_ERR_INVALID, so this waits for the stream (every call: once per
 * microbatch under TP). */
tr_status tr_cuda_ce_rebase(float *stats, const float *global_max, int rows) {
    if (rows < 0 || (rows && (!stats || !global_max))) return TR_ERR_INVALID;
    if (!rows) return TR_OK;
    TR_CUDA_CTX("ce_rebase");
    int *bad;
    TR_TRY(tr_cuda_scratch(ctx, sizeof(int), (void **)&bad));
    TR_CUDA_TRY(cudaMemsetAsync(bad, 0, sizeof(int), ctx->stream));
    ce_rebase_kernel<<<(unsigned)((rows + 255) / 256), 256, 0, ctx->stream>>>(stats, global_max,
                                                                              rows, bad);
    TR_CUDA_LAUNCHED();
    TR_CUDA_TRY(
        cudaMemcpyAsync(ctx->host_flag, bad, sizeof(int), cudaMemcpyDeviceToHost, ctx->stream));
    TR_CUDA_TRY(cudaStreamSynchronize(ctx->stream));
    return *ctx->host_flag ? TR_ERR_INVALID : TR_OK;
}

tr_status tr_cuda_ce_loss(float *loss, const float *stats, const int32_t *targets, int rows) {
    if (rows < 0 || (rows && (!loss || !stats || !targets))) return TR_ERR_INVALID;
    if (!rows) return TR_OK;
    TR_CUDA_CTX("ce_loss");
    ce_loss_kernel<<<(unsigned)((rows + 255) / 256), 256, 0, ctx->stream>>>(loss, stats, targets,
                                                                            rows);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

tr_status tr_cuda_ce_bwd(float *logits, const float *stats, const int32_t *targets,
                         const float *dloss, int rows, int vocab_local, int vocab_start) {
    if (rows < 0 || vocab_local < 0 || vocab_start < 0) return TR_ERR_INVALID;
    if (rows && (!stats || !targets || (vocab_local && !logits))) return TR_ERR_INVALID;
    if (!rows || !vocab_local) return TR_OK;
    TR_CUDA_CTX("ce_bwd");
    ce_bwd_kernel<<<(unsigned)rows, CE_THREADS, 0, ctx->stream>>>(logits, stats, targets, dloss,
                                                                  rows, vocab_local, vocab_start);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}
