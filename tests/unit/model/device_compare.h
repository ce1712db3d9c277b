/* What the device unit tests share (TR_TEST_DEVICE picks cpu-strict, the default, or cuda): the
 * main that opens the device and skips without a usable GPU, the comparison that is bitwise on
 * cpu-strict and a relative L2 limit on CUDA (other GEMMs and reduction orders), and their
 * microbatches (every fifth target masked, ids below the real vocabulary). */
#ifndef TR_TESTS_DEVICE_COMPARE_H
#define TR_TESTS_DEVICE_COMPARE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device/device.h"
#include "tests/unit/harness.h"

static inline double tr_test_rel_l2(const float *got, const float *want, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* Host arrays: bitwise on cpu-strict; within the relative L2 limit on CUDA. */
static inline void tr_test_check_close(tr_device_kind kind, const char *what, const float *got,
                                       const float *want, int64_t n, double cuda_limit) {
    double e = tr_test_rel_l2(got, want, n);
    printf("  %-40s rel err %.3e\n", what, e);
    if (kind == TR_DEVICE_CPU_STRICT)
        CHECK(memcmp(got, want, (size_t)n * sizeof *got) == 0);
    else
        CHECK(e <= cuda_limit);
}

static inline void tr_test_batch(int32_t *ids, int32_t *tg, int n, int real, int shift) {
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)((i * 7 + 3 + shift) % real);
        tg[i] = i % 5 == 2 ? -1 : (int32_t)((i * 5 + 1 + shift) % real);
    }
}

/* Opens the device TR_TEST_DEVICE names into *kind and *dev, runs the tests and closes it; the
 * process exit code (77, skipped, when CUDA is asked for and cannot be opened). */
static inline int tr_test_device_main(int argc, char **argv, const tr_test_case *tests, int n,
                                      tr_device_kind *kind, tr_device **dev) {
    const char *name = getenv("TR_TEST_DEVICE");
    if (name && tr_device_kind_parse(name, kind) != TR_OK) return 2;
    tr_diags d;
    tr_diags_init(&d);
    tr_status st = tr_device_open(*kind, 0, 1, &d, dev);
    tr_diags_free(&d);
    if (st != TR_OK && *kind == TR_DEVICE_CUDA) {
        printf("SKIPPED: no usable CUDA device\n");
        return 77;
    }
    if (st != TR_OK) return 1;
    int rc = tr_test_main(argc, argv, tests, n);
    tr_device_close(*dev);
    return rc;
}

#endif
