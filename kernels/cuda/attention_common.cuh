/* Internal: what the two CUDA attentions share. The fp32 SIMT kernels (attention.cu) run for
 * lowp == 0 and any head_dim; the tensor-core kernels (attention_tc.cu) run for desc->lowp on
 * sm_80+ with head_dim 16, 32, 64 or 128. Both read the same shapes, masks and document rule, and
 * attention.cu owns the argument checks, the doc_start validation and the di vector. */
#ifndef TR_CUDA_ATTENTION_COMMON_CUH
#define TR_CUDA_ATTENTION_COMMON_CUH

#include <cuda_bf16.h>

#include "kernels/common/attn_dropout.h"
#include "kernels/cuda/cuda_common.cuh"

struct att_shape {
    int T, H, G, D, hpg, causal;
    float scale;
    const int32_t *ds; /* doc_start [B, T] or NULL */
    /* Attention dropout (kernels/common/attn_dropout.h), read by the kernels' DROP
     * instantiations only (launched when desc->dropout is nonzero, so the kernels without it are
     * the code and registers of the plain op): the keep threshold, 1 / (1 - p) and the mask's
     * coordinates. */
    uint32_t drop_thr;
    float keep_scale;
    uint64_t drop_seed, drop_round;
    int drop_layer, head_offset;
    int drop_row0, drop_q0, drop_k0; /* tr_attn_desc.dropout_row0 / _q0 / _k0 */
};

static inline att_shape att_shape_of(const tr_attn_desc *d) {
    att_shape s = {};
    s.T = d->seq, s.H = d->heads, s.G = d->groups, s.D = d->head_dim;
    s.hpg = d->heads / d->groups, s.causal = d->causal != 0;
    s.scale = d->scale, s.ds = d->doc_start;
    if (d->dropout != 0.0f) {
        s.drop_thr = tr_attn_drop_threshold(d->dropout);
        s.keep_scale = 1.0f / (1.0f - d->dropout);
        s.drop_seed = d->dropout_seed;
        s.drop_round = d->dropout_round;
        s.drop_layer = d->dropout_layer;
        s.head_offset = d->head_offset;
        s.drop_row0 = d->dropout_row0, s.drop_q0 = d->dropout_q0, s.drop_k0 = d->dropout_k0;
    }
    return s;
}

/* The mask stream of (batch b, local head h). */
__device__ __forceinline__ tr_attn_drop_stream att_drop_stream(const att_shape &s, int b, int h) {
    return tr_attn_drop_stream_of(s.drop_seed, s.drop_round, s.drop_layer, s.head_offset + h,
                                  b + s.drop_row0);
}

/* One entry's mask: 1 / (1 - p) where (query t, key) is kept, 0 where dropped. */
__device__ __forceinline__ float att_drop_mul(const att_shape &s, tr_attn_drop_stream st, int t,
                                              int key) {
    t += s.drop_q0, key += s.drop_k0;
    return tr_attn_drop_kept(tr_attn_drop_draw(st, t, key), t, key, s.drop_thr) ? s.keep_scale
                                                                                : 0.0f;
}

__device__ __forceinline__ int doc_lo(const att_shape &s, int b, int t) {
    return s.ds ? s.ds[(int64_t)b * s.T + t] : 0;
}

/* Whether query t sees key `key`: not after it when causal, and not before t's document start lo.
 * Bounds (key and query inside the tensor and the staged tiles) are the callers'. */
__device__ __forceinline__ bool att_sees(const att_shape &s, int key, int t, int lo) {
    return (!s.causal || key <= t) && key >= lo;
}

/* One past the last query that may see a key before kend: the first t >= kend whose document
 * starts at or after kend (doc starts never decrease along a row). */
__device__ __forceinline__ int query_end(const att_shape &s, int b, int kend) {
    if (!s.ds || kend >= s.T) return s.T;
    int lo = kend, hi = s.T;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (s.ds[(int64_t)b * s.T + mid] >= kend)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

__device__ __forceinline__ int64_t q_off(const att_shape &s, int b, int t, int h) {
    return (((int64_t)b * s.T + t) * s.H + h) * s.D;
}
__device__ __forceinline__ int64_t kv_off(const att_shape &s, int b, int t, int g) {
    return (((int64_t)b * s.T + t) * s.G + g) * s.D;
}

/* Tensors are fp32 (the op table) or bf16 (cuda_mixed.h); arithmetic is fp32. */
__device__ __forceinline__ float ld(const float *p, int64_t i) {
    return p[i];
}
__device__ __forceinline__ float ld(const __nv_bfloat16 *p, int64_t i) {
    return __bfloat162float(p[i]);
}
__device__ __forceinline__ void st(float *p, int64_t i, float v) {
    p[i] = v;
}
__device__ __forceinline__ void st(__nv_bfloat16 *p, int64_t i, float v) {
    p[i] = __float2bfloat16_rn(v);
}

/* The tensor-core path (attention_tc.cu). eligible: desc->lowp set, head_dim in {16, 32, 64,
 * 128} and a device of compute capability 8.0 or more; otherwise the SIMT kernels run. The
 * launchers take checked arguments and, for backward, di [B, T, H] = rowsum(dO * O). */
bool tr_attn_tc_eligible(const tr_attn_desc *d);
tr_status tr_attn_tc_fwd(cudaStream_t st, float *out, float *lse, const float *q, const float *k,
                         const float *v, const tr_attn_desc *d);
tr_status tr_attn_tc_fwd(cudaStream_t st, __nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q,
                         const __nv_bfloat16 *k, const __nv_bfloat16 *v, const tr_attn_desc *d);
tr_status tr_attn_tc_bwd(cudaStream_t st, float *dq, float *dk, float *dv, const float *dout,
                         const float *q, const float *k, const float *v, const float *lse,
                         const float *di, const tr_attn_desc *d);
tr_status tr_attn_tc_bwd(cudaStream_t st, __nv_bfloat16 *dq, __nv_bfloat16 *dk, __nv_bfloat16 *dv,
                         const __nv_bfloat16 *dout, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                         const __nv_bfloat16 *v, const float *lse, const float *di,
                         const tr_attn_desc *d);

#endif
