/* tr_ops.widen_lowp: the dtype dispatch over mixed.cu's element-wise casts (exact widening; they
 * check n, NULL pointers and overlap, and launch on the bound stream). */
#include "kernels/cuda/cuda_mixed.h"

extern "C" tr_status tr_cuda_widen_lowp(tr_lowp dtype, float *dst, const uint16_t *src, int64_t n) {
    if (dtype == TR_LOWP_BF16) return tr_cuda_bf16_to_f32(dst, src, n);
    if (dtype == TR_LOWP_F16) return tr_cuda_f16_to_f32(dst, src, n);
    return TR_ERR_INVALID;
}
