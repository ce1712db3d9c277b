/* The vectorised GeLU of every ISA variant against the exact function evaluated in double:
 * a dense grid over [-10, 10] plus tails, huge values, infinities and NaN, for both the erf
 * form and the tanh approximation, forward and backward. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/simd/simd.h"
#include "kernels/ops.h"
#include "tests/unit/harness.h"

static const char *const k_isas[] = {"generic", "avx2", "avx512"};

#define GRID_STEP (1.0 / 4096.0) /* exact in fp32: the grid points are the inputs themselves */
#define GRID_N    (20 * 4096 + 1)

/* Exact GeLU and its slope. erf form: x Phi(x), Phi via erfc (no cancellation in the tail).
 * tanh form: 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)), likewise cancellation-free. */
static void ref_gelu(double x, int tanh_form, double *y, double *g) {
    if (!tanh_form) {
        double phi = 0.5 * erfc(-x / sqrt(2.0)), pdf = exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
        *y = x * phi;
        *g = phi + x * pdf;
        return;
    }
    double k = sqrt(2.0 / M_PI), w = 2.0 * k * (x + 0.044715 * x * x * x);
    double dw = 2.0 * k * (1.0 + 3.0 * 0.044715 * x * x);
    double s = 1.0 / (1.0 + exp(-w)), sc = 1.0 / (1.0 + exp(w));
    *y = x * s;
    *g = s + (sc > 0.0 && s > 0.0 ? x * s * sc * dw : 0.0);
}

static float *grid(void) {
    float *x = malloc(sizeof(float) * GRID_N);
    for (int i = 0; i < GRID_N; i++) x[i] = (float)(-10.0 + i * GRID_STEP);
    return x;
}

typedef struct errs {
    double abs_scaled; /* max |err| / max(1, |x|) */
    double rel;        /* max |err| / |ref| over |ref| >= rel_floor */
    double rel_floor;
} errs;

static void note(errs *e, double got, double ref, double x) {
    double d = fabs(got - ref), a = d / fmax(1.0, fabs(x));
    if (!(a <= e->abs_scaled)) e->abs_scaled = isnan(a) ? INFINITY : a;
    if (fabs(ref) >= e->rel_floor && !(d / fabs(ref) <= e->rel))
        e->rel = isnan(d) ? INFINITY : d / fabs(ref);
}

/* The bound of the brief: |err| <= 2e-7 max(1, |x|) for values and slopes. Relative bounds:
 * forward values keep ~1e-6 down to 1e-30 (erf: the exponent is split exactly; tanh: its
 * exponent 2u ~ x^3 carries fp32 rounding of a number up to ~87, so the far negative tail
 * drifts to ~1e-5); slopes are checked relatively only where |slope| >= 0.01, away from the
 * slope's root near x = -0.75 where no relative bound can hold (there ~1e-7 absolute is
 * ~1e-5 relative). */
static void test_grid_accuracy(void) {
    float *x = grid(), *y = malloc(sizeof(float) * GRID_N), *g = malloc(sizeof(float) * GRID_N);
    float *one = malloc(sizeof(float) * GRID_N);
    for (int i = 0; i < GRID_N; i++) one[i] = 1.0f;
    int ran = 0;
    for (int v = 0; v < 3; v++) {
        const tr_cpu_simd *s = tr_cpu_simd_variant(k_isas[v]);
        if (!s) continue;
        ran++;
        for (int t = 0; t < 2; t++) {
            s->gelu_fwd(y, x, GRID_N, t);
            s->gelu_bwd(g, one, x, GRID_N, t);
            errs ef = {.rel_floor = 1e-30}, ef_core = {.rel_floor = 1e-30},
                 eb = {.rel_floor = 1e-2};
            for (int i = 0; i < GRID_N; i++) {
                double ry, rg;
                ref_gelu(x[i], t, &ry, &rg);
                note(&ef, y[i], ry, x[i]);
                note(&eb, g[i], rg, x[i]);
                if (fabs(x[i]) <= 5.0f) note(&ef_core, y[i], ry, x[i]);
            }
            printf("  %-7s %-4s fwd: abs/max(1,|x|) %.2e rel %.2e (|x|<=5: %.2e)  bwd: abs %.2e "
                   "rel %.2e\n",
                   s->isa, t ? "tanh" : "erf", ef.abs_scaled, ef.rel, ef_core.rel, eb.abs_scaled,
                   eb.rel);
            CHECK(ef.abs_scaled <= 2e-7);
            CHECK(eb.abs_scaled <= 2e-7);
            CHECK(ef_core.rel <= (t ? 4e-6 : 1e-6));
            CHECK(ef.rel <= (t ? 4e-5 : 1e-6));
            CHECK(eb.rel <= 1e-5);
        }
    }
    CHECK(ran >= 1); /* generic always exists */
    free(x), free(y), free(g), free(one);
}

/* Limits: gelu(+inf) = +inf, gelu(-inf) = 0, slopes 1 and 0; huge finite inputs likewise; NaN
 * stays NaN in both directions; signed zeros and denormals give (signed) zero. */
static void test_extremes(void) {
    const float in[] = {INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 1e30f,  -1e30f, 1e10f,
                        -1e10f,   20.0f,     -20.0f,  13.5f,    -13.5f, 9.9f,   -9.9f};
    enum { N = sizeof in / sizeof in[0] };
    float y[N + 1], g[N + 1], x[N + 1], dy[N + 1];
    memcpy(x, in, sizeof in);
    x[N] = NAN;
    for (int i = 0; i <= N; i++) dy[i] = 1.0f;
    for (int v = 0; v < 3; v++) {
        const tr_cpu_simd *s = tr_cpu_simd_variant(k_isas[v]);
        if (!s) continue;
        for (int t = 0; t < 2; t++) {
            s->gelu_fwd(y, x, N + 1, t);
            s->gelu_bwd(g, dy, x, N + 1, t);
            for (int i = 0; i < N; i++) {
                double ry, rg;
                ref_gelu(x[i], t, &ry, &rg);
                if (isinf(x[i])) ry = x[i] > 0 ? INFINITY : 0.0, rg = x[i] > 0 ? 1.0 : 0.0;
                if (isinf(ry)) {
                    CHECK(y[i] == (float)ry);
                } else {
                    CHECK(isfinite(y[i]));
                    CHECK(fabs(y[i] - ry) <= 2e-7 * fmax(1.0, fabs(x[i])));
                }
                CHECK(isfinite(g[i]) && fabs(g[i] - rg) <= 2e-7);
                if (fabs(x[i]) > 13.0f) { /* exact limits */
                    CHECK(y[i] == (x[i] > 0 ? x[i] : 0.0f));
                    CHECK(g[i] == (x[i] > 0 ? 1.0f : 0.0f));
                }
            }
            CHECK(isnan(y[N]) && isnan(g[N]));
            float z[4] = {0.0f, -0.0f, FLT_TRUE_MIN, -FLT_MIN}, zy[4], zg[4];
            s->gelu_fwd(zy, z, 4, t);
            s->gelu_bwd(zg, dy, z, 4, t);
            for (int i = 0; i < 4; i++) {
                CHECK(fabs(zy[i]) <= fabs(z[i])); /* y ~ x/2 */
                CHECK(fabs(zg[i] - 0.5f) <= 1e-7f);
            }
        }
    }
}

/* dx = dy * gelu'(x) for arbitrary dy, and outputs may alias inputs (ops.h: in-place). */
static void test_dy_scaling_and_aliasing(void) {
    enum { N = 1003 };
    float x[N], dy[N], g[N], y[N], buf[N];
    uint32_t r = 7;
    for (int i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = (float)(r >> 8) / 16777216.0f * 16.0f - 8.0f;
        r = r * 1664525u + 1013904223u;
        dy[i] = (float)(r >> 8) / 16777216.0f * 4.0f - 2.0f;
    }
    for (int v = 0; v < 3; v++) {
        const tr_cpu_simd *s = tr_cpu_simd_variant(k_isas[v]);
        if (!s) continue;
        for (int t = 0; t < 2; t++) {
            s->gelu_bwd(g, dy, x, N, t);
            for (int i = 0; i < N; i++) {
                double ry, rg;
                ref_gelu(x[i], t, &ry, &rg);
                double tol = fabs(dy[i]) * 2e-7 * fmax(1.0, fabs(x[i])) + 6e-8 * fabs(dy[i] * rg);
                CHECK(fabs(g[i] - dy[i] * rg) <= tol);
            }
            s->gelu_fwd(y, x, N, t);
            memcpy(buf, x, sizeof buf);
            s->gelu_fwd(buf, buf, N, t);
            CHECK(!memcmp(buf, y, sizeof buf));
            memcpy(buf, dy, sizeof buf);
            s->gelu_bwd(buf, buf, x, N, t); /* dx == dy */
            CHECK(!memcmp(buf, g, sizeof buf));
            memcpy(buf, x, sizeof buf);
            s->gelu_bwd(buf, dy, buf, N, t); /* dx == x */
            CHECK(!memcmp(buf, g, sizeof buf));
        }
    }
}

/* An element's result must not depend on where a call's range starts or ends (vector body or
 * padded tail), so any split of the op across threads gives the same bits. Checked by cutting
 * the grid into pieces of many sizes, and through the op table (the thread pool) for every
 * selectable variant. */
static void test_split_independence(void) {
    enum { N = 4 * 4096 + 37 };
    float *x = grid(), *whole = malloc(sizeof(float) * N), *parts = malloc(sizeof(float) * N);
    float *dy = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) dy[i] = 1.0f - (float)(i % 7) * 0.25f;
    const tr_cpu_simd *orig = tr_cpu_simd_active();
    static const int cuts[] = {1, 3, 5, 15, 17, 33, 4095, 4099};
    for (int v = 0; v < 3; v++) {
        const tr_cpu_simd *s = tr_cpu_simd_variant(k_isas[v]);
        if (!s) continue;
        for (int t = 0; t < 2; t++) {
            for (int dir = 0; dir < 2; dir++) {
                if (dir)
                    s->gelu_bwd(whole, dy, x, N, t);
                else
                    s->gelu_fwd(whole, x, N, t);
                for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
                    memset(parts, 0, sizeof(float) * N);
                    for (int64_t b = 0; b < N; b += cuts[c]) {
                        int64_t n = b + cuts[c] <= N ? cuts[c] : N - b;
                        if (dir)
                            s->gelu_bwd(parts + b, dy + b, x + b, n, t);
                        else
                            s->gelu_fwd(parts + b, x + b, n, t);
                    }
                    CHECK(!memcmp(parts, whole, sizeof(float) * N));
                }
                CHECK(tr_cpu_simd_select(s->isa) == TR_OK);
                const tr_ops *ops = tr_ops_cpu();
                CHECK((dir ? ops->gelu_bwd(parts, dy, x, N, t) : ops->gelu_fwd(parts, x, N, t)) ==
                      TR_OK);
                CHECK(!memcmp(parts, whole, sizeof(float) * N));
            }
        }
    }
    CHECK(tr_cpu_simd_select(orig->isa) == TR_OK);
    free(x), free(whole), free(parts), free(dy);
}

/* The op rejects bad sizes and pointers and accepts n = 0 with no buffers. */
static void test_op_arguments(void) {
    const tr_ops *ops = tr_ops_cpu();
    float x[3] = {1, 2, 3}, y[3];
    for (int t = 0; t < 2; t++) {
        CHECK(ops->gelu_fwd(y, x, -1, t) == TR_ERR_INVALID);
        CHECK(ops->gelu_fwd(NULL, x, 3, t) == TR_ERR_INVALID);
        CHECK(ops->gelu_bwd(y, NULL, x, 3, t) == TR_ERR_INVALID);
        CHECK(ops->gelu_fwd(NULL, NULL, 0, t) == TR_OK);
        CHECK(ops->gelu_bwd(NULL, NULL, NULL, 0, t) == TR_OK);
        CHECK(ops->gelu_fwd(y, x, 3, t) == TR_OK);
        CHECK(y[0] > 0.8f && y[0] < 0.9f && y[2] > 2.99f && y[2] < 3.0f);
    }
}

TR_TEST_MAIN(TR_TEST(test_grid_accuracy), TR_TEST(test_extremes),
             TR_TEST(test_dy_scaling_and_aliasing), TR_TEST(test_split_independence),
             TR_TEST(test_op_arguments))
