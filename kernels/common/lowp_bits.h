/* bf16 / fp16 bit patterns of fp32 values and back, on the host and on the device: the storage
 * format of half-precision buffers (the model's weight copy, cast_lowp). The encoding rounds as
 * lowp_round.h does, so widening an encoded value gives exactly tr_round_bf16 / tr_round_f16 of
 * the input; NaN encodes as 0x7fff, the pattern __float2bfloat16_rn and __float2half_rn give. */
#ifndef TR_KERNELS_LOWP_BITS_H
#define TR_KERNELS_LOWP_BITS_H

#include <stdint.h>

#include "kernels/common/lowp_round.h"

TR_HOST_DEVICE uint16_t tr_bf16_bits(float x) {
    if (x != x) return 0x7fffu;
    /* After rounding the low 16 bits are zero, so dropping them is exact. */
    return (uint16_t)(tr_f32_bits(tr_round_bf16(x)) >> 16);
}

TR_HOST_DEVICE float tr_bf16_value(uint16_t h) {
    return tr_f32_from_bits((uint32_t)h << 16);
}

TR_HOST_DEVICE uint16_t tr_f16_bits(float x) {
    if (x != x) return 0x7fffu;
    float r = tr_round_f16(x);
    uint32_t u = tr_f32_bits(r);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    float a = fabsf(r);
    if (a == INFINITY) return (uint16_t)(sign | 0x7c00u);
    /* Subnormal (and zero): r is a multiple of 2^-24 below 2^-14, so the scaled value is an
     * exact integer below 1024. */
    if (a < TR_F16_MIN_NORMAL) return (uint16_t)(sign | (uint16_t)(a * 16777216.0f));
    /* Normal: rebias the exponent (127 -> 15); the low 13 mantissa bits are zero. */
    uint32_t exp = ((u >> 23) & 0xffu) - 127u + 15u;
    return (uint16_t)(sign | (exp << 10) | ((u >> 13) & 0x3ffu));
}

TR_HOST_DEVICE float tr_f16_value(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu) return tr_f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v = (float)man * 5.9604644775390625e-08f; /* man * 2^-24, exact */
        return sign ? -v : v;
    }
    return tr_f32_from_bits(sign | ((exp - 15u + 127u) << 23) | (man << 13));
}

TR_HOST_DEVICE uint16_t tr_lowp_bits(int dtype_is_bf16, float x) {
    return dtype_is_bf16 ? tr_bf16_bits(x) : tr_f16_bits(x);
}

TR_HOST_DEVICE float tr_lowp_value(int dtype_is_bf16, uint16_t h) {
    return dtype_is_bf16 ? tr_bf16_value(h) : tr_f16_value(h);
}

#endif
