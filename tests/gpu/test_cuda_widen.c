/* widen_lowp on the GPU (label gpu): the CPU table's values bit for bit, for every one of the
 * 65536 patterns of each format (NaNs only as NaN: the payload is not specified), and after a
 * GPU cast_lowp, the CPU's round_lowp of the input: the pipeline's send-receive round trip. A
 * length that is not a multiple of the block size checks the grid-stride loop's tail. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "tests/gpu/gpu_test.h"

enum { PATTERNS = 65536 };

static void test_widen_patterns(void) {
    const tr_ops *cpu = tr_ops_cpu(), *gpu = tr_ops_cuda();
    uint16_t *h = malloc(sizeof *h * PATTERNS);
    float *want = malloc(sizeof *want * PATTERNS);
    for (int i = 0; i < PATTERNS; i++) h[i] = (uint16_t)i;
    uint16_t *dh = gt_dev_bytes(h, sizeof *h * PATTERNS);
    float *dv = gt_dev_poison(PATTERNS);
    for (int t = TR_LOWP_BF16; t <= TR_LOWP_F16; t++) {
        CHECK(cpu->widen_lowp((tr_lowp)t, want, h, PATTERNS) == TR_OK);
        CHECK(gpu->widen_lowp((tr_lowp)t, dv, dh, PATTERNS) == TR_OK);
        gt_sync();
        float *got = gt_host(dv, PATTERNS);
        int bad = 0;
        for (int i = 0; i < PATTERNS; i++)
            bad += isnan(want[i]) ? !isnan(got[i]) : memcmp(&got[i], &want[i], sizeof *got) != 0;
        printf("  widen_lowp %s: %d of %d patterns differ from the CPU's\n",
               t == TR_LOWP_BF16 ? "bf16" : "fp16", bad, PATTERNS);
        CHECK(bad == 0);
        free(got);
    }
    CHECK(gpu->widen_lowp((tr_lowp)0, dv, dh, PATTERNS) == TR_ERR_INVALID);
    CHECK(gpu->widen_lowp(TR_LOWP_BF16, dv, (const uint16_t *)(const void *)dv, 8) ==
          TR_ERR_INVALID);
    free(h), free(want), gt_free(dh), gt_free(dv);
}

static void test_round_trip(void) {
    const tr_ops *cpu = tr_ops_cpu(), *gpu = tr_ops_cuda();
    const size_t n = 1000003;
    float *x = malloc(sizeof *x * n), *r = malloc(sizeof *r * n);
    gt_fill(x, n, -4.0f, 4.0f);
    for (size_t i = 0; i < n; i += 7) x[i] *= 1e-6f; /* fp16 subnormals */
    float *dx = gt_dev(x, n), *dw = gt_dev_poison(n);
    uint16_t *dh = gt_dev_bytes(NULL, sizeof(uint16_t) * n);
    for (int t = TR_LOWP_BF16; t <= TR_LOWP_F16; t++) {
        memcpy(r, x, sizeof *r * n);
        CHECK(cpu->round_lowp((tr_lowp)t, r, (int64_t)n) == TR_OK);
        CHECK(gpu->cast_lowp((tr_lowp)t, dh, dx, (int64_t)n) == TR_OK);
        CHECK(gpu->widen_lowp((tr_lowp)t, dw, dh, (int64_t)n) == TR_OK);
        gt_sync();
        float *got = gt_host(dw, n);
        CHECK(memcmp(got, r, sizeof *r * n) == 0);
        free(got);
    }
    free(x), free(r), gt_free(dx), gt_free(dw), gt_free(dh);
}

TR_GPU_TEST_MAIN(TR_TEST(test_widen_patterns), TR_TEST(test_round_trip))
