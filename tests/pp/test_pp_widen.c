/* widen_lowp on the CPU table, the receiving side of half-precision pipeline messages: every one
 * of the 65536 bit patterns of each format widens to a value that cast_lowp maps back to the same
 * pattern (NaNs to the canonical 0x7fff, still NaN), fp16 agrees with the compiler's _Float16
 * where it has one, and a cast then widened tensor equals round_lowp of it (what the receiving
 * stage works on), across the blocks the thread pool splits large tensors into. */
#include <math.h>
#include <string.h>

#include "tests/unit/kernels/test_ops_util.h"

#define ops (tr_ops_cpu())

enum { PATTERNS = 65536 };

static void test_every_pattern(void) {
    uint16_t *h = malloc(sizeof *h * PATTERNS), *back = malloc(sizeof *back * PATTERNS);
    float *v = malloc(sizeof *v * PATTERNS);
    for (int i = 0; i < PATTERNS; i++) h[i] = (uint16_t)i;
    for (int t = TR_LOWP_BF16; t <= TR_LOWP_F16; t++) {
        CHECK(ops->widen_lowp((tr_lowp)t, v, h, PATTERNS) == TR_OK);
        CHECK(ops->cast_lowp((tr_lowp)t, back, v, PATTERNS) == TR_OK);
        int bad = 0, nans = 0;
        for (int i = 0; i < PATTERNS; i++) {
            if (isnan(v[i])) {
                nans++;
                bad += back[i] != 0x7fffu;
            } else {
                bad += back[i] != h[i];
            }
        }
        CHECK_INT_EQ(bad, 0);
        /* bf16: exponent all ones with a non-zero 7-bit mantissa, both signs; fp16: 10 bits. */
        CHECK_INT_EQ(nans, t == TR_LOWP_BF16 ? 2 * 127 : 2 * 1023);
    }
    CHECK(ops->widen_lowp(TR_LOWP_BF16, v, h, PATTERNS) == TR_OK);
    CHECK(v[0x3f80] == 1.0f && v[0xbf80] == -1.0f && v[0x7f80] == INFINITY);
    CHECK(ops->widen_lowp(TR_LOWP_F16, v, h, PATTERNS) == TR_OK);
    CHECK(v[0x3c00] == 1.0f && v[0x7bff] == 65504.0f && v[0xfc00] == -INFINITY);
    CHECK(v[0x0001] == ldexpf(1.0f, -24) && signbit(v[0x8000]) && v[0x8000] == 0.0f);
#ifdef __FLT16_MAX__
    int bad = 0;
    for (int i = 0; i < PATTERNS; i++) {
        _Float16 f;
        memcpy(&f, &h[i], sizeof f);
        float want = (float)f;
        bad += !(isnan(want) ? isnan(v[i]) : memcmp(&want, &v[i], sizeof want) == 0);
    }
    CHECK_INT_EQ(bad, 0);
#endif
    free(h), free(back), free(v);
}

static void test_round_trip_is_round_lowp(void) {
    /* Not a multiple of the pool's 4096-element blocks: a tail after the blocks. */
    const int64_t n = 3 * 4096 + 123;
    float *x = malloc(sizeof *x * (size_t)n), *r = malloc(sizeof *r * (size_t)n);
    float *w = malloc(sizeof *w * (size_t)n);
    uint16_t *h = malloc(sizeof *h * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = rng_uniform(-3.0f, 3.0f) * exp2f(rng_uniform(-20, 12));
    for (int t = TR_LOWP_BF16; t <= TR_LOWP_F16; t++) {
        memcpy(r, x, sizeof *r * (size_t)n);
        CHECK(ops->round_lowp((tr_lowp)t, r, n) == TR_OK);
        CHECK(ops->cast_lowp((tr_lowp)t, h, x, n) == TR_OK);
        for (int64_t i = 0; i < n; i++) w[i] = NAN;
        CHECK(ops->widen_lowp((tr_lowp)t, w, h, n) == TR_OK);
        CHECK(memcmp(w, r, sizeof *r * (size_t)n) == 0);
    }
    /* Argument checks: dtype, sizes, NULL, overlap. */
    CHECK(ops->widen_lowp((tr_lowp)0, w, h, 4) == TR_ERR_INVALID);
    CHECK(ops->widen_lowp(TR_LOWP_BF16, w, h, -1) == TR_ERR_INVALID);
    CHECK(ops->widen_lowp(TR_LOWP_BF16, NULL, h, 4) == TR_ERR_INVALID);
    CHECK(ops->widen_lowp(TR_LOWP_BF16, w, (const uint16_t *)(const void *)(w + 1), 4) ==
          TR_ERR_INVALID);
    CHECK(ops->widen_lowp(TR_LOWP_BF16, NULL, NULL, 0) == TR_OK);
    free(x), free(r), free(w), free(h);
}

TR_TEST_MAIN(TR_TEST(test_every_pattern), TR_TEST(test_round_trip_is_round_lowp))
