/* Shared helpers of the GPU tests: device buffers from host arrays, poisoned outputs, fresh
 * random inputs, and the relative-error measure every comparison uses. A test binary calls
 * tr_gpu_test_main, which exits 77 (ctest's SKIP_RETURN_CODE) when no GPU is visible, so a
 * machine without one reports the test as skipped, never as passed. */
#ifndef TR_GPU_TEST_H
#define TR_GPU_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "tests/unit/harness.h"

#define TR_TEST_SKIPPED 77

/* Seeds from the clock (printed, and TR_TEST_SEED overrides) so each run draws new inputs. */
void gt_seed(void);
float gt_uniform(float lo, float hi);
void gt_fill(float *x, size_t n, float lo, float hi);

/* Device copies: gt_dev(h, n) uploads n floats; gt_dev_poison(n) holds NaNs, so an element the
 * op forgot to write fails every comparison. gt_host(d, n) downloads into a new host array. */
float *gt_dev(const float *h, size_t n);
float *gt_dev_poison(size_t n);
void *gt_dev_bytes(const void *h, size_t bytes);
float *gt_host(const float *d, size_t n);
void gt_free(void *d);
/* Waits for the whole device: after any direct cudaMemcpy/cudaMemset on the legacy stream. */
void gt_settle(void);
void gt_sync(void);

/* ||got - want||_2 / ||want||_2 (absolute norm when want is all zeros); +inf when got has a
 * non-finite element. */
double gt_rel_err(const float *got, const float *want, size_t n);

/* CHECK that the device result d (n floats) matches the host reference within rtol; prints the
 * error either way so the GPU check log shows the per-op margins. */
#define CHECK_DEV(name, d, want, n, rtol)                                                          \
    do {                                                                                           \
        float *got_ = gt_host((d), (n));                                                           \
        double e_ = gt_rel_err(got_, (want), (n));                                                 \
        printf("  %-34s rel err %.3e (limit %.0e)\n", (name), e_, (double)(rtol));                 \
        if (!(e_ <= (rtol))) {                                                                     \
            fprintf(stderr, "  %s:%d: %s: relative error %.3e above %.0e\n", __FILE__, __LINE__,   \
                    (name), e_, (double)(rtol));                                                   \
            tr_test_failures++;                                                                    \
        }                                                                                          \
        free(got_);                                                                                \
    } while (0)

/* Skips (77) without a GPU; otherwise creates and binds a CUDA context and runs the tests. */
int tr_gpu_test_main(int argc, char **argv, const tr_test_case *tests, int n);

#define TR_GPU_TEST_MAIN(...)                                                                      \
    int main(int argc, char **argv) {                                                              \
        static const tr_test_case tests_[] = {__VA_ARGS__};                                        \
        return tr_gpu_test_main(argc, argv, tests_, (int)(sizeof tests_ / sizeof tests_[0]));      \
    }

#endif
