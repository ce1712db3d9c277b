/* The ops behind the half-precision weight copy, on the CPU table: cast_lowp's bit patterns
 * (bf16: the top half of round_lowp's value; fp16: the compiler's _Float16 encoding, an
 * independent reference; overflow, subnormals, signed zero, NaN), and gemm_lowp_ex, which must
 * be BITWISE gemm_lowp (plus bias_add) when its half-precision operands come from cast_lowp:
 * every transpose, strided leading dimensions, beta, the bias, and its argument checks. */
#include <string.h>

#include "tests/unit/kernels/test_ops_util.h"

#define ops (tr_ops_cpu())

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Values that exercise every path: normal, tiny (fp16 subnormal), huge (fp16 overflow), ties. */
static float *special_values(int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float e = rng_uniform(-30.0f, 20.0f);
        x[i] = (rng_next() & 1 ? -1.0f : 1.0f) * exp2f(floorf(e)) * rng_uniform(1.0f, 2.0f);
    }
    const float fixed[] = {0.0f,          -0.0f,       1.0f,        65504.0f, 65520.0f,
                           -70000.0f,     INFINITY,    -INFINITY,   1e-8f,    -3e-6f,
                           5.9604645e-8f, 1.00390625f, 1.01171875f, 3.0e38f,  1.0009765625f};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed && (int64_t)i < n; i++) x[i] = fixed[i];
    return x;
}

static void test_cast_bits(void) {
    rng_seed(5);
    enum { N = 20000 };
    float *x = special_values(N), *r = malloc(sizeof(float) * N);
    uint16_t *h = malloc(sizeof(uint16_t) * N);
    /* bf16: the bit pattern is the upper half of the rounded fp32 value. */
    memcpy(r, x, sizeof(float) * N);
    CHECK(ops->round_lowp(TR_LOWP_BF16, r, N) == TR_OK);
    CHECK(ops->cast_lowp(TR_LOWP_BF16, h, x, N) == TR_OK);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        uint32_t u = bits_of(r[i]);
        if ((u & 0xffffu) != 0 || h[i] != (uint16_t)(u >> 16)) bad++;
    }
    CHECK_INT_EQ(bad, 0);
    CHECK(ops->cast_lowp(TR_LOWP_F16, h, x, N) == TR_OK);
#ifdef __FLT16_MAX__
    /* fp16: the compiler's conversion (round to nearest even) gives the reference pattern. */
    bad = 0;
    for (int i = 0; i < N; i++) {
        _Float16 f = (_Float16)x[i];
        uint16_t want;
        memcpy(&want, &f, sizeof want);
        if (h[i] != want) bad++;
    }
    CHECK_INT_EQ(bad, 0);
#endif
    CHECK(h[4] == 0x7c00u && h[5] == 0xfc00u); /* 65520 and -70000 overflow to +-inf */
    CHECK(h[1] == 0x8000u);                    /* -0 keeps its sign */
    /* NaN: the canonical pattern of the CUDA conversions, in both formats. */
    float nan = NAN;
    CHECK(ops->cast_lowp(TR_LOWP_BF16, h, &nan, 1) == TR_OK && h[0] == 0x7fffu);
    CHECK(ops->cast_lowp(TR_LOWP_F16, h, &nan, 1) == TR_OK && h[0] == 0x7fffu);
    /* Argument checks: dtype, sizes, NULL, overlap. */
    CHECK(ops->cast_lowp((tr_lowp)0, h, x, 4) == TR_ERR_INVALID);
    CHECK(ops->cast_lowp(TR_LOWP_BF16, h, x, -1) == TR_ERR_INVALID);
    CHECK(ops->cast_lowp(TR_LOWP_BF16, NULL, x, 4) == TR_ERR_INVALID);
    CHECK(ops->cast_lowp(TR_LOWP_BF16, (uint16_t *)(void *)x, x + 1, 4) == TR_ERR_INVALID);
    CHECK(ops->cast_lowp(TR_LOWP_BF16, NULL, NULL, 0) == TR_OK);
    free(x);
    free(r);
    free(h);
}

/* Stored rows of an operand: op(A) is m x k, so A is m x k (or k x m transposed). */
static int64_t stored(tr_transpose t, int rows, int cols, int ld) {
    return (int64_t)(t == TR_TRANS ? cols : rows) * ld;
}

static void check_case(tr_lowp t, tr_transpose ta, tr_transpose tb, int m, int n, int k, float beta,
                       bool with_bias) {
    int lda = (ta == TR_TRANS ? m : k) + 3, ldb = (tb == TR_TRANS ? k : n) + 2, ldc = n + 1;
    int64_t na = stored(ta, m, k, lda), nb = stored(tb, k, n, ldb), nc = (int64_t)m * ldc;
    float *a = rand_buf(na, -2.0f, 2.0f), *b = rand_buf(nb, -2.0f, 2.0f);
    float *bias = rand_buf(n, -1.0f, 1.0f), *c0 = rand_buf(nc, -1.0f, 1.0f);
    uint16_t *ha = malloc(sizeof(uint16_t) * (size_t)na),
             *hb = malloc(sizeof(uint16_t) * (size_t)nb);
    CHECK(ops->cast_lowp(t, ha, a, na) == TR_OK);
    CHECK(ops->cast_lowp(t, hb, b, nb) == TR_OK);
    float *want = malloc(sizeof(float) * (size_t)nc), *got = malloc(sizeof(float) * (size_t)nc);
    memcpy(want, c0, sizeof(float) * (size_t)nc);
    CHECK(ops->gemm_lowp(t, ta, tb, m, n, k, 0.75f, a, lda, b, ldb, beta, want, ldc) == TR_OK);
    if (with_bias)
        for (int r = 0; r < m; r++)
            CHECK(ops->bias_add(want + (int64_t)r * ldc, bias, 1, n) == TR_OK);
    for (int mask = 0; mask < 4; mask++) {
        bool la = mask & 1, lb = mask & 2;
        tr_gemm_operand oa = {la ? (const void *)ha : a, lda, la};
        tr_gemm_operand ob = {lb ? (const void *)hb : b, ldb, lb};
        memcpy(got, c0, sizeof(float) * (size_t)nc);
        CHECK(ops->gemm_lowp_ex(t, ta, tb, m, n, k, 0.75f, oa, ob, beta, got, ldc,
                                with_bias ? bias : NULL) == TR_OK);
        /* Bitwise, the padding columns of C included (untouched). */
        CHECK(memcmp(got, want, sizeof(float) * (size_t)nc) == 0);
    }
    free(a);
    free(b);
    free(bias);
    free(c0);
    free(ha);
    free(hb);
    free(want);
    free(got);
}

static void test_gemm_ex_bitwise_gemm_lowp(void) {
    rng_seed(21);
    for (int t = TR_LOWP_BF16; t <= TR_LOWP_F16; t++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                check_case((tr_lowp)t, (tr_transpose)ta, (tr_transpose)tb, 7, 13, 33, 0.0f, false);
                check_case((tr_lowp)t, (tr_transpose)ta, (tr_transpose)tb, 16, 5, 64, 1.0f, false);
                check_case((tr_lowp)t, (tr_transpose)ta, (tr_transpose)tb, 9, 24, 17, 0.0f, true);
            }
}

/* The half-precision operand must actually be read as half precision: a bf16 pattern that is
 * not the rounding of the fp32 buffer changes the result. */
static void test_gemm_ex_reads_half_operand(void) {
    float a[2] = {1.0f, 2.0f}, c[1] = {0};
    uint16_t hb[2] = {0x4000u, 0x3f80u}; /* bf16 2.0 and 1.0 */
    tr_gemm_operand oa = {a, 2, false}, ob = {hb, 1, true};
    CHECK(ops->gemm_lowp_ex(TR_LOWP_BF16, TR_NOTRANS, TR_NOTRANS, 1, 1, 2, 1.0f, oa, ob, 0.0f, c, 1,
                            NULL) == TR_OK);
    CHECK(c[0] == 4.0f);
    uint16_t hf[2] = {0x4000u, 0x3c00u}; /* fp16 2.0 and 1.0 */
    ob.p = hf;
    CHECK(ops->gemm_lowp_ex(TR_LOWP_F16, TR_NOTRANS, TR_NOTRANS, 1, 1, 2, 1.0f, oa, ob, 0.0f, c, 1,
                            NULL) == TR_OK);
    CHECK(c[0] == 4.0f);
}

static void test_gemm_ex_arguments(void) {
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4], bias[2] = {10.0f, 20.0f};
    tr_gemm_operand oa = {a, 2, false}, ob = {b, 2, false};
    CHECK(ops->gemm_lowp_ex((tr_lowp)3, TR_NOTRANS, TR_NOTRANS, 2, 2, 2, 1.0f, oa, ob, 0.0f, c, 2,
                            NULL) == TR_ERR_INVALID);
    /* The bias needs beta == 0. */
    CHECK(ops->gemm_lowp_ex(TR_LOWP_BF16, TR_NOTRANS, TR_NOTRANS, 2, 2, 2, 1.0f, oa, ob, 1.0f, c, 2,
                            bias) == TR_ERR_INVALID);
    tr_gemm_operand narrow = {a, 1, false};
    CHECK(ops->gemm_lowp_ex(TR_LOWP_BF16, TR_NOTRANS, TR_NOTRANS, 2, 2, 2, 1.0f, narrow, ob, 0.0f,
                            c, 2, NULL) == TR_ERR_INVALID);
    CHECK(ops->gemm_lowp_ex(TR_LOWP_BF16, TR_NOTRANS, TR_NOTRANS, 2, 2, 2, 1.0f, oa, ob, 0.0f, c, 1,
                            NULL) == TR_ERR_INVALID);
    tr_gemm_operand null_a = {NULL, 2, true};
    CHECK(ops->gemm_lowp_ex(TR_LOWP_BF16, TR_NOTRANS, TR_NOTRANS, 2, 2, 2, 1.0f, null_a, ob, 0.0f,
                            c, 2, NULL) == TR_ERR_INVALID);
    CHECK(ops->gemm_lowp_ex(TR_LOWP_BF16, TR_NOTRANS, TR_NOTRANS, -1, 2, 2, 1.0f, oa, ob, 0.0f, c,
                            2, NULL) == TR_ERR_INVALID);
    /* An empty product: C is cleared (NaN too), then the bias lands on every row. */
    for (int i = 0; i < 4; i++) c[i] = NAN;
    CHECK(ops->gemm_lowp_ex(TR_LOWP_BF16, TR_NOTRANS, TR_NOTRANS, 2, 2, 0, 1.0f, oa, ob, 0.0f, c, 2,
                            bias) == TR_OK);
    CHECK(c[0] == 10.0f && c[1] == 20.0f && c[2] == 10.0f && c[3] == 20.0f);
    /* Empty outputs touch nothing. */
    CHECK(ops->gemm_lowp_ex(TR_LOWP_F16, TR_NOTRANS, TR_NOTRANS, 0, 2, 2, 1.0f, oa, ob, 0.0f, NULL,
                            2, bias) == TR_OK);
}

TR_TEST_MAIN(TR_TEST(test_cast_bits), TR_TEST(test_gemm_ex_bitwise_gemm_lowp),
             TR_TEST(test_gemm_ex_reads_half_operand), TR_TEST(test_gemm_ex_arguments))
