/* Mock and text data for the training loop (mock: megatron-core's, against its fixture): the epoch
 * shuffle is a permutation, samples are what the formats promise, splits are disjoint, and bad
 * input is a diagnostic. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/harness.h"
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

/* The loop's mock data is megatron-core's MockGPTDataset: with the inputs of the fixture
 * tests/data/gpt/mock.txt (written by megatron-core 0.16.1, gen_gpt_fixtures.py: vocabulary
 * 1000, end-of-document 999, seed 1234, 64 tokens, 40/8/4 samples asked for), the samples
 * tr_train_data_open serves are the ones megatron-core returned, split forced to 1,1,1 as
 * megatron-core forces it whatever dataset.split says. */
static bool fixture_row(const char *kind, const char *split, long index, int64_t *v, int n) {
    FILE *f = fopen(TRESTLE_SOURCE_DIR "/tests/data/gpt/mock.txt", "r");
    if (!f) return false;
    char line[65536], want[64];
    snprintf(want, sizeof want, "%s %s %ld ", kind, split, index);
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, want, strlen(want)) != 0) continue;
        char *p = line + strlen(want), *end;
        found = true;
        for (int k = 0; k < n && found; k++, p = end) {
            v[k] = strtoll(p, &end, 10);
            found = end != p;
        }
    }
    fclose(f);
    return found;
}

static void test_mock_is_megatron_core_mock(void) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_config_init(&c, &d), TR_OK);
    const char *const set[][2] = {{"model.vocab_size", "1000"},
                                  {"model.seq_length", "64"},
                                  {"dataset.seq_length", "64"},
                                  {"dataset.random_seed", "1234"},
                                  {"dataset.split", "9999,8,2"},
                                  {"train.train_iters", "10"},
                                  {"train.global_batch_size", "4"},
                                  {"validation.eval_interval", "10"},
                                  {"validation.eval_iters", "1"},
                                  {"dataset.reset_position_ids", "false"},
                                  {"dataset.reset_attention_mask", "false"},
                                  {"dataset.eod_mask_loss", "false"}};
    tr_origin o = tr_origin_make(TR_ORIGIN_API, NULL);
    for (size_t i = 0; i < sizeof set / sizeof *set; i++)
        CHECK_INT_EQ(tr_config_set_text(&c, set[i][0], set[i][1], &o, &d), TR_OK);
    tr_token_dataset ds;
    CHECK_INT_EQ(tr_train_data_open(&c, &ds, &d), TR_OK);
    CHECK_INT_EQ(ds.n_samples[TR_SPLIT_TRAIN], 1065473); /* megatron-core's lengths */
    CHECK_INT_EQ(ds.n_samples[TR_SPLIT_VALID], 1064995);
    CHECK_INT_EQ(ds.n_samples[TR_SPLIT_TEST], 1066985);
    CHECK_INT_EQ(ds.eod, 999);
    static const struct {
        const char *name;
        int split;
        long index;
    } rows[] = {{"train", TR_SPLIT_TRAIN, 0}, {"train", TR_SPLIT_TRAIN, 1},
                {"train", TR_SPLIT_TRAIN, 2}, {"train", TR_SPLIT_TRAIN, 1065472},
                {"valid", TR_SPLIT_VALID, 0}, {"valid", TR_SPLIT_VALID, 2}};
    int compared = 0;
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        int64_t tokens[64], labels[64];
        CHECK(fixture_row("T", rows[r].name, rows[r].index, tokens, 64));
        CHECK(fixture_row("L", rows[r].name, rows[r].index, labels, 64));
        int32_t s[65];
        CHECK_INT_EQ(ds.sample(&ds, rows[r].split, rows[r].index, s), TR_OK);
        for (int t = 0; t < 64; t++) CHECK_INT_EQ(s[t], tokens[t]);
        CHECK_INT_EQ(s[64], labels[63]);
        compared++;
    }
    CHECK_INT_EQ(compared, 6);
    tr_train_data_close(&ds);
    tr_config_free(&c);
    tr_diags_free(&d);
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
             TR_TEST(test_mock_is_megatron_core_mock), TR_TEST(test_text_regions_and_overlap),
             TR_TEST(test_split_strings))
