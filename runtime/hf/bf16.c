/* fp32 to bf16 bit patterns for the export (runtime/hf/internal.h), four at a time with SSE2
 * where the compiler targets it. The rounding is tr_bf16_bits' (kernels/common/lowp_bits.h):
 * adding 0x7fff plus the kept lsb and dropping the low half is round to nearest, ties to even,
 * and also carries the largest finite values to inf and leaves inf as it is; only NaN needs its
 * own case (0x7fff). No finite or infinite pattern overflows the 32-bit sum. The tail that
 * fills no whole vector goes through tr_bf16_bits itself. */
#include <stdint.h>

#include "kernels/common/lowp_bits.h"
#include "runtime/hf/internal.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

void tr_hf_bf16_from_f32(uint16_t *out, const float *in, int64_t n) {
    int64_t i = 0;
#ifdef __SSE2__
    const __m128i bias = _mm_set1_epi32(0x7fff), lsb = _mm_set1_epi32(1),
                  abs_mask = _mm_set1_epi32(0x7fffffff), inf = _mm_set1_epi32(0x7f800000),
                  nan = _mm_set1_epi32(0x7fff);
    for (; i + 8 <= n; i += 8) {
        __m128i r[2];
        for (int h = 0; h < 2; h++) {
            __m128i u = _mm_loadu_si128((const __m128i *)(const void *)(in + i + 4 * h));
            __m128i s =
                _mm_add_epi32(u, _mm_add_epi32(bias, _mm_and_si128(_mm_srli_epi32(u, 16), lsb)));
            /* An arithmetic shift keeps each result in int16's range as its low 16 bits, so
             * the signed-saturating pack below passes them through unchanged. */
            s = _mm_srai_epi32(s, 16);
            __m128i is_nan = _mm_cmpgt_epi32(_mm_and_si128(u, abs_mask), inf);
            s = _mm_or_si128(_mm_andnot_si128(is_nan, s), _mm_and_si128(is_nan, nan));
            r[h] = s;
        }
        _mm_storeu_si128((__m128i *)(void *)(out + i), _mm_packs_epi32(r[0], r[1]));
    }
#endif
    for (; i < n; i++) out[i] = tr_bf16_bits(in[i]);
}
