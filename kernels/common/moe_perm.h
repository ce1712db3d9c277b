/* The index rules of the MoE permutation ops (kernels/ops.h, moe_permute and friends), shared by
 * the CPU ops and the CUDA kernels: an index outside its range reads as -1 (padding / dropped),
 * so index arrays in backend memory never make an op touch memory out of range. */
#ifndef TR_KERNELS_MOE_PERM_H
#define TR_KERNELS_MOE_PERM_H

#include <stdint.h>

#include "kernels/common/hostdev.h"

/* The row of assignment a, or -1 (dropped, or outside [0, rows)). */
TR_HOST_DEVICE int tr_moe_row_of(const int32_t *pos, int64_t a, int rows) {
    int r = pos[a];
    return r >= 0 && r < rows ? r : -1;
}

/* The assignment of expert row r, or -1 (padding, or outside [0, n_assign)). */
TR_HOST_DEVICE int64_t tr_moe_assign_of(const int32_t *row_a, int64_t r, int64_t n_assign) {
    int64_t a = row_a[r];
    return a >= 0 && a < n_assign ? a : -1;
}

/* The argument checks both backends make (null pointers only where memory is touched): 1 when
 * the arguments are valid. */
TR_HOST_DEVICE int tr_moe_perm_dims(int rows, int tokens, int topk, int dim) {
    return rows >= 0 && tokens >= 0 && topk >= 1 && dim >= 0;
}

TR_HOST_DEVICE int tr_moe_permute_check(const float *xp, const float *x, const int32_t *row_a,
                                        int rows, int tokens, int topk, int dim) {
    if (!tr_moe_perm_dims(rows, tokens, topk, dim)) return 0;
    return rows && dim && (!xp || !row_a || (tokens && !x)) ? 0 : 1;
}

TR_HOST_DEVICE int tr_moe_gather_check(const float *out, const float *in, const float *prob,
                                       const int32_t *pos, int rows, int tokens, int topk, int dim,
                                       int need_prob) {
    if (!tr_moe_perm_dims(rows, tokens, topk, dim)) return 0;
    return tokens && dim && (!out || !pos || (rows && !in) || (need_prob && !prob)) ? 0 : 1;
}

TR_HOST_DEVICE int tr_moe_unpermute_bwd_check(const float *dye, const float *dprob, const float *dy,
                                              const float *ye, const float *prob,
                                              const int32_t *row_a, const int32_t *pos, int rows,
                                              int tokens, int topk, int dim) {
    if (!tr_moe_perm_dims(rows, tokens, topk, dim)) return 0;
    if (rows && dim && (!dye || !row_a || !dy || !ye || !prob)) return 0;
    return tokens && (!dprob || !pos || (dim && !dy)) ? 0 : 1;
}

#endif
