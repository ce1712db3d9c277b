/* Where the operands of the tensor-core instruction mma.sync.aligned.m16n8k16 (16-bit A and B,
 * fp32 C and D) live in a warp's registers, after the PTX ISA's "matrix fragments for
 * mma.m16n8k16". Lane l has group g = l / 4 and thread-in-group t = l % 4; a 32-bit register
 * packs two 16-bit elements, the lower-indexed one in the low half.
 *
 *  - A, 16x16 (rows x k), 4 registers, element e = 0..7 is half e % 2 of register e / 2;
 *  - B, 16x8 (k x n), 2 registers, element e = 0..3 likewise;
 *  - C and D, 16x8 (rows x n), 4 fp32 registers, element e = 0..3.
 *
 * The CUDA attention (kernels/cuda/attention_tc.cu) addresses its shared-memory tiles, masks and
 * output stores through these functions, and tests/unit/kernels/test_mma_layout.c checks the
 * properties it relies on (each fragment covered exactly once; register pairs adjacent along the
 * dimension that is contiguous in shared memory; two n8 C tiles are one k16 A fragment). */
#ifndef TR_KERNELS_MMA_LAYOUT_H
#define TR_KERNELS_MMA_LAYOUT_H

#include "kernels/common/hostdev.h"

typedef struct tr_mma_rc {
    int row, col;
} tr_mma_rc;

/* A: register 0 (row g, cols 2t..2t+1), 1 (row g+8), 2 (row g, cols +8), 3 (row g+8, cols +8). */
TR_HOST_DEVICE tr_mma_rc tr_mma_a_elem(int lane, int e) {
    tr_mma_rc r;
    r.row = (lane >> 2) + 8 * ((e >> 1) & 1);
    r.col = 2 * (lane & 3) + (e & 1) + 8 * (e >> 2);
    return r;
}

/* B: row = k, col = n; register 0 holds k = 2t..2t+1, register 1 k = 2t+8..2t+9, both at n = g. */
TR_HOST_DEVICE tr_mma_rc tr_mma_b_elem(int lane, int e) {
    tr_mma_rc r;
    r.row = 2 * (lane & 3) + (e & 1) + 8 * (e >> 1);
    r.col = lane >> 2;
    return r;
}

/* C/D: elements 0, 1 at row g, cols 2t, 2t+1; elements 2, 3 at row g+8. */
TR_HOST_DEVICE tr_mma_rc tr_mma_c_elem(int lane, int e) {
    tr_mma_rc r;
    r.row = (lane >> 2) + 8 * (e >> 1);
    r.col = 2 * (lane & 3) + (e & 1);
    return r;
}

#endif
