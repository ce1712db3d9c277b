/* Launchers of the tensor-core attention kernels (attention_tc_kernels.cuh, which explains the
 * schedule) and the eligibility rule. */
#include "kernels/cuda/attention_tc_kernels.cuh"

namespace {

/* ---- launchers -------------------------------------------------------------------------- */

/* Shared memory beyond 48 KB must be opted into per kernel. */
template <typename K> tr_status tc_allow_smem(K kernel, size_t bytes) {
    if (bytes > 48 * 1024)
        TR_CUDA_TRY(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return TR_OK;
}

/* Dropout runs separate instantiations (DROP), so the kernels without it keep the plain op's
 * code and registers. */
template <int D, typename H, typename T, bool DROP>
tr_status tc_fwd_launch(cudaStream_t st, T *out, float *lse, const T *q, const T *k, const T *v,
                        const tr_attn_desc *d) {
    constexpr size_t smem = fwd_smem<D>();
    TR_TRY(tc_allow_smem(tc_fwd_kernel<D, H, T, DROP>, smem));
    tc_fwd_kernel<D, H, T, DROP><<<tc_grid(d, d->heads, FW_ROWS), FW_THREADS, smem, st>>>(
        out, lse, q, k, v, att_shape_of(d));
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

template <int D, typename H, typename T, bool DROP>
tr_status tc_bwd_launch(cudaStream_t st, T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k,
                        const T *v, const float *lse, const float *di, const tr_attn_desc *d) {
    constexpr size_t smem_dkv = dkv_smem<D>(), smem_dq = dq_smem<D>();
    TR_TRY(tc_allow_smem(tc_dkv_kernel<D, H, T, DROP>, smem_dkv));
    TR_TRY(tc_allow_smem(tc_dq_kernel<D, H, T, DROP>, smem_dq));
    att_shape s = att_shape_of(d);
    tc_dkv_kernel<D, H, T, DROP><<<tc_grid(d, d->groups, TC_ROWS), TC_THREADS, smem_dkv, st>>>(
        dk, dv, dout, q, k, v, lse, di, s);
    TR_CUDA_LAUNCHED();
    tc_dq_kernel<D, H, T, DROP>
        <<<tc_grid(d, d->heads, TC_ROWS), TC_THREADS, smem_dq, st>>>(dq, dout, q, k, v, lse, di, s);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

template <int D, typename H, typename T>
tr_status tc_fwd(cudaStream_t st, T *out, float *lse, const T *q, const T *k, const T *v,
                 const tr_attn_desc *d) {
    if (d->dropout != 0.0f) return tc_fwd_launch<D, H, T, true>(st, out, lse, q, k, v, d);
    return tc_fwd_launch<D, H, T, false>(st, out, lse, q, k, v, d);
}

template <int D, typename H, typename T>
tr_status tc_bwd(cudaStream_t st, T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k,
                 const T *v, const float *lse, const float *di, const tr_attn_desc *d) {
    if (d->dropout != 0.0f)
        return tc_bwd_launch<D, H, T, true>(st, dq, dk, dv, dout, q, k, v, lse, di, d);
    return tc_bwd_launch<D, H, T, false>(st, dq, dk, dv, dout, q, k, v, lse, di, d);
}

template <typename H, typename T>
tr_status tc_fwd_d(cudaStream_t st, T *out, float *lse, const T *q, const T *k, const T *v,
                   const tr_attn_desc *d) {
    switch (d->head_dim) {
    case 16:
        return tc_fwd<16, H>(st, out, lse, q, k, v, d);
    case 32:
        return tc_fwd<32, H>(st, out, lse, q, k, v, d);
    case 64:
        return tc_fwd<64, H>(st, out, lse, q, k, v, d);
    case 128:
        return tc_fwd<128, H>(st, out, lse, q, k, v, d);
    default:
        return TR_ERR_INVALID; /* tr_attn_tc_eligible keeps other sizes away */
    }
}

template <typename H, typename T>
tr_status tc_bwd_d(cudaStream_t st, T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k,
                   const T *v, const float *lse, const float *di, const tr_attn_desc *d) {
    switch (d->head_dim) {
    case 16:
        return tc_bwd<16, H>(st, dq, dk, dv, dout, q, k, v, lse, di, d);
    case 32:
        return tc_bwd<32, H>(st, dq, dk, dv, dout, q, k, v, lse, di, d);
    case 64:
        return tc_bwd<64, H>(st, dq, dk, dv, dout, q, k, v, lse, di, d);
    case 128:
        return tc_bwd<128, H>(st, dq, dk, dv, dout, q, k, v, lse, di, d);
    default:
        return TR_ERR_INVALID;
    }
}

template <typename T>
tr_status fwd_any(cudaStream_t st, T *out, float *lse, const T *q, const T *k, const T *v,
                  const tr_attn_desc *d) {
    if (d->lowp == TR_LOWP_F16) return tc_fwd_d<__half>(st, out, lse, q, k, v, d);
    return tc_fwd_d<__nv_bfloat16>(st, out, lse, q, k, v, d);
}

template <typename T>
tr_status bwd_any(cudaStream_t st, T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k,
                  const T *v, const float *lse, const float *di, const tr_attn_desc *d) {
    if (d->lowp == TR_LOWP_F16) return tc_bwd_d<__half>(st, dq, dk, dv, dout, q, k, v, lse, di, d);
    return tc_bwd_d<__nv_bfloat16>(st, dq, dk, dv, dout, q, k, v, lse, di, d);
}

} // namespace

bool tr_attn_tc_eligible(const tr_attn_desc *d) {
    if (d->lowp != TR_LOWP_BF16 && d->lowp != TR_LOWP_F16) return false;
    int D = d->head_dim;
    if (D != 16 && D != 32 && D != 64 && D != 128) return false;
    /* The fragments draw the mask in 2 x 2 blocks at even coordinates; a block of a sequence
     * at odd ones takes the SIMT kernels, which draw per entry. */
    if (d->dropout != 0.0f && ((d->dropout_q0 | d->dropout_k0) & 1)) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
        return false;
    return major >= 8; /* mma.sync m16n8k16 with bf16 needs sm_80 */
}

tr_status tr_attn_tc_fwd(cudaStream_t st, float *out, float *lse, const float *q, const float *k,
                         const float *v, const tr_attn_desc *d) {
    return fwd_any(st, out, lse, q, k, v, d);
}

tr_status tr_attn_tc_fwd(cudaStream_t st, __nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q,
                         const __nv_bfloat16 *k, const __nv_bfloat16 *v, const tr_attn_desc *d) {
    return fwd_any(st, out, lse, q, k, v, d);
}

tr_status tr_attn_tc_bwd(cudaStream_t st, float *dq, float *dk, float *dv, const float *dout,
                         const float *q, const float *k, const float *v, const float *lse,
                         const float *di, const tr_attn_desc *d) {
    return bwd_any(st, dq, dk, dv, dout, q, k, v, lse, di, d);
}

tr_status tr_attn_tc_bwd(cudaStream_t st, __nv_bfloat16 *dq, __nv_bfloat16 *dk, __nv_bfloat16 *dv,
                         const __nv_bfloat16 *dout, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                         const __nv_bfloat16 *v, const float *lse, const float *di,
                         const tr_attn_desc *d) {
    return bwd_any(st, dq, dk, dv, dout, q, k, v, lse, di, d);
}
