/* Shared helpers of the emulator tests: the C harness and op table with C linkage (included
 * before anything else, so later includes of the same headers keep it), seeded random inputs,
 * and the relative L2 error every comparison uses, as tests/gpu/gpu_test.h defines it. */
#ifndef TR_TESTS_EMU_EMU_TEST_H
#define TR_TESTS_EMU_EMU_TEST_H

extern "C" {
#include "kernels/common/lowp_round.h"
#include "kernels/ops.h"
#include "tests/unit/harness.h"
}

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <vector>

namespace emu_test {

/* A fixed-seed generator: the emulator tests are a CI gate, so their inputs never change. */
struct rng {
    uint64_t s;
    explicit rng(uint64_t seed) : s(seed * 0x9e3779b97f4a7c15ull + 1) {}
    float uniform(float lo, float hi) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        return lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
    }
    std::vector<float> vec(size_t n, float lo, float hi) {
        std::vector<float> v(n);
        for (auto &x : v) x = uniform(lo, hi);
        return v;
    }
};

/* ||got - want|| / ||want|| (absolute when want is 0); +inf when got has a non-finite value. */
inline double rel_err(const float *got, const float *want, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        const double e = (double)got[i] - want[i];
        num += e * e;
        den += (double)want[i] * want[i];
    }
    return sqrt(num / (den > 0.0 ? den : 1.0));
}

} // namespace emu_test

#define CHECK_REL(name, got, want, n, rtol)                                                        \
    do {                                                                                           \
        const double e_ = emu_test::rel_err((got), (want), (n));                                   \
        printf("  %-40s rel err %.3e (limit %.0e)\n", (name), e_, (double)(rtol));                 \
        if (!(e_ <= (rtol))) {                                                                     \
            fprintf(stderr, "  %s:%d: %s: relative error %.3e above %.0e\n", __FILE__, __LINE__,   \
                    (name), e_, (double)(rtol));                                                   \
            tr_test_failures++;                                                                    \
        }                                                                                          \
    } while (0)

#endif
