/* Mock and text data for the training loop: the epoch shuffle is a permutation, samples are
 * what the formats promise, splits are disjoint, and bad input is a diagnostic. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/harness.h"
#include "runtime/data/dataset_mock.h"
#include "runtime/data/train_data.h"
#include "runtime/data/dataset_text.h"

static void test_shuffle_is_a_permutation_per_epoch(void) {
    const int64_t n = 1000;
    char *seen = calloc(n, 1);
    int moved = 0;
    for (int epoch = 0; epoch < 2; epoch++) {
        memset(seen, 0, n);
        for (int64_t i = 0; i < n; i++) {
            int64_t j = tr_train_data_shuffle(epoch * n + i, n, 42);
            CHECK(j >= 0 && j < n);
            if (j >= 0 && j < n) seen[j]++;
            moved += j != i;
        }
        for (int64_t j = 0; j < n; j++) CHECK_INT_EQ(seen[j], 1);
    }
    CHECK(moved > n); /* it really reorders */
    CHECK(tr_train_data_shuffle(5, n, 42) != tr_train_data_shuffle(n + 5, n, 42) ||
          tr_train_data_shuffle(6, n, 42) != tr_train_data_shuffle(n + 6, n, 42));
    free(seen);
}

/* Inside a document token k is (k + 1) % vocab, and every document ends with the eod id. */
static void test_mock_samples_follow_megatron_pattern(void) {
    tr_token_dataset ds;
    double split[3] = {0.5, 0.25, 0.25};
    CHECK_INT_EQ(tr_dataset_mock_open(&ds, 32, 50, 49, 7, split), TR_OK);
    CHECK(ds.n_samples[0] > ds.n_samples[1] && ds.n_samples[1] > 0 && ds.n_samples[2] > 0);
    int32_t s[33], again[33];
    int eods = 0;
    for (int64_t i = 0; i < 200; i++) {
        CHECK_INT_EQ(ds.sample(&ds, TR_SPLIT_TRAIN, i, s), TR_OK);
        for (int t = 1; t <= 32; t++) {
            int32_t prev = s[t - 1];
            /* the eod id 49 is also the count's value for k = 48, so after a 49 either the count
             * wraps to 0 or a new document starts at 1 */
            if (prev == 49)
                CHECK(s[t] == 0 || s[t] == 1);
            else
                CHECK(s[t] == (prev + 1) % 50 || s[t] == 49);
            eods += s[t] == 49 && prev != 48;
        }
    }
    CHECK(eods > 0);
    ds.sample(&ds, TR_SPLIT_VALID, 3, s);
    tr_token_dataset ds2;
    tr_dataset_mock_open(&ds2, 32, 50, 49, 7, split);
    ds2.sample(&ds2, TR_SPLIT_VALID, 3, again);
    CHECK(memcmp(s, again, sizeof s) == 0); /* a pure function of the seed */
    CHECK_INT_EQ(ds.sample(&ds, TR_SPLIT_TRAIN, -1, s), TR_ERR_INVALID);
    tr_train_data_close(&ds);
    tr_train_data_close(&ds2);
}

static void test_text_regions_and_overlap(void) {
    char path[] = "/tmp/trestle_td_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    char buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (char)('a' + i % 26);
    CHECK(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf);
    close(fd);
    tr_token_dataset ds;
    tr_diags d;
    tr_diags_init(&d);
    double split[3] = {0.8, 0.2, 0.0};
    CHECK_INT_EQ(tr_dataset_text_open(&ds, path, 10, 1, split, &d), TR_OK);
    CHECK_INT_EQ(ds.n_samples[0], (800 - 1) / 10);
    CHECK_INT_EQ(ds.n_samples[1], (200 - 1) / 10);
    CHECK_INT_EQ(ds.n_samples[2], 0);
    int32_t a[11], b[11];
    ds.sample(&ds, TR_SPLIT_VALID, 0, a);
    ds.sample(&ds, TR_SPLIT_VALID, 1, b);
    CHECK_INT_EQ(a[0], 'a' + 800 % 26); /* validation starts where training ends */
    CHECK_INT_EQ(a[10], b[0]);          /* consecutive samples share one token */
    CHECK_INT_EQ(ds.sample(&ds, TR_SPLIT_TEST, 0, a), TR_ERR_INVALID);
    tr_train_data_close(&ds);
    CHECK(tr_dataset_text_open(&ds, "/nonexistent/x.txt", 10, 1, split, &d) != TR_OK);
    CHECK(tr_diags_find(&d, "data.text_open") != NULL);
    tr_diags_free(&d);
    remove(path);
}

static void test_split_strings(void) {
    tr_diags d;
    tr_diags_init(&d);
    double s[3];
    CHECK_INT_EQ(tr_train_data_split("98,2,0", NULL, s, &d), TR_OK);
    CHECK_CLOSE(s[0], 0.98, 1e-12, 0);
    CHECK_CLOSE(s[2], 0.0, 0, 1e-12);
    CHECK_INT_EQ(tr_train_data_split(NULL, "1,1,1", s, &d), TR_OK);
    CHECK_CLOSE(s[1], 1.0 / 3.0, 1e-12, 0);
    CHECK_INT_EQ(tr_train_data_split("9", NULL, s, &d), TR_OK);
    CHECK_CLOSE(s[0], 1.0, 1e-12, 0);
    CHECK(tr_train_data_split("a,b", NULL, s, &d) != TR_OK);
    CHECK(tr_train_data_split("0,0,0", NULL, s, &d) != TR_OK);
    CHECK(tr_train_data_split("1,-1", NULL, s, &d) != TR_OK);
    CHECK(tr_diags_find(&d, "data.bad_split") != NULL);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_shuffle_is_a_permutation_per_epoch),
             TR_TEST(test_mock_samples_follow_megatron_pattern),
             TR_TEST(test_text_regions_and_overlap), TR_TEST(test_split_strings))
