/* The training loop's token dataset over Megatron-prepared data: samples equal the ones
 * megatron-core 0.16.1 built for the same data and config (the .txt fixtures in tests/data/gpt),
 * the index cache follows the rank-0-builds protocol, and bad configs or files give diagnostics
 * naming the key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/data/datasets/indexed_dataset.h"
#include "core/validate.h"
#include "recipes/resolve.h"
#include "runtime/data/dataset_indexed.h"
#include "runtime/data/train_data.h"
#include "tests/unit/harness.h"

#define GPT_DIR TRESTLE_SOURCE_DIR "/tests/data/gpt/"

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = 0;
    fclose(f);
    return buf;
}

static void remove_tree(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* The fixtures' setting: NullTokenizer over 1000 ids (eod 999), caches in a private directory. */
static void fixture_config(tr_config *c, const char *cache, int seed, int seq, tr_diags *d) {
    CHECK_INT_EQ(tr_config_init(c, d), TR_OK);
    c->dataset.type = TR_DS_GPT;
    c->dataset.random_seed = seed;
    c->dataset.seq_length = seq;
    c->model.seq_length = seq;
    c->model.vocab_size = 1000;
    c->tokenizer.tokenizer_type = TR_TOKENIZER_NULL;
    c->tokenizer.vocab_size = 1000;
    CHECK_INT_EQ(tr_config_set_str(c, TR_FID_dataset_path_to_cache, cache), TR_OK);
}

static void set_path(tr_config *c, int field, const char *blend) {
    CHECK_INT_EQ(tr_config_set_strlist(c, field, &blend, 1), TR_OK);
}

/* Megatron's sample counts: train_iters*gbs, (train_iters/eval_interval+1)*eval_iters*gbs,
 * eval_iters*gbs. */
static void set_iters(tr_config *c, int iters, int gbs, int interval, int eval_iters) {
    c->train.train_iters = iters;
    c->train.global_batch_size = gbs;
    c->validation.eval_interval = interval;
    c->validation.eval_iters = eval_iters;
}

static int split_index(const char *name) {
    static const char *const names[] = {"train", "valid", "test"};
    for (int i = 0; i < 3; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

/* Every sample the fixture lists for the chosen splits: tokens (T) then the last label (L) are
 * the seq + 1 tokens the dataset must return; N is the split's length. */
static int compare_with_fixture(const char *name, const tr_token_dataset *ds, const bool use[3]) {
    char path[512];
    snprintf(path, sizeof path, GPT_DIR "%s.txt", name);
    char *text = slurp(path);
    CHECK(text != NULL);
    if (!text) return 0;
    int compared = 0;
    int32_t *got = malloc((size_t)(ds->seq + 1) * sizeof *got);
    int64_t *want = malloc((size_t)(ds->seq + 1) * sizeof *want);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char tag, split[8];
        int off = 0;
        if (sscanf(line, "%c %7s %n", &tag, split, &off) != 2) continue;
        int sp = split_index(split);
        if (sp < 0 || !use[sp]) continue;
        char *p = line + off;
        if (tag == 'N') {
            int64_t n = strcmp(p, "none") == 0 ? 0 : strtoll(p, NULL, 10);
            CHECK_INT_EQ(ds->n_samples[sp], n);
        } else if (tag == 'T') {
            int64_t i = strtoll(p, &p, 10);
            for (int t = 0; t < ds->seq; t++) want[t] = strtoll(p, &p, 10);
            CHECK_INT_EQ(ds->sample(ds, sp, i, got), TR_OK);
            for (int t = 0; t < ds->seq; t++) CHECK_INT_EQ(got[t], want[t]);
        } else if (tag == 'L') {
            strtoll(p, &p, 10);
            int64_t last = 0;
            for (int t = 0; t < ds->seq; t++) last = strtoll(p, &p, 10);
            CHECK_INT_EQ(got[ds->seq], last);
            compared++;
        }
    }
    free(got);
    free(want);
    free(text);
    return compared;
}

static void test_single_prefix_matches_megatron(void) {
    char cache[] = "/tmp/tr_dsi_XXXXXX";
    CHECK(mkdtemp(cache) != NULL);
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    fixture_config(&c, cache, 1234, 16, &d);
    set_path(&c, TR_FID_dataset_data_path, GPT_DIR "ds_a");
    CHECK_INT_EQ(tr_config_set_str(&c, TR_FID_dataset_split, "8,1,1"), TR_OK);
    /* The fixture asked for 300 train samples: train_samples takes precedence over iters * gbs. */
    set_iters(&c, 10, 4, 5, 3);
    c.train.train_samples = 300;
    tr_token_dataset ds;
    CHECK_INT_EQ(tr_indexed_token_dataset_open(&c, true, &ds, &d), TR_OK);
    CHECK_INT_EQ(ds.seq, 16);
    CHECK_INT_EQ(ds.eod, 999);
    bool train_only[3] = {true, false, false};
    CHECK_INT_EQ(compare_with_fixture("single", &ds, train_only), 7);
    /* Past the end the indices wrap: the loop may ask for any index >= 0. */
    int32_t a[17], b[17];
    CHECK_INT_EQ(ds.sample(&ds, TR_SPLIT_TRAIN, 2, a), TR_OK);
    CHECK_INT_EQ(ds.sample(&ds, TR_SPLIT_TRAIN, 2 + ds.n_samples[TR_SPLIT_TRAIN], b), TR_OK);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK_INT_EQ(ds.sample(&ds, TR_SPLIT_TRAIN, -1, a), TR_ERR_INVALID);
    CHECK_INT_EQ(ds.sample(&ds, 3, 0, a), TR_ERR_INVALID);
    tr_train_data_close(&ds);
    CHECK(ds.impl == NULL);
    tr_config_free(&c);
    tr_diags_free(&d);
    remove_tree(cache);
}

static void run_blend(const char *fixture, int seed, const char *data_path, const char *split,
                      const char *const per_split[3], int iters, int gbs, int interval,
                      const bool use[3], int want_compared) {
    char cache[] = "/tmp/tr_dsi_XXXXXX";
    CHECK(mkdtemp(cache) != NULL);
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    fixture_config(&c, cache, seed, 16, &d);
    if (data_path) set_path(&c, TR_FID_dataset_data_path, data_path);
    if (split) CHECK_INT_EQ(tr_config_set_str(&c, TR_FID_dataset_split, split), TR_OK);
    static const int fields[3] = {TR_FID_dataset_train_data_path, TR_FID_dataset_valid_data_path,
                                  TR_FID_dataset_test_data_path};
    for (int sp = 0; per_split && sp < 3; sp++)
        if (per_split[sp]) set_path(&c, fields[sp], per_split[sp]);
    set_iters(&c, iters, gbs, interval, 1);
    tr_token_dataset ds;
    CHECK_INT_EQ(tr_indexed_token_dataset_open(&c, true, &ds, &d), TR_OK);
    if (d.n_errors) tr_diags_print_text(&d, stderr, false);
    CHECK_INT_EQ(compare_with_fixture(fixture, &ds, use), want_compared);
    tr_train_data_close(&ds);
    tr_config_free(&c);
    tr_diags_free(&d);
    remove_tree(cache);
}

static void test_weighted_blend_matches_megatron(void) {
    bool all[3] = {true, true, true};
    /* sizes 200, 30, 10 */
    run_blend("blend_weighted", 1234, "0.3 " GPT_DIR "ds_a 0.7 " GPT_DIR "ds_b", "90,5,5", NULL, 20,
              10, 10, all, 21);
}

static void test_unweighted_blend_matches_megatron(void) {
    bool all[3] = {true, true, true};
    /* sizes 100, 20, 5 */
    run_blend("blend_unweighted", 99, GPT_DIR "ds_a " GPT_DIR "ds_b", "8,1,1", NULL, 20, 5, 6, all,
              19);
}

static void test_per_split_blends_match_megatron(void) {
    bool all[3] = {true, true, true};
    const char *per[3] = {"2 " GPT_DIR "ds_a 1 " GPT_DIR "ds_b", GPT_DIR "ds_b", NULL};
    /* sizes 120, 25, 5; no test blend: that split is empty */
    run_blend("per_split", 1234, NULL, NULL, per, 24, 5, 6, all, 14);
}

/* Rank 0 builds and writes the indices; another rank, after the barrier, only reads them and
 * returns the same samples; a reader that finds no entry fails instead of rebuilding. */
static void test_cache_rank0_builds_others_load(void) {
    char cache[] = "/tmp/tr_dsi_XXXXXX";
    CHECK(mkdtemp(cache) != NULL);
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    fixture_config(&c, cache, 1234, 16, &d);
    set_path(&c, TR_FID_dataset_data_path, GPT_DIR "ds_a");
    CHECK_INT_EQ(tr_config_set_str(&c, TR_FID_dataset_split, "8,1,1"), TR_OK);
    set_iters(&c, 10, 4, 5, 3);

    tr_token_dataset reader;
    CHECK_INT_EQ(tr_indexed_token_dataset_open(&c, false, &reader, &d), TR_ERR_NOTFOUND);
    CHECK(tr_diags_find(&d, "data.cache_missing") != NULL);
    tr_diags_clear(&d);

    tr_token_dataset builder;
    CHECK_INT_EQ(tr_indexed_token_dataset_open(&c, true, &builder, &d), TR_OK);
    CHECK_INT_EQ(tr_indexed_token_dataset_open(&c, false, &reader, &d), TR_OK);
    for (int sp = 0; sp < 3; sp++) {
        CHECK_INT_EQ(reader.n_samples[sp], builder.n_samples[sp]);
        for (int64_t i = 0; i < builder.n_samples[sp]; i += 7) {
            int32_t a[17], b[17];
            CHECK_INT_EQ(builder.sample(&builder, sp, i, a), TR_OK);
            CHECK_INT_EQ(reader.sample(&reader, sp, i, b), TR_OK);
            CHECK(memcmp(a, b, sizeof a) == 0);
        }
    }
    tr_train_data_close(&reader);
    tr_train_data_close(&builder);
    tr_config_free(&c);
    tr_diags_free(&d);
    remove_tree(cache);
}

/* The diagnostic id names key (and message text) and says how to fix it. */
static void check_diag(const tr_diags *d, const char *id, const char *key, const char *text) {
    const tr_diag *g = tr_diags_find(d, id);
    CHECK(g != NULL);
    if (g) {
        CHECK_CONTAINS(g->keys, key);
        if (text) CHECK_CONTAINS(g->message, text);
        CHECK(g->hint != NULL);
    }
}

/* Opens c and expects failure with diagnostic id whose keys contain key (and message text). */
static void expect_failure(const tr_config *c, tr_status want, const char *id, const char *key,
                           const char *text) {
    tr_diags d;
    tr_diags_init(&d);
    tr_token_dataset ds;
    CHECK_INT_EQ(tr_indexed_token_dataset_open(c, true, &ds, &d), want);
    CHECK(ds.impl == NULL);
    check_diag(&d, id, key, text);
    tr_diags_free(&d);
}

/* What the token interface cannot carry is a capability rule: refused for the loop before any
 * dataset opens, under the rule's id. */
static void expect_capability(const tr_config *c, const char *id, const char *key,
                              const char *text) {
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_runtime_check(c, &d), TR_ERR_CONFIG);
    check_diag(&d, id, key, text);
    tr_diags_free(&d);
}

static void expect_refusal(const tr_config *c, const char *id, const char *key, const char *text) {
    expect_failure(c, TR_ERR_INVALID, id, key, text);
}

static void test_missing_files_name_file_and_key(void) {
    char cache[] = "/tmp/tr_dsi_XXXXXX";
    CHECK(mkdtemp(cache) != NULL);
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    fixture_config(&c, cache, 1234, 16, &d);
    set_iters(&c, 10, 4, 5, 3);
    CHECK_INT_EQ(tr_config_set_str(&c, TR_FID_dataset_split, "8,1,1"), TR_OK);
    set_path(&c, TR_FID_dataset_data_path, "0.5 " GPT_DIR "ds_a 0.5 " GPT_DIR "no_such_prefix");
    expect_failure(&c, TR_ERR_NOTFOUND, "data.file_open", "dataset.data_path", "no_such_prefix");
    tr_config_free(&c);

    fixture_config(&c, cache, 1234, 16, &d);
    set_iters(&c, 10, 4, 5, 3);
    set_path(&c, TR_FID_dataset_train_data_path, GPT_DIR "ds_a");
    set_path(&c, TR_FID_dataset_valid_data_path, GPT_DIR "missing_valid");
    expect_failure(&c, TR_ERR_NOTFOUND, "data.file_open", "dataset.", "missing_valid");
    tr_config_free(&c);
    tr_diags_free(&d);
    remove_tree(cache);
}

static void test_bad_or_missing_split(void) {
    char cache[] = "/tmp/tr_dsi_XXXXXX";
    CHECK(mkdtemp(cache) != NULL);
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    fixture_config(&c, cache, 1234, 16, &d);
    set_iters(&c, 10, 4, 5, 3);
    set_path(&c, TR_FID_dataset_data_path, GPT_DIR "ds_a");
    expect_refusal(&c, "data.split_required", "dataset.split", NULL);
    /* Megatron reads the numbers in the string and ignores other characters; no number, a zero
     * sum or a fourth proportion are errors. */
    const char *bad[] = {"abc", "0,0,0", "1,2,3,4"};
    for (int i = 0; i < 3; i++) {
        CHECK_INT_EQ(tr_config_set_str(&c, TR_FID_dataset_split, bad[i]), TR_OK);
        expect_refusal(&c, "data.split_syntax", "dataset.split", bad[i]);
    }
    tr_config_free(&c);
    tr_diags_free(&d);
    remove_tree(cache);
}

/* What the token interface cannot carry is refused, each with its own key; a mismatched
 * sequence length or no vocabulary are refused too. No path is megatron-core's mock data
 * (test_train_data checks its samples). */
static void test_unsupported_settings_refused(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    fixture_config(&c, "/nonexistent-never-used", 1234, 16, &d);
    set_iters(&c, 10, 4, 5, 3);
    tr_token_dataset mock;
    CHECK_INT_EQ(tr_indexed_token_dataset_open(&c, true, &mock, &d), TR_OK);
    CHECK(mock.impl != NULL && mock.n_samples[TR_SPLIT_TRAIN] > 0);
    tr_train_data_close(&mock);
    set_path(&c, TR_FID_dataset_data_path, GPT_DIR "ds_a");
    CHECK_INT_EQ(tr_config_set_str(&c, TR_FID_dataset_split, "8,1,1"), TR_OK);
    c.dataset.reset_position_ids = 1;
    expect_capability(&c, "runtime.document_resets", "dataset.reset_position_ids", "position ids");
    c.dataset.reset_position_ids = 0;
    c.dataset.reset_attention_mask = 1;
    expect_capability(&c, "runtime.document_resets", "dataset.reset_attention_mask", "attention");
    c.dataset.reset_attention_mask = 0;
    c.dataset.eod_mask_loss = 1;
    expect_capability(&c, "runtime.indexed_masks", "dataset.eod_mask_loss", "loss mask");
    c.dataset.eod_mask_loss = 0;
    c.dataset.add_extra_token_to_sequence = false;
    expect_capability(&c, "runtime.indexed_masks", "dataset.add_extra_token_to_sequence", NULL);
    c.dataset.add_extra_token_to_sequence = true;
    c.dataset.drop_last_partial_validation_sequence = false;
    expect_capability(&c, "runtime.indexed_masks", "dataset.drop_last_partial_validation_sequence",
                      NULL);
    c.dataset.drop_last_partial_validation_sequence = true;
    c.model.seq_length = 32;
    expect_refusal(&c, "data.seq_length_mismatch", "model.seq_length", "32");
    c.model.seq_length = 16;
    c.model.vocab_size = TR_NULL_INT;
    c.derived.padded_vocab_size = TR_NULL_INT;
    expect_refusal(&c, "data.indexed_vocab", "model.vocab_size", NULL);
    c.model.vocab_size = 1000;
    c.dataset.type = TR_DS_TEXT;
    expect_refusal(&c, "data.indexed_path", "dataset.type", NULL);
    tr_config_free(&c);
    tr_diags_free(&d);
}

/* 40 byte-level documents: a run of the byte 1 + k ending in the end-of-document id 0; document
 * 39 (the last, which a 98,2,0 split puts in validation) starts with bad_first if it is >= 0. */
static void write_runs_dataset(const char *prefix, int bad_first, tr_diags *d) {
    tr_indexed_writer w;
    CHECK_INT_EQ(tr_indexed_writer_open(&w, prefix, TR_DTYPE_UINT16, d), TR_OK);
    for (int k = 0; k < 40; k++) {
        int64_t doc[30];
        int n = 3 + (k * 7) % 25;
        for (int t = 0; t < n - 1; t++) doc[t] = 1 + k;
        doc[n - 1] = 0;
        if (k == 39 && bad_first >= 0) doc[0] = bad_first;
        CHECK_INT_EQ(tr_indexed_writer_add(&w, doc, (uint64_t)n, d), TR_OK);
        CHECK_INT_EQ(tr_indexed_writer_end_document(&w), TR_OK);
    }
    CHECK_INT_EQ(tr_indexed_writer_finish(&w, d), TR_OK);
    tr_indexed_writer_free(&w);
}

/* End to end without the loop: open a written dataset as the byte-level recipes would and read
 * samples: inside a sample a token either repeats its predecessor or follows an end of document.
 * A token beyond the model's vocabulary makes sample() fail instead of reaching the embedding. */
static void test_written_dataset_end_to_end(void) {
    char dir[] = "/tmp/tr_dsi_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char prefix[128], cache[128];
    snprintf(prefix, sizeof prefix, "%s/docs", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    tr_diags d;
    tr_diags_init(&d);
    write_runs_dataset(prefix, 300, &d); /* 300: outside a 256-id vocabulary */

    tr_config c;
    CHECK_INT_EQ(tr_config_init(&c, &d), TR_OK);
    c.dataset.seq_length = c.model.seq_length = 8;
    c.model.vocab_size = 256;
    c.tokenizer.tokenizer_type = TR_TOKENIZER_BYTE_LEVEL;
    CHECK_INT_EQ(tr_config_set_str(&c, TR_FID_dataset_path_to_cache, cache), TR_OK);
    CHECK_INT_EQ(tr_config_set_str(&c, TR_FID_dataset_split, "98,2,0"), TR_OK);
    set_path(&c, TR_FID_dataset_data_path, prefix);
    set_iters(&c, 5, 4, 5, 1);
    tr_token_dataset ds;
    CHECK_INT_EQ(tr_indexed_token_dataset_open(&c, true, &ds, &d), TR_OK);
    CHECK_INT_EQ(ds.eod, 0);
    CHECK(ds.n_samples[TR_SPLIT_TRAIN] >= 20);
    CHECK_INT_EQ(ds.n_samples[TR_SPLIT_TEST], 0);
    int failures = 0, good = 0;
    CHECK(ds.n_samples[TR_SPLIT_VALID] >= 1); /* 98,2,0 of 40 documents: the last one */
    for (int sp = TR_SPLIT_TRAIN; sp <= TR_SPLIT_VALID; sp++) {
        for (int64_t i = 0; i < ds.n_samples[sp]; i++) {
            int32_t s[9];
            if (ds.sample(&ds, sp, i, s) != TR_OK) {
                failures++;
                continue;
            }
            good++;
            for (int t = 1; t <= 8; t++) CHECK(s[t] == s[t - 1] || s[t - 1] == 0 || s[t] == 0);
        }
    }
    CHECK(good >= 20);
    /* once per validation epoch: the sample holding token 300 */
    CHECK(failures >= 1 && failures < ds.n_samples[TR_SPLIT_VALID]);
    int32_t s[9];
    CHECK_INT_EQ(ds.sample(&ds, TR_SPLIT_TEST, 0, s), TR_ERR_INVALID);
    tr_train_data_close(&ds);
    tr_config_free(&c);
    tr_diags_free(&d);
    remove_tree(dir);
}

/* The docs/data.md command line: llama_tiny_pretrain with dataset.data_path and a quoted split,
 * resolved and validated as run_recipe does, opens and reads (defaults of the recipe included:
 * byte-level tokenizer, 64-token samples, the reset/eod flags it sets). */
static void test_tiny_recipe_opens_indexed_data(void) {
    char dir[] = "/tmp/tr_dsi_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char prefix[128], path_kv[160], cache_kv[160];
    snprintf(prefix, sizeof prefix, "%s/docs", dir);
    snprintf(path_kv, sizeof path_kv, "dataset.data_path=%s", prefix);
    snprintf(cache_kv, sizeof cache_kv, "dataset.path_to_cache=%s/cache", dir);
    tr_diags d;
    tr_diags_init(&d);
    write_runs_dataset(prefix, -1, &d);
    const char *overrides[] = {"dataset.type=gpt", path_kv, "dataset.split='98,2,0'", cache_kv};
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = "llama_tiny_pretrain";
    o.overrides = overrides;
    o.n_overrides = 4;
    o.world = (tr_world){1, 1};
    tr_config c;
    CHECK_INT_EQ(tr_resolve(&o, &c, &d), TR_OK);
    if (d.n_errors) tr_diags_print_text(&d, stderr, false);
    tr_token_dataset ds;
    CHECK_INT_EQ(tr_indexed_token_dataset_open(&c, true, &ds, &d), TR_OK);
    if (d.n_errors) tr_diags_print_text(&d, stderr, false);
    CHECK_INT_EQ(ds.seq, 64);
    CHECK_INT_EQ(ds.eod, 0);
    /* 200 iterations x 8 samples; (200/100 + 1) evaluations x 4 iterations x 8 */
    CHECK(ds.n_samples[TR_SPLIT_TRAIN] >= 1600);
    CHECK(ds.n_samples[TR_SPLIT_VALID] >= 96);
    int32_t s[65];
    for (int64_t i = 0; i < 1600; i += 97)
        CHECK_INT_EQ(ds.sample(&ds, TR_SPLIT_TRAIN, i, s), TR_OK);
    tr_train_data_close(&ds);
    tr_config_free(&c);
    tr_diags_free(&d);
    remove_tree(dir);
}

TR_TEST_MAIN(TR_TEST(test_single_prefix_matches_megatron),
             TR_TEST(test_weighted_blend_matches_megatron),
             TR_TEST(test_unweighted_blend_matches_megatron),
             TR_TEST(test_per_split_blends_match_megatron),
             TR_TEST(test_cache_rank0_builds_others_load),
             TR_TEST(test_missing_files_name_file_and_key), TR_TEST(test_bad_or_missing_split),
             TR_TEST(test_unsupported_settings_refused), TR_TEST(test_written_dataset_end_to_end),
             TR_TEST(test_tiny_recipe_opens_indexed_data))
