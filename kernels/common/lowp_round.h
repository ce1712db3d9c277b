/* Rounding of fp32 values to the nearest bf16 / fp16 value (round to nearest, ties to even),
 * returned as fp32. This is what a tensor core sees of an fp32 tensor cast to half precision:
 * the CPU backend emulates half-precision GEMMs by rounding the operands with these, and the
 * unit tests use them as the scalar reference. fp16 overflows to inf as the hardware cast does;
 * its subnormals are kept (spacing 2^-24), as __float2half_rn keeps them. */
#ifndef TR_KERNELS_LOWP_ROUND_H
#define TR_KERNELS_LOWP_ROUND_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/common/hostdev.h"

TR_HOST_DEVICE uint32_t tr_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

TR_HOST_DEVICE float tr_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Drops the low `drop` mantissa bits with ties to even; a carry out of the mantissa moves to
 * the next binade, and out of the largest finite binade to inf, which is exactly RNE. */
TR_HOST_DEVICE float tr_round_mantissa(float x, int drop) {
    uint32_t u = tr_f32_bits(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return x; /* inf and NaN unchanged */
    uint32_t half = (1u << (drop - 1)) - 1u, lsb = (u >> drop) & 1u;
    u += half + lsb;
    u &= ~((1u << drop) - 1u);
    return tr_f32_from_bits(u);
}

TR_HOST_DEVICE float tr_round_bf16(float x) {
    return tr_round_mantissa(x, 16);
}

#define TR_F16_MAX        65504.0f
#define TR_F16_MIN_NORMAL 6.103515625e-05f /* 2^-14 */

TR_HOST_DEVICE float tr_round_f16(float x) {
    if (x != x) return x;
    float a = fabsf(x);
    if (a < TR_F16_MIN_NORMAL) {
        /* fp16 subnormals are the multiples of 2^-24: scaling by powers of two is exact here,
         * and rintf rounds ties to even in the default rounding mode. */
        return rintf(x * 16777216.0f) * 5.9604644775390625e-08f;
    }
    float r = tr_round_mantissa(x, 13);
    if (fabsf(r) > TR_F16_MAX) return x > 0 ? INFINITY : -INFINITY;
    return r;
}

#endif
