/* Causal GQA attention, flash-style, fp32 SIMT: the CPU's FlashAttention-2 schedule mapped onto
 * warps. Forward: a warp owns one query row (its output row lives in registers, lane l holding
 * channels l, l+32, ...); the block's warps share K/V tiles of ATT_KT keys staged in shared
 * memory, lane j scoring key j of the tile, with the online max/sum rescaling of the CPU. Only
 * lse = m + log(l) is saved. Backward recomputes P and dS = scale * P * (dP - di) from q, k, v
 * and lse in two kernels without atomics, as the CPU's two passes: one owns key rows (dK, dV
 * summed over the group's heads and every query), one owns query rows (dQ). Each output element
 * has one writer, so results are run-to-run deterministic.
 *
 * Document masking (desc->doc_start, packed sequences) narrows query t's keys to
 * [doc_start[t], t], as on the CPU: tiles before the block's first document start are skipped,
 * and a key block stops at the first query whose document starts after it.
 *
 * Dropout (desc->dropout): each lane multiplies its probability by the mask of
 * kernels/common/attn_dropout.h (1/(1-p) or 0) after the row sum has taken it, as on the CPU; the
 * backward multiplies dP by the same mask and, in dK/dV, P too (dV = (P M)^T dO). di is
 * rowsum(dO * O) of the dropped output, which equals rowsum(P M * dP), so it is unchanged.
 *
 * With desc->lowp (mixed precision) and a head_dim of 16, 32, 64 or 128 on sm_80+, the same
 * entry points run the tensor-core kernels of attention_tc.cu instead, after the checks (and,
 * for backward, di) here. */
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/cuda_impl.cuh"
#include "kernels/cuda/cuda_mixed.h"

static tr_status attn_check(const tr_attn_desc *d) {
    if (!d || d->batch < 0 || d->seq < 0 || d->heads <= 0 || d->groups <= 0 || d->head_dim <= 0)
        return TR_ERR_INVALID;
    if (d->heads % d->groups || d->block_q < 0 || d->block_k < 0 || !(d->scale > 0))
        return TR_ERR_INVALID;
    if (d->doc_start && !d->causal) return TR_ERR_INVALID;
    if (d->lowp != 0 && d->lowp != TR_LOWP_BF16 && d->lowp != TR_LOWP_F16) return TR_ERR_INVALID;
    if (d->dropout != 0.0f && !tr_attn_drop_args_ok(d->dropout, d->dropout_layer, d->head_offset,
                                                    d->heads, d->heads_total))
        return TR_ERR_INVALID;
    /* Registers hold a row as head_dim/32 values per lane; 256 covers every model we ship. */
    if (d->head_dim > 256) {
        tr_log(TR_LOG_ERROR, "CUDA attention: head_dim %d is above the supported 256", d->head_dim);
        return TR_ERR_INVALID;
    }
    /* grid.y = heads, grid.z = batch */
    if (d->heads > 65535 || d->batch > 65535) return TR_ERR_INVALID;
    return TR_OK;
}

/* doc_start lives on the device, and a malformed one must be TR_ERR_INVALID as on the CPU, so
 * this reads the verdict back (one small synchronisation per call with documents), unless the
 * caller vouches for the array (doc_start_trusted: the runtime checks it on the host). */
static tr_status check_doc_start(tr_cuda_ctx *ctx, const tr_attn_desc *d) {
    if (!d->doc_start || d->doc_start_trusted) return TR_OK;
    int *bad;
    TR_TRY(tr_cuda_scratch(ctx, sizeof(int), (void **)&bad));
    TR_CUDA_TRY(cudaMemsetAsync(bad, 0, sizeof(int), ctx->stream));
    int64_t n = (int64_t)d->batch * d->seq;
    doc_start_check_kernel<<<tr_cuda_blocks(n, 256), 256, 0, ctx->stream>>>(d->doc_start, d->batch,
                                                                            d->seq, bad);
    TR_CUDA_LAUNCHED();
    TR_CUDA_TRY(
        cudaMemcpyAsync(ctx->host_flag, bad, sizeof(int), cudaMemcpyDeviceToHost, ctx->stream));
    TR_CUDA_TRY(cudaStreamSynchronize(ctx->stream));
    return *ctx->host_flag ? TR_ERR_INVALID : TR_OK;
}

/* Shared memory beyond 48 KB must be opted into per kernel (head_dim 256). */
template <typename K> static tr_status allow_smem(K kernel, size_t bytes) {
    if (bytes > 48 * 1024)
        TR_CUDA_TRY(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return TR_OK;
}

template <int NE, typename T, bool DROP>
static tr_status fwd_launch(tr_cuda_ctx *ctx, T *out, float *lse, const T *q, const T *k,
                            const T *v, const tr_attn_desc *d) {
    att_shape s = att_shape_of(d);
    size_t smem = attn_fwd_smem(s.D);
    TR_TRY(allow_smem(attn_fwd_kernel<NE, T, DROP>, smem));
    dim3 grid((unsigned)((s.T + ATT_WARPS - 1) / ATT_WARPS), (unsigned)s.H, (unsigned)d->batch);
    attn_fwd_kernel<NE, T, DROP><<<grid, ATT_WARPS * 32, smem, ctx->stream>>>(out, lse, q, k, v, s);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

template <int NE, typename T, bool DROP>
static tr_status bwd_launch(tr_cuda_ctx *ctx, T *dq, T *dk, T *dv, const T *dout, const T *q,
                            const T *k, const T *v, const float *lse, const float *di,
                            const tr_attn_desc *d) {
    att_shape s = att_shape_of(d);
    unsigned nb = (unsigned)((s.T + ATT_WARPS - 1) / ATT_WARPS);
    size_t smem_dq = attn_dq_smem(s.D), smem_dkv = attn_dkv_smem(s.D);
    TR_TRY(allow_smem(attn_dq_kernel<NE, T, DROP>, smem_dq));
    TR_TRY(allow_smem(attn_dkv_kernel<NE, T, DROP>, smem_dkv));
    attn_dkv_kernel<NE, T, DROP>
        <<<dim3(nb, (unsigned)s.G, (unsigned)d->batch), ATT_WARPS * 32, smem_dkv, ctx->stream>>>(
            dk, dv, dout, q, k, v, lse, di, s);
    TR_CUDA_LAUNCHED();
    attn_dq_kernel<NE, T, DROP>
        <<<dim3(nb, (unsigned)s.H, (unsigned)d->batch), ATT_WARPS * 32, smem_dq, ctx->stream>>>(
            dq, dout, q, k, v, lse, di, s);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

/* The kernels with dropout are separate instantiations (DROP), so those without it keep the
 * plain op's code and registers. */
template <int NE, typename T>
static tr_status fwd_drop(tr_cuda_ctx *ctx, T *out, float *lse, const T *q, const T *k, const T *v,
                          const tr_attn_desc *d) {
    if (d->dropout != 0.0f) return fwd_launch<NE, T, true>(ctx, out, lse, q, k, v, d);
    return fwd_launch<NE, T, false>(ctx, out, lse, q, k, v, d);
}

template <int NE, typename T>
static tr_status bwd_drop(tr_cuda_ctx *ctx, T *dq, T *dk, T *dv, const T *dout, const T *q,
                          const T *k, const T *v, const float *lse, const float *di,
                          const tr_attn_desc *d) {
    if (d->dropout != 0.0f)
        return bwd_launch<NE, T, true>(ctx, dq, dk, dv, dout, q, k, v, lse, di, d);
    return bwd_launch<NE, T, false>(ctx, dq, dk, dv, dout, q, k, v, lse, di, d);
}

/* The checks and the head_dim dispatch, shared by the fp32 table entries and the bf16 ones. */
template <typename T>
static tr_status attention_fwd(const char *name, T *out, float *lse, const T *q, const T *k,
                               const T *v, const tr_attn_desc *d) {
    TR_TRY(attn_check(d));
    if (d->batch == 0 || d->seq == 0) return TR_OK;
    if (!out || !lse || !q || !k || !v) return TR_ERR_INVALID;
    TR_CUDA_CTX(name);
    TR_TRY(check_doc_start(ctx, d));
    if (tr_attn_tc_eligible(d)) return tr_attn_tc_fwd(ctx->stream, out, lse, q, k, v, d);
    if (d->head_dim <= 64) return fwd_drop<2, T>(ctx, out, lse, q, k, v, d);
    if (d->head_dim <= 128) return fwd_drop<4, T>(ctx, out, lse, q, k, v, d);
    return fwd_drop<8, T>(ctx, out, lse, q, k, v, d);
}

template <typename T>
static tr_status attention_bwd(const char *name, T *dq, T *dk, T *dv, const T *dout, const T *q,
                               const T *k, const T *v, const T *out, const float *lse,
                               const tr_attn_desc *d) {
    TR_TRY(attn_check(d));
    if (d->batch == 0 || d->seq == 0) return TR_OK;
    if (!dq || !dk || !dv || !dout || !q || !k || !v || !out || !lse) return TR_ERR_INVALID;
    TR_CUDA_CTX(name);
    TR_TRY(check_doc_start(ctx, d));
    int64_t rows = (int64_t)d->batch * d->seq * d->heads;
    void *scratch;
    TR_TRY(tr_cuda_scratch(ctx, (size_t)rows * sizeof(float), &scratch));
    float *di = (float *)scratch; /* [B, T, H]: the token-major order of dO and O */
    attn_di_kernel<T>
        <<<tr_cuda_blocks(rows * 32, 256), 256, 0, ctx->stream>>>(di, dout, out, rows, d->head_dim);
    TR_CUDA_LAUNCHED();
    if (tr_attn_tc_eligible(d))
        return tr_attn_tc_bwd(ctx->stream, dq, dk, dv, dout, q, k, v, lse, di, d);
    if (d->head_dim <= 64) return bwd_drop<2, T>(ctx, dq, dk, dv, dout, q, k, v, lse, di, d);
    if (d->head_dim <= 128) return bwd_drop<4, T>(ctx, dq, dk, dv, dout, q, k, v, lse, di, d);
    return bwd_drop<8, T>(ctx, dq, dk, dv, dout, q, k, v, lse, di, d);
}

tr_status tr_cuda_attention_fwd(float *out, float *lse, const float *q, const float *k,
                                const float *v, const tr_attn_desc *d) {
    return attention_fwd("attention_fwd", out, lse, q, k, v, d);
}

tr_status tr_cuda_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                const float *k, const float *v, const float *out, const float *lse,
                                const tr_attn_desc *d) {
    return attention_bwd("attention_bwd", dq, dk, dv, dout, q, k, v, out, lse, d);
}

tr_status tr_cuda_attention_merge(float *out, float *lse, int64_t lse_ld, const float *out_b,
                                  const float *lse_b, int rows, int heads, int head_dim) {
    if (rows < 0 || heads < 1 || head_dim < 1 || lse_ld < rows) return TR_ERR_INVALID;
    if (rows && (!out || !lse || !out_b || !lse_b)) return TR_ERR_INVALID;
    if (!rows) return TR_OK;
    TR_CUDA_CTX("attention_merge");
    int64_t n = (int64_t)rows * heads;
    attn_merge_kernel<<<tr_cuda_blocks(n, 256), 256, 0, ctx->stream>>>(
        out, lse, lse_ld, out_b, lse_b, rows, heads, head_dim);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

typedef __nv_bfloat16 bf16;

extern "C" tr_status tr_cuda_attention_fwd_bf16(uint16_t *out, float *lse, const uint16_t *q,
                                                const uint16_t *k, const uint16_t *v,
                                                const tr_attn_desc *d) {
    return attention_fwd("attention_fwd_bf16", (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k,
                         (const bf16 *)v, d);
}

extern "C" tr_status tr_cuda_attention_bwd_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv,
                                                const uint16_t *dout, const uint16_t *q,
                                                const uint16_t *k, const uint16_t *v,
                                                const uint16_t *out, const float *lse,
                                                const tr_attn_desc *d) {
    return attention_bwd("attention_bwd_bf16", (bf16 *)dq, (bf16 *)dk, (bf16 *)dv,
                         (const bf16 *)dout, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v,
                         (const bf16 *)out, lse, d);
}
