/* Rewrites of hot loops that must keep the scalar order bit for bit: AdamW's vector variants
 * (AVX-512 where the CPU has it, with the clip scale fused in) and the grad norm's interleaved
 * blocks, each against the plain scalar loop written out here (ISO C: no FMA contraction), over
 * sizes with ragged tails and values from tiny to large. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "tests/unit/harness.h"

static float val(uint64_t i, unsigned seed) {
    uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)seed * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    float u = (float)(h % 1000003u) / 1000003.0f - 0.5f;
    return u * powf(10.0f, (float)((h >> 20) % 9) - 6.0f); /* 1e-6 .. 1e2 */
}

static void test_adamw_equals_scalar(void) {
    static const int64_t sizes[] = {1, 15, 16, 17, 1000, 16384 * 3 + 7, 300001};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *p = malloc(sizeof(float) * n * 8);
        float *g = p + n, *m = g + n, *v = m + n, *rp = v + n, *rm = rp + n, *rv = rm + n;
        for (int64_t i = 0; i < n; i++) {
            p[i] = rp[i] = val(i, 1);
            g[i] = val(i, 2);
            m[i] = rm[i] = val(i, 3);
            v[i] = rv[i] = fabsf(val(i, 4));
        }
        for (int64_t step = 1; step <= 3; step++) {
            tr_adamw_params ap = {.lr = 3e-4f,
                                  .beta1 = 0.9f,
                                  .beta2 = 0.95f,
                                  .eps = 1e-8f,
                                  .weight_decay = 0.1f,
                                  .step = step,
                                  /* step 2 clipped: the fused scale must equal a clip pass */
                                  .grad_scale = step == 2 ? 0.3712f : 0.0f};
            CHECK_INT_EQ(tr_ops_cpu()->adamw(p, g, m, v, n, &ap), TR_OK);
            float bc1 = (float)(1.0 - pow(ap.beta1, (double)step));
            float bc2 = (float)(1.0 - pow(ap.beta2, (double)step));
            float decay = 1.0f - ap.lr * ap.weight_decay;
            for (int64_t i = 0; i < n; i++) {
                float gi = step == 2 ? g[i] * 0.3712f : g[i];
                float mi = ap.beta1 * rm[i] + (1.0f - ap.beta1) * gi;
                float vi = ap.beta2 * rv[i] + (1.0f - ap.beta2) * gi * gi;
                rm[i] = mi;
                rv[i] = vi;
                float pi = rp[i] * decay;
                rp[i] = pi - ap.lr * (mi / bc1) / (sqrtf(vi / bc2) + ap.eps);
            }
        }
        CHECK(!memcmp(p, rp, sizeof(float) * n));
        CHECK(!memcmp(m, rm, sizeof(float) * n));
        CHECK(!memcmp(v, rv, sizeof(float) * n));
        free(p);
    }
}

static void test_sum_squares_block_order(void) {
    static const int64_t sizes[] = {1,         4095, 4096, 4097, 4096 * 9 + 1, 4096 * 200 + 100,
                                    4096 * 333};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int64_t n = sizes[s];
        float *x = malloc(sizeof(float) * n);
        for (int64_t i = 0; i < n; i++) x[i] = val(i, 5) * 1e3f;
        float got = 0.0f;
        CHECK_INT_EQ(tr_ops_cpu()->sum_squares(&got, x, n), TR_OK);
        double total = 0.0; /* docs/kernels.md: fixed 4096-element blocks in double, in order */
        for (int64_t b = 0; b < n; b += 4096) {
            double blk = 0.0;
            for (int64_t i = b; i < n && i < b + 4096; i++) blk += (double)x[i] * x[i];
            total += blk;
        }
        float want = (float)total;
        CHECK(!memcmp(&got, &want, sizeof got));
        free(x);
    }
}

TR_TEST_MAIN(TR_TEST(test_adamw_equals_scalar), TR_TEST(test_sum_squares_block_order))
