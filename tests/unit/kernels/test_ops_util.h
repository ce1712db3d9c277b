/* Shared helpers for the op tests: a seeded generator, array comparison and a central-difference
 * gradient checker. Header-only so each test_ops_*.c stays one executable. */
#ifndef TR_TEST_OPS_UTIL_H
#define TR_TEST_OPS_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/ops.h"
#include "tests/unit/harness.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static inline void rng_seed(uint64_t s) {
    g_rng = s ? s : 1;
}

/* splitmix64: independent of the code under test (Philox). */
static inline uint64_t rng_next(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline float rng_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((rng_next() >> 40) * (1.0 / 16777216.0));
}

static inline float *rand_buf(int64_t n, float lo, float hi) {
    if (n < 0) return NULL; /* (and -O3 then knows the size below is in range) */
    float *p = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = rng_uniform(lo, hi);
    return p;
}

static inline float *zero_buf(int64_t n) {
    if (n < 0) return NULL;
    return calloc((size_t)(n ? n : 1), sizeof(float));
}

/* Largest |a-b| / (|b| + atol) over the arrays; callers compare it with their tolerance. */
static inline double max_rel_err(const float *a, const float *b, int64_t n, double atol) {
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + atol);
        if (!(e <= worst)) worst = e; /* NaN propagates as a failure */
    }
    return worst;
}

static inline double max_rel_err_d(const float *a, const double *b, int64_t n, double atol) {
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (fabs(b[i]) + atol);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* max|a-b| / max|b|: error relative to the tensor's scale, the right yardstick for sums with
 * cancellation (attention and softmax gradients), where element-wise relative error is
 * dominated by entries that happen to be near zero. */
static inline double max_scaled_err(const float *a, const float *b, int64_t n) {
    double e = 0.0, m = 1e-2; /* floor: an all-zero reference is compared absolutely */
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d;
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    return e / m;
}

static inline double max_scaled_err_d(const float *a, const double *b, int64_t n) {
    double e = 0.0, m = 1e-2; /* floor: an all-zero reference is compared absolutely */
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return e / m;
}

/* Central-difference check of an analytic gradient. `loss` recomputes the scalar objective
 * sum(out * w) (accumulated in double by the caller) from the current inputs. Perturbations use
 * the float-representable step actually applied, so only truncation (O(h^2)) and the fp32
 * rounding of the forward outputs (~6e-8 * |out| / h) remain; with h = 1e-2 and O(1) data both
 * stay below ~5e-4, and the tolerance below leaves a margin over that. */
typedef double (*tr_loss_fn)(void *ctx);

static inline int grad_check(const char *what, tr_loss_fn loss, void *ctx, float *x,
                             const float *grad, int64_t n, int samples) {
    const double h = 1e-2, rtol = 1e-2, atol = 2e-3;
    int bad = 0;
    for (int s = 0; s < samples; s++) {
        int64_t i = samples >= n ? s : (int64_t)(rng_next() % (uint64_t)n);
        if (i >= n) break;
        float orig = x[i];
        float xp = (float)(orig + h), xm = (float)(orig - h);
        x[i] = xp;
        double lp = loss(ctx);
        x[i] = xm;
        double lm = loss(ctx);
        x[i] = orig;
        double fd = (lp - lm) / ((double)xp - (double)xm);
        if (!(fabs(fd - grad[i]) <= rtol * fabs(fd) + atol)) {
            if (bad < 5)
                fprintf(stderr, "  %s[%lld]: analytic %.7g vs numeric %.7g\n", what, (long long)i,
                        grad[i], fd);
            bad++;
        }
    }
    return bad;
}

static inline double dot_w(const float *out, const float *w, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)out[i] * w[i];
    return s;
}

#endif
