/* copy_2d, fill_2d and loss_mean against index arithmetic and sums written out in the test. */
#include <string.h>

#include "tests/unit/kernels/test_ops_util.h"

#define ops (tr_ops_cpu())

/* A 3 x 4 block out of a 5 x 7 source at (1, 2) into a 3 x 6 destination at column 1: every
 * copied element lands at its own index, nothing else changes. */
static void test_copy_2d(void) {
    float src[35], dst[18];
    for (int i = 0; i < 35; i++) src[i] = (float)i;
    for (int i = 0; i < 18; i++) dst[i] = -1.0f;
    CHECK(ops->copy_2d(dst + 1, 6, src + 7 + 2, 7, 3, 4) == TR_OK);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 6; c++) {
            float want = c >= 1 && c < 5 ? (float)((r + 1) * 7 + 2 + c - 1) : -1.0f;
            CHECK(dst[r * 6 + c] == want);
        }
    /* One row is a plain copy; empty shapes do nothing, even with NULL. */
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0};
    CHECK(ops->copy_2d(b, 5, a, 5, 1, 5) == TR_OK);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(ops->copy_2d(NULL, 0, NULL, 0, 0, 0) == TR_OK);
    CHECK(ops->copy_2d(b, 3, a, 3, 0, 3) == TR_OK);
    /* Bad shapes and overlapping views are refused. */
    CHECK(ops->copy_2d(b, 2, a, 5, 1, 3) == TR_ERR_INVALID);
    CHECK(ops->copy_2d(b, 5, a, 5, -1, 3) == TR_ERR_INVALID);
    CHECK(ops->copy_2d(NULL, 5, a, 5, 1, 3) == TR_ERR_INVALID);
    CHECK(ops->copy_2d(a + 1, 2, a, 2, 2, 2) == TR_ERR_INVALID);
    /* Adjacent, disjoint ranges of one buffer are fine. */
    float big[8] = {0};
    CHECK(ops->copy_2d(big + 4, 4, big, 4, 1, 4) == TR_OK);
}

static void test_fill_2d(void) {
    float x[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i;
    CHECK(ops->fill_2d(x + 2, 4, 3, 2, -1e30f) == TR_OK);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) CHECK(x[r * 4 + c] == (c >= 2 ? -1e30f : (float)(r * 4 + c)));
    CHECK(ops->fill_2d(NULL, 4, 0, 2, 1.0f) == TR_OK);
    CHECK(ops->fill_2d(x, 1, 2, 2, 1.0f) == TR_ERR_INVALID);
    CHECK(ops->fill_2d(NULL, 4, 1, 2, 1.0f) == TR_ERR_INVALID);
}

/* Mean over the rows whose target is not ignored, in double. */
static void test_loss_mean(void) {
    float losses[5] = {1.0f, 100.0f, 2.0f, 4.0f, 1e-8f};
    int32_t targets[5] = {3, -1, 0, 7, 2};
    float out = -1.0f;
    CHECK(ops->loss_mean(&out, losses, targets, 5) == TR_OK);
    CHECK(out == (float)((1.0 + 2.0 + 4.0 + (double)1e-8f) / 4.0));
    int32_t none[2] = {-1, -5};
    CHECK(ops->loss_mean(&out, losses, none, 2) == TR_OK);
    CHECK(out == 0.0f);
    CHECK(ops->loss_mean(&out, losses, targets, 0) == TR_OK);
    CHECK(out == 0.0f);
    CHECK(ops->loss_mean(NULL, losses, targets, 5) == TR_ERR_INVALID);
    CHECK(ops->loss_mean(&out, NULL, targets, 5) == TR_ERR_INVALID);
    /* Many small terms: the double sum keeps what a float sum would lose. */
    enum { N = 4096 };
    static float many[N];
    static int32_t keep[N];
    double ref = 0.0;
    for (int i = 0; i < N; i++) {
        many[i] = i == 0 ? 1e4f : 1e-4f;
        keep[i] = 1;
        ref += (double)many[i];
    }
    CHECK(ops->loss_mean(&out, many, keep, N) == TR_OK);
    CHECK(out == (float)(ref / N));
}

TR_TEST_MAIN(TR_TEST(test_copy_2d), TR_TEST(test_fill_2d), TR_TEST(test_loss_mean))
