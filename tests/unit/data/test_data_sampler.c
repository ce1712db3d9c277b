/* The consumed-samples cursor (Megatron's MegatronPretrainingSampler). The reference here is a
 * literal transcription of that sampler's loop (collect indices from consumed_samples upward,
 * yield each full group of mbs*dp, rank r keeps slice [r*mbs, (r+1)*mbs)), run independently of
 * the closed-form code under test. */
#include <stdlib.h>
#include <string.h>

#include "runtime/data/datasets/sampler.h"
#include "tests/unit/harness.h"

/* The k-th yielded micro-batch of the reference loop for this rank; returns its length or -1 if
 * the loop yields fewer than k+1 batches. */
static int64_t reference(const tr_sampler *s, int64_t k, int64_t *out) {
    int64_t group = s->micro_batch_size * s->dp_size, batch[256], nb = 0, yielded = 0;
    for (int64_t idx = s->consumed_samples; idx < s->total_samples; idx++) {
        batch[nb++] = idx;
        if (nb == group) {
            if (yielded++ == k) {
                memcpy(out, batch + s->dp_rank * s->micro_batch_size,
                       (size_t)s->micro_batch_size * sizeof *out);
                return s->micro_batch_size;
            }
            nb = 0;
        }
    }
    if (nb > 0 && !s->drop_last && yielded == k) {
        int64_t lo = s->dp_rank * s->micro_batch_size, hi = lo + s->micro_batch_size;
        if (hi > nb) hi = nb;
        int64_t n = 0;
        for (int64_t i = lo; i < hi; i++) out[n++] = batch[i];
        return n;
    }
    return -1;
}

static void test_matches_reference_loop(void) {
    int64_t a[64], b[64];
    int cases = 0;
    for (int64_t total = 1; total <= 23; total += 2)
        for (int64_t consumed = 0; consumed < total; consumed += 3)
            for (int64_t mbs = 1; mbs <= 3; mbs++)
                for (int64_t dp = 1; dp <= 4; dp++)
                    for (int64_t r = 0; r < dp; r++)
                        for (int drop = 0; drop <= 1; drop++) {
                            tr_sampler s = {total, consumed, mbs, r, dp, drop};
                            for (int64_t k = 0; k < 12; k++) {
                                int64_t want = reference(&s, k, a);
                                int64_t got = tr_sampler_micro_batch(&s, k, b);
                                if (want < 0) {
                                    CHECK_INT_EQ(got, 0);
                                    continue;
                                }
                                CHECK_INT_EQ(got, want);
                                for (int64_t i = 0; i < got && i < want; i++)
                                    CHECK_INT_EQ(b[i], a[i]);
                                cases++;
                            }
                        }
    CHECK(cases > 1000);
}

/* Every global batch is the contiguous range after the cursor, split over the ranks, whatever the
 * data-parallel size: a run resumed with another DP size reads the same samples. */
static void test_dp_change_and_resume_see_same_sequence(void) {
    tr_diags d;
    tr_diags_init(&d);
    const int64_t gbs = 24, total = 1000;
    for (int64_t consumed = 0; consumed <= 96; consumed += gbs) {
        for (int64_t dp = 1; dp <= 8; dp *= 2) {
            int seen[1000] = {0};
            for (int64_t r = 0; r < dp; r++) {
                tr_sampler s = {total, consumed, 3, r, dp, true};
                CHECK_INT_EQ(tr_sampler_check(&s, &d), TR_OK);
                int64_t idx[24], n = 0;
                CHECK_INT_EQ(tr_sampler_global_batch(&s, gbs, idx, &n, &d), TR_OK);
                CHECK_INT_EQ(n, gbs / dp);
                for (int64_t i = 0; i < n; i++) seen[idx[i]]++;
            }
            for (int64_t i = 0; i < total; i++)
                CHECK_INT_EQ(seen[i], i >= consumed && i < consumed + gbs ? 1 : 0);
        }
    }
    tr_diags_free(&d);
}

static void test_bad_layouts_are_reported(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_sampler done = {10, 10, 1, 0, 1, true};
    CHECK_INT_EQ(tr_sampler_check(&done, &d), TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.sampler_exhausted") != NULL);
    tr_sampler rank = {10, 0, 1, 2, 2, true};
    CHECK_INT_EQ(tr_sampler_check(&rank, &d), TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.sampler_layout") != NULL);
    tr_sampler empty = {0, 0, 1, 0, 1, true};
    CHECK_INT_EQ(tr_sampler_check(&empty, &d), TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.sampler_empty") != NULL);
    tr_sampler ok = {10, 0, 2, 0, 2, true};
    int64_t out[8], n;
    CHECK_INT_EQ(tr_sampler_global_batch(&ok, 6, out, &n, &d), TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.sampler_global_batch") != NULL);
    /* The last short batch: dropped, or shared out when drop_last is off. */
    tr_sampler tail = {10, 8, 2, 1, 2, true};
    CHECK_INT_EQ(tr_sampler_micro_batch(&tail, 0, out), 0);
    tail.drop_last = false;
    tail.dp_rank = 0;
    CHECK_INT_EQ(tr_sampler_micro_batch(&tail, 0, out), 2);
    CHECK_INT_EQ(out[0], 8);
    tail.dp_rank = 1;
    CHECK_INT_EQ(tr_sampler_micro_batch(&tail, 0, out), 0);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_matches_reference_loop),
             TR_TEST(test_dp_change_and_resume_see_same_sequence),
             TR_TEST(test_bad_layouts_are_reported))
