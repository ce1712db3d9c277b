/* Mixed-precision entry points beside the fp32 op table, for the bf16/fp16 training path:
 * bf16 GEMMs with fp32 accumulation (and a fused bias epilogue), casts between fp32 master
 * copies and bf16/fp16 working copies, and the fp16 loss-scaling check. Same conventions as
 * cuda_ops.h: device pointers, the bound context's stream, host-side argument checks.
 * Half-precision tensors are passed as uint16_t so that C callers need no CUDA headers. */
#ifndef TR_CUDA_MIXED_H
#define TR_CUDA_MIXED_H

#include <stdint.h>

#include "core/status.h"
#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tr_cuda_dtype { TR_CUDA_F32 = 0, TR_CUDA_BF16, TR_CUDA_F16 } tr_cuda_dtype;

/* C[m,n] = alpha op(A) op(B) + beta C (+ bias[n] on every row when bias != NULL), row-major as
 * tr_ops.gemm; A and B bf16, accumulation fp32, C of dtype c_type (F32 or BF16). bias is fp32
 * and needs beta == 0 (cuBLASLt's epilogue adds it to the product only). */
tr_status tr_cuda_gemm_bf16(tr_transpose ta, tr_transpose tb, int m, int n, int k, float alpha,
                            const uint16_t *a, int lda, const uint16_t *b, int ldb, float beta,
                            void *c, tr_cuda_dtype c_type, int ldc, const float *bias);

/* The same with fp16 A and B and an fp32 C, no bias. */
tr_status tr_cuda_gemm_f16(tr_transpose ta, tr_transpose tb, int m, int n, int k, float alpha,
                           const uint16_t *a, int lda, const uint16_t *b, int ldb, float beta,
                           float *c, int ldc);

/* tr_ops.attention_fwd / attention_bwd on bf16 tensors: the same layouts, causal / GQA /
 * document masks, checks and fp32 lse [B,H,T]; outputs rounded to bf16 (out; dq, dk, dv
 * overwritten). Halves the attention's memory traffic in the bf16 path. desc->lowp picks the
 * arithmetic as for the fp32 entries: 0 the fp32 SIMT kernels, bf16 / fp16 the tensor cores. */
tr_status tr_cuda_attention_fwd_bf16(uint16_t *out, float *lse, const uint16_t *q,
                                     const uint16_t *k, const uint16_t *v, const tr_attn_desc *d);
tr_status tr_cuda_attention_bwd_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv, const uint16_t *dout,
                                     const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                     const uint16_t *out, const float *lse, const tr_attn_desc *d);

/* Round-to-nearest-even casts; dst and src must not overlap. */
tr_status tr_cuda_f32_to_bf16(uint16_t *dst, const float *src, int64_t n);
tr_status tr_cuda_bf16_to_f32(float *dst, const uint16_t *src, int64_t n);
tr_status tr_cuda_f32_to_f16(uint16_t *dst, const float *src, int64_t n);
tr_status tr_cuda_f16_to_f32(float *dst, const uint16_t *src, int64_t n);

/* tr_ops.gemm_lowp and tr_ops.round_lowp (the op table's entries): fp32 buffers, operands cast
 * to bf16/fp16 scratch, cuBLASLt with fp32 accumulation. */
tr_status tr_cuda_gemm_lowp(tr_lowp dtype, tr_transpose ta, tr_transpose tb, int m, int n, int k,
                            float alpha, const float *a, int lda, const float *b, int ldb,
                            float beta, float *c, int ldc);
tr_status tr_cuda_round_lowp(tr_lowp dtype, float *x, int64_t n);
/* tr_ops.gemm_lowp_ex: only the fp32 operands are cast into scratch, half-precision ones go to
 * cuBLASLt as they are (their alignment is passed to its heuristics; 16-byte aligned operands
 * and leading dimensions get the fast kernels); the bias is bf16's fused epilogue, fp16's a
 * kernel after the GEMM. tr_ops.cast_lowp: tr_cuda_f32_to_bf16 / tr_cuda_f32_to_f16. */
tr_status tr_cuda_gemm_lowp_ex(tr_lowp dtype, tr_transpose ta, tr_transpose tb, int m, int n, int k,
                               float alpha, tr_gemm_operand a, tr_gemm_operand b, float beta,
                               float *c, int ldc, const float *bias);
tr_status tr_cuda_cast_lowp(tr_lowp dtype, uint16_t *dst, const float *src, int64_t n);
/* tr_ops.widen_lowp: tr_cuda_bf16_to_f32 / tr_cuda_f16_to_f32. */
tr_status tr_cuda_widen_lowp(tr_lowp dtype, float *dst, const uint16_t *src, int64_t n);

/* fp16 dynamic loss scaling: g *= inv_scale and *found_inf (device float, not reset here) is set
 * to 1 when any element of g is inf or NaN, so the caller skips the step and lowers the scale. */
tr_status tr_cuda_unscale_check(float *g, int64_t n, float inv_scale, float *found_inf);

#ifdef __cplusplus
}
#endif

#endif
