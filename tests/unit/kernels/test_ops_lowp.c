/* The mixed-precision ops of the CPU table: gemm_lowp against a scalar GEMM on operands rounded by
 * a reference written here (bf16: the nearer of the two neighbouring bf16 values, compared in
 * double, ties to the even one; fp16: the compiler's _Float16 conversion), fp16 overflow to inf,
 * round_lowp, and the loss-scaling unscale_check. */
#include <string.h>

#include "tests/unit/kernels/test_ops_util.h"

#define ops (tr_ops_cpu())

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Independent of kernels/common/lowp_round.h: the two bf16 candidates around x and a distance
 * comparison, which is RNE by definition. */
static float ref_bf16(float x) {
    if (!isfinite(x)) return x;
    uint32_t u = bits_of(x), lo_bits = u & 0xffff0000u;
    if (lo_bits == u) return x;
    float lo = from_bits(lo_bits), hi = from_bits(lo_bits + 0x10000u); /* away from zero */
    double dlo = fabs((double)x - (double)lo), dhi = fabs((double)hi - (double)x);
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo_bits >> 16) & 1u ? hi : lo;
}

#ifdef __FLT16_MAX__
static float ref_f16(float x) {
    return (float)(_Float16)x;
}
#endif

static float ref_round(tr_lowp t, float x) {
#ifdef __FLT16_MAX__
    if (t == TR_LOWP_F16) return ref_f16(x);
#endif
    (void)t;
    return ref_bf16(x);
}

/* C = alpha op(A) op(B) + beta C in double over the rounded operands. */
static void ref_gemm(tr_lowp t, tr_transpose ta, tr_transpose tb, int m, int n, int k, float alpha,
                     const float *a, int lda, const float *b, int ldb, float beta, float *c,
                     int ldc) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int p = 0; p < k; p++) {
                float av = ta == TR_TRANS ? a[(int64_t)p * lda + i] : a[(int64_t)i * lda + p];
                float bv = tb == TR_TRANS ? b[(int64_t)j * ldb + p] : b[(int64_t)p * ldb + j];
                s += (double)ref_round(t, av) * (double)ref_round(t, bv);
            }
            float *cv = &c[(int64_t)i * ldc + j];
            *cv = (float)(alpha * s + (beta == 0.0f ? 0.0 : (double)beta * *cv));
        }
}

/* The rounding itself on values where the answer is known by construction. */
static void test_reference_rounding_cases(void) {
    /* 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties go to the even mantissa (1). */
    float one_tie = from_bits(0x3f808000u);
    float a = one_tie, b = from_bits(0x3f818000u); /* 1 + 3*2^-8: tie, rounds up to even */
    CHECK(ops->round_lowp(TR_LOWP_BF16, &a, 1) == TR_OK);
    CHECK(ops->round_lowp(TR_LOWP_BF16, &b, 1) == TR_OK);
    CHECK(a == 1.0f);
    CHECK(b == 1.0f + 4.0f / 256.0f);
    /* fp16: 65504 is the largest finite; 65519 rounds down to it, 65520 (a tie with odd 65504)
     * overflows, as the hardware cast does. */
    float h[4] = {65519.0f, 65520.0f, -70000.0f, 1e-8f};
    CHECK(ops->round_lowp(TR_LOWP_F16, h, 4) == TR_OK);
    CHECK(h[0] == 65504.0f);
    CHECK(isinf(h[1]) && h[1] > 0);
    CHECK(isinf(h[2]) && h[2] < 0);
    /* 1e-8 is below half the smallest fp16 subnormal (2^-24 ~ 5.96e-8): zero. */
    CHECK(h[3] == 0.0f);
    float nan = NAN;
    CHECK(ops->round_lowp(TR_LOWP_BF16, &nan, 1) == TR_OK);
    CHECK(isnan(nan));
    CHECK(ops->round_lowp((tr_lowp)0, h, 1) == TR_ERR_INVALID);
}

/* round_lowp over many random magnitudes equals the reference element for element. */
static void test_round_matches_reference(void) {
    rng_seed(11);
    enum { N = 20000 };
    for (int t = TR_LOWP_BF16; t <= TR_LOWP_F16; t++) {
        float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
        for (int i = 0; i < N; i++) {
            /* magnitudes 2^-30 .. 2^20: fp16 subnormals, normals and overflow */
            float e = rng_uniform(-30.0f, 20.0f);
            x[i] = (rng_next() & 1 ? -1.0f : 1.0f) * exp2f(e) * rng_uniform(1.0f, 2.0f);
            y[i] = x[i];
        }
        CHECK(ops->round_lowp((tr_lowp)t, y, N) == TR_OK);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            float r = ref_round((tr_lowp)t, x[i]);
            if (!(r == y[i] || (isnan(r) && isnan(y[i])))) bad++;
        }
        CHECK_INT_EQ(bad, 0);
        free(x);
        free(y);
    }
}

static void check_gemm_case(tr_lowp t, tr_transpose ta, tr_transpose tb, int m, int n, int k,
                            float beta) {
    /* Leading dimensions wider than needed, so strided operands are exercised. */
    int lda = (ta == TR_TRANS ? m : k) + 3, ldb = (tb == TR_TRANS ? k : n) + 2, ldc = n + 1;
    int64_t na = (int64_t)(ta == TR_TRANS ? k : m) * lda,
            nb = (int64_t)(tb == TR_TRANS ? n : k) * ldb;
    float *a = rand_buf(na, -2.0f, 2.0f), *b = rand_buf(nb, -2.0f, 2.0f);
    float *c = rand_buf((int64_t)m * ldc, -1.0f, 1.0f), *want = malloc(sizeof(float) * m * ldc);
    memcpy(want, c, sizeof(float) * m * ldc);
    float *plain = malloc(sizeof(float) * m * ldc);
    memcpy(plain, c, sizeof(float) * m * ldc);
    CHECK(ops->gemm_lowp(t, ta, tb, m, n, k, 0.5f, a, lda, b, ldb, beta, c, ldc) == TR_OK);
    ref_gemm(t, ta, tb, m, n, k, 0.5f, a, lda, b, ldb, beta, want, ldc);
    CHECK(ops->gemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, beta, plain, ldc) == TR_OK);
    /* Against the reference: only the fp32 summation order differs. Against the fp32 GEMM: the
     * operand rounding must show (else the low-precision path was not taken). */
    double err = 0, ref = 0, dev = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            int64_t e = (int64_t)i * ldc + j;
            err += pow(c[e] - want[e], 2);
            ref += pow(want[e], 2);
            dev += pow(plain[e] - want[e], 2);
        }
    CHECK(sqrt(err / ref) < 1e-6);
    CHECK(sqrt(dev / ref) > 1e-5);
    free(a);
    free(b);
    free(c);
    free(want);
    free(plain);
}

static void test_gemm_lowp_matches_rounded_reference(void) {
    rng_seed(12);
    for (int t = TR_LOWP_BF16; t <= TR_LOWP_F16; t++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                check_gemm_case((tr_lowp)t, (tr_transpose)ta, (tr_transpose)tb, 7, 13, 33, 0.0f);
                check_gemm_case((tr_lowp)t, (tr_transpose)ta, (tr_transpose)tb, 16, 5, 64, 1.0f);
            }
}

/* An fp16 operand beyond 65504 becomes inf, so its products are inf (or NaN against 0), while
 * bf16 keeps the value finite. */
static void test_gemm_lowp_f16_overflow(void) {
    float a[2] = {70000.0f, 1.0f}, b[2] = {1.0f, 1.0f}, c[1] = {0};
    CHECK(ops->gemm_lowp(TR_LOWP_F16, TR_NOTRANS, TR_NOTRANS, 1, 1, 2, 1.0f, a, 2, b, 1, 0.0f, c,
                         1) == TR_OK);
    CHECK(isinf(c[0]));
    CHECK(ops->gemm_lowp(TR_LOWP_BF16, TR_NOTRANS, TR_NOTRANS, 1, 1, 2, 1.0f, a, 2, b, 1, 0.0f, c,
                         1) == TR_OK);
    CHECK(isfinite(c[0]) && fabsf(c[0] - 70001.0f) < 70001.0f / 128.0f);
    /* Argument checks as gemm's; an empty product with beta 0 clears C. */
    CHECK(ops->gemm_lowp((tr_lowp)3, TR_NOTRANS, TR_NOTRANS, 1, 1, 2, 1.0f, a, 2, b, 1, 0.0f, c,
                         1) == TR_ERR_INVALID);
    CHECK(ops->gemm_lowp(TR_LOWP_BF16, TR_NOTRANS, TR_NOTRANS, 1, 1, 2, 1.0f, a, 1, b, 1, 0.0f, c,
                         1) == TR_ERR_INVALID);
    c[0] = NAN;
    CHECK(ops->gemm_lowp(TR_LOWP_BF16, TR_NOTRANS, TR_NOTRANS, 1, 1, 0, 1.0f, a, 1, b, 1, 0.0f, c,
                         1) == TR_OK);
    CHECK(c[0] == 0.0f);
}

static void test_unscale_check(void) {
    float g[4] = {2.0f, -4.0f, 8.0f, 1.0f}, found = 0.0f;
    CHECK(ops->unscale_check(g, 4, 0.25f, &found) == TR_OK);
    CHECK(found == 0.0f);
    CHECK(g[0] == 0.5f && g[1] == -1.0f && g[2] == 2.0f && g[3] == 0.25f);
    g[2] = INFINITY;
    CHECK(ops->unscale_check(g, 4, 0.5f, &found) == TR_OK);
    CHECK(found == 1.0f);
    /* The flag is sticky over calls (several ranges, one verdict) */
    CHECK(ops->unscale_check(g, 2, 1.0f, &found) == TR_OK);
    CHECK(found == 1.0f);
    found = 0.0f;
    g[0] = NAN;
    CHECK(ops->unscale_check(g, 1, 1.0f, &found) == TR_OK);
    CHECK(found == 1.0f);
    CHECK(ops->unscale_check(g, 1, 1.0f, NULL) == TR_ERR_INVALID);
}

TR_TEST_MAIN(TR_TEST(test_reference_rounding_cases), TR_TEST(test_round_matches_reference),
             TR_TEST(test_gemm_lowp_matches_rounded_reference),
             TR_TEST(test_gemm_lowp_f16_overflow), TR_TEST(test_unscale_check))
