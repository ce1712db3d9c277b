/* GPT dataset indices, blends and samples compared with what megatron-core 0.16.1 itself built
 * for the same inputs (the .txt fixtures in tests/data/gpt, written by gen_gpt_fixtures.py), plus
 * the index cache and the split/blend parsers. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/data/datasets/blend.h"
#include "runtime/data/datasets/gpt_dataset.h"
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

static bool is_number(const char *w) {
    char *end;
    strtod(w, &end);
    return end != w && *end == 0;
}

/* A blend fixture line ("0.3 ds_a 0.7 ds_b") as a config list with full paths. */
static void blend_from_words(const char *words, tr_blend *out) {
    char *copy = strdup(words);
    char *items[64];
    int n = 0;
    char *save = NULL;
    for (char *w = strtok_r(copy, " ", &save); w && n < 64; w = strtok_r(NULL, " ", &save)) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s%s", is_number(w) ? "" : GPT_DIR, w);
        items[n++] = strdup(buf);
    }
    tr_str_list list = {items, n, false};
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_blend_parse(&list, "dataset.data_path", out, &d), TR_OK);
    tr_diags_free(&d);
    for (int i = 0; i < n; i++) free(items[i]);
    free(copy);
}

static int split_of(const char *name) {
    for (int i = 0; i < TR_N_SPLITS; i++)
        if (strcmp(name, tr_split_name(i)) == 0) return i;
    return -1;
}

typedef struct fixture {
    tr_gpt_build_spec spec;
    tr_blend blend, per_split[TR_N_SPLITS];
    char split[64];
    char *text;
} fixture;

static void load_fixture(const char *name, fixture *fx) {
    memset(fx, 0, sizeof *fx);
    char path[512];
    snprintf(path, sizeof path, GPT_DIR "%s.txt", name);
    fx->text = slurp(path);
    CHECK(fx->text != NULL);
    if (!fx->text) return;
    tr_gpt_build_spec *s = &fx->spec;
    s->params.pad = -1;
    char *copy = strdup(fx->text);
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "cfg ", 4) != 0) continue;
        char key[32];
        int off = 0;
        sscanf(line + 4, "%31s %n", key, &off);
        const char *v = line + 4 + off;
        if (!strcmp(key, "seed")) s->params.seed = (uint32_t)atol(v);
        if (!strcmp(key, "seq_length")) s->params.seq_length = atol(v);
        if (!strcmp(key, "extra")) s->params.add_extra_token = atoi(v);
        if (!strcmp(key, "drop_last_valid")) s->params.drop_last_partial_validation = atoi(v);
        if (!strcmp(key, "reset_position_ids")) s->params.reset_position_ids = atoi(v);
        if (!strcmp(key, "eod_mask_loss")) s->params.eod_mask_loss = atoi(v);
        if (!strcmp(key, "eod")) s->params.eod = atol(v);
        if (!strcmp(key, "surplus")) s->surplus = atof(v);
        if (!strcmp(key, "sizes")) {
            char a[3][16];
            sscanf(v, "%15s %15s %15s", a[0], a[1], a[2]);
            for (int i = 0; i < 3; i++) s->sizes[i] = strcmp(a[i], "none") ? atol(a[i]) : -1;
        }
        if (!strcmp(key, "split")) snprintf(fx->split, sizeof fx->split, "%s", v);
        if (!strcmp(key, "blend")) blend_from_words(v, &fx->blend), s->blend = &fx->blend;
        if (!strncmp(key, "blend_", 6)) {
            int sp = split_of(key + 6);
            blend_from_words(v, &fx->per_split[sp]);
            s->per_split[sp] = &fx->per_split[sp];
        }
        if (!strcmp(key, "mock")) s->mock = true, s->mock_vocab = atol(v), s->mock_eod = 999;
    }
    free(copy);
    s->split = fx->split[0] ? fx->split : NULL;
    s->mode = TR_INDEX_NO_CACHE;
}

static void free_fixture(fixture *fx) {
    tr_blend_free(&fx->blend);
    for (int i = 0; i < TR_N_SPLITS; i++) tr_blend_free(&fx->per_split[i]);
    free(fx->text);
}

/* Compares an array with a fixture line "<n> <checksum> [values]". */
static void compare_array(const char *rest, const int64_t *got, int64_t n, const char *what) {
    char *p;
    int64_t want_n = strtoll(rest, &p, 10);
    uint64_t want_sum = strtoull(p, &p, 10), sum = 0;
    if (want_n != n) fprintf(stderr, "  %s: length %" PRId64 " vs %" PRId64 "\n", what, n, want_n);
    CHECK_INT_EQ(n, want_n);
    if (n != want_n) return;
    int64_t bad = 0, first_bad = -1;
    for (int64_t k = 0; k < n; k++) {
        sum += (uint64_t)(k + 1) * (uint64_t)got[k];
        while (*p == ' ') p++;
        if (*p) {
            int64_t v = strtoll(p, &p, 10);
            if (v != got[k] && bad++ == 0) first_bad = k;
        }
    }
    if (bad || sum != want_sum)
        fprintf(stderr, "  %s: %" PRId64 " mismatches (first at %" PRId64 ")\n", what, bad,
                first_bad);
    CHECK_INT_EQ(bad, 0);
    CHECK(sum == want_sum);
}

static int64_t *widen32(const int32_t *x, int64_t n) {
    int64_t *y = malloc((size_t)(n ? n : 1) * sizeof *y);
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

static int64_t *widen16(const int16_t *x, int64_t n) {
    int64_t *y = malloc((size_t)(n ? n : 1) * sizeof *y);
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

static void compare_with_megatron(const char *name) {
    fixture fx;
    load_fixture(name, &fx);
    if (!fx.text) return;
    tr_diags d;
    tr_diags_init(&d);
    tr_gpt_data data;
    tr_status st = tr_gpt_data_build(&data, &fx.spec, &d);
    if (st != TR_OK) tr_diags_print_text(&d, stderr, false);
    CHECK_INT_EQ(st, TR_OK);
    if (st != TR_OK) {
        tr_diags_free(&d);
        free_fixture(&fx);
        return;
    }
    int64_t L = fx.spec.params.seq_length, extra = fx.spec.params.add_extra_token;
    int64_t *text = malloc((size_t)(L + 1) * sizeof *text);
    int64_t *tok = malloc((size_t)L * 8), *lab = malloc((size_t)L * 8),
            *pos = malloc((size_t)L * 8);
    float *mask = malloc((size_t)L * sizeof *mask);
    int64_t *mask64 = malloc((size_t)L * 8);
    int checked_samples = 0;
    char *copy = strdup(fx.text);
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char tag = line[0], sname[16];
        int off = 0;
        if (line[1] != ' ' || tag == 'c') continue;
        sscanf(line + 2, "%15s %n", sname, &off);
        int sp = split_of(sname);
        const char *rest = line + 2 + off;
        tr_gpt_split_data *sd = &data.split[sp];
        char what[64];
        snprintf(what, sizeof what, "%s %c %s", name, tag, sname);
        if (tag == 'N') {
            if (!strcmp(rest, "none")) {
                CHECK(!sd->present);
            } else {
                CHECK(sd->present);
                CHECK_INT_EQ(sd->blended ? sd->size : sd->parts[0].n_samples, atoll(rest));
            }
        } else if (tag == 'D' || tag == 'X' || tag == 'H') {
            char *p;
            int part = (int)strtol(rest, &p, 10);
            CHECK(part < sd->n_parts);
            if (part >= sd->n_parts) continue;
            tr_gpt_dataset *g = &sd->parts[part];
            if (tag == 'D') {
                int64_t *w = widen32(g->document_index, g->n_document);
                compare_array(p, w, g->n_document, what);
                free(w);
            } else if (tag == 'X') {
                compare_array(p, g->sample_index, 2 * g->n_sample_rows, what);
            } else {
                compare_array(p, g->shuffle_index, g->n_samples, what);
            }
        } else if (tag == 'B' || tag == 'C') {
            CHECK(sd->blended);
            if (!sd->blended) continue;
            if (tag == 'B') {
                int64_t *w = widen16(sd->dataset_index, sd->size);
                compare_array(rest, w, sd->size, what);
                free(w);
            } else {
                compare_array(rest, sd->dataset_sample_index, sd->size, what);
            }
        } else if (tag == 'T' || tag == 'L' || tag == 'M' || tag == 'P') {
            char *p;
            int64_t i = strtoll(rest, &p, 10);
            CHECK_INT_EQ(tr_gpt_data_text(&data, sp, i, text, NULL), TR_OK);
            tr_gpt_sample s = {tok, lab, pos, mask};
            tr_gpt_make_sample(text, &fx.spec.params, &s);
            for (int64_t t = 0; t < L; t++) mask64[t] = (int64_t)mask[t];
            const int64_t *got = tag == 'T' ? tok : tag == 'L' ? lab : tag == 'M' ? mask64 : pos;
            int bad = 0;
            for (int64_t t = 0; t < L; t++) bad += strtoll(p, &p, 10) != got[t];
            if (bad) fprintf(stderr, "  %s sample %" PRId64 ": %d differences\n", what, i, bad);
            CHECK_INT_EQ(bad, 0);
            checked_samples++;
        }
    }
    (void)extra;
    CHECK(checked_samples > 0);
    free(copy);
    free(text);
    free(tok);
    free(lab);
    free(pos);
    free(mask);
    free(mask64);
    tr_gpt_data_free(&data);
    tr_diags_free(&d);
    free_fixture(&fx);
}

static void test_single_dataset_multi_epoch_matches_megatron(void) {
    compare_with_megatron("single");
}
static void test_single_epoch_with_position_reset_matches_megatron(void) {
    compare_with_megatron("single_one_epoch");
}
static void test_final_epoch_joined_matches_megatron(void) {
    compare_with_megatron("single_last_epoch_joined");
}
static void test_no_extra_token_and_partial_validation_match_megatron(void) {
    compare_with_megatron("no_extra_token");
}
static void test_weighted_blend_matches_megatron(void) {
    compare_with_megatron("blend_weighted");
}
static void test_unweighted_blend_matches_megatron(void) {
    compare_with_megatron("blend_unweighted");
}
static void test_per_split_blends_match_megatron(void) {
    compare_with_megatron("per_split");
}
static void test_mock_dataset_matches_megatron(void) {
    compare_with_megatron("mock");
}

/* ---- split strings ---- */

static void test_split_parse_and_ranges(void) {
    tr_diags d;
    tr_diags_init(&d);
    double b[3][2];
    bool present[3];
    CHECK_INT_EQ(tr_split_parse("969,30,1", b, present, &d), TR_OK);
    CHECK(present[0] && present[1] && present[2]);
    int64_t beg, end;
    tr_split_range(b[0], 1000, &beg, &end);
    CHECK_INT_EQ(beg, 0);
    CHECK_INT_EQ(end, 969);
    tr_split_range(b[2], 1000, &beg, &end);
    CHECK_INT_EQ(beg, 999);
    CHECK_INT_EQ(end, 1000);
    /* Missing entries are zero and a zero share means no dataset for that split. */
    CHECK_INT_EQ(tr_split_parse("1", b, present, &d), TR_OK);
    CHECK(present[0] && !present[1] && !present[2]);
    /* Python's round: halves go to the even neighbour (0.5*5 = 2.5 -> 2). */
    CHECK_INT_EQ(tr_split_parse("1,1", b, present, &d), TR_OK);
    tr_split_range(b[0], 5, &beg, &end);
    CHECK_INT_EQ(end, 2);
    CHECK_INT_EQ(d.n_errors, 0);
    CHECK_INT_EQ(tr_split_parse("0,0,0", b, present, &d), TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.split_syntax") != NULL);
    CHECK_INT_EQ(tr_split_parse("1,2,3,4", b, present, &d), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_split_parse("train", b, present, &d), TR_ERR_INVALID);
    tr_diags_free(&d);
}

/* An empty split is an error naming the split, not a hang (Megatron loops forever there). */
static void test_empty_split_is_reported(void) {
    tr_blend b;
    blend_from_words("ds_a", &b);
    tr_gpt_build_spec spec = {0};
    spec.blend = &b;
    spec.split = "969,30,1"; /* 80 documents: the test share rounds to nothing */
    spec.params.seed = 1;
    spec.params.seq_length = 8;
    spec.params.add_extra_token = 1;
    spec.sizes[0] = 10, spec.sizes[1] = 1, spec.sizes[2] = 1;
    tr_diags d;
    tr_diags_init(&d);
    tr_gpt_data data;
    CHECK_INT_EQ(tr_gpt_data_build(&data, &spec, &d), TR_ERR_INVALID);
    const tr_diag *x = tr_diags_find(&d, "data.split_too_small");
    CHECK(x != NULL);
    if (x) CHECK_CONTAINS(x->message, "test");
    tr_diags_free(&d);
    tr_blend_free(&b);
}

/* reset_attention_mask as document starts: after an end-of-document (9) a new document. */
static void test_doc_start_from_eod(void) {
    int64_t tokens[8] = {5, 9, 6, 7, 9, 9, 1, 2};
    int32_t ds[8], want[8] = {0, 0, 2, 2, 2, 5, 6, 6};
    tr_gpt_doc_start(tokens, 8, 9, ds);
    for (int t = 0; t < 8; t++) CHECK_INT_EQ(ds[t], want[t]);
}

/* ---- blend lists ---- */

static void test_blend_parse_forms(void) {
    tr_diags d;
    tr_diags_init(&d);
    char *one[] = {"0.3 a 0.7 b"};
    tr_str_list l1 = {one, 1, false};
    tr_blend b;
    CHECK_INT_EQ(tr_blend_parse(&l1, "dataset.data_path", &b, &d), TR_OK);
    CHECK_INT_EQ(b.n, 2);
    CHECK_STR_EQ(b.prefixes[1], "b");
    CHECK(b.weights && b.weights[0] == 0.3);
    double w[2];
    tr_blend_normalize(b.weights, 2, w);
    CHECK_CLOSE(w[0] + w[1], 1.0, 0, 1e-15);
    tr_blend_free(&b);
    char *two[] = {"a", "b", "c"};
    tr_str_list l2 = {two, 3, false};
    CHECK_INT_EQ(tr_blend_parse(&l2, "dataset.data_path", &b, &d), TR_OK);
    CHECK_INT_EQ(b.n, 3);
    CHECK(b.weights == NULL);
    tr_blend_free(&b);
    char *neg[] = {"-1", "a", "2", "b"};
    tr_str_list l3 = {neg, 4, false};
    CHECK_INT_EQ(tr_blend_parse(&l3, "dataset.data_path", &b, &d), TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.blend_weight") != NULL);
    tr_str_list empty = {NULL, 0, true};
    CHECK_INT_EQ(tr_blend_parse(&empty, "dataset.train_data_path", &b, &d), TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.blend_empty") != NULL);
    tr_diags_free(&d);
}

/* The blending order follows the weights: every prefix of the sequence is within one sample of
 * its share. */
static void test_blend_indices_track_weights(void) {
    double w[3] = {0.5, 0.3, 0.2};
    int16_t idx[1000];
    int64_t sidx[1000], count[3] = {0, 0, 0};
    tr_blend_indices(w, 3, 1000, idx, sidx);
    for (int s = 0; s < 1000; s++) {
        CHECK_INT_EQ(sidx[s], count[idx[s]]);
        count[idx[s]]++;
        for (int i = 0; i < 3; i++) CHECK(count[i] <= w[i] * (s + 1) + 1.0);
    }
    int64_t sizes[2] = {3, 5};
    int16_t e[8];
    int64_t es[8];
    tr_blend_indices_exhaustive(sizes, 2, e, es);
    int n0 = 0;
    for (int s = 0; s < 8; s++) n0 += e[s] == 0;
    CHECK_INT_EQ(n0, 3);
}

/* ---- cache ---- */

static void test_cache_build_then_load(void) {
    char dir[] = "/tmp/tr_gpt_cacheXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char cache[300];
    snprintf(cache, sizeof cache, "%s/nested/cache", dir);
    tr_gpt_lowlevel low;
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_gpt_lowlevel_open(&low, GPT_DIR "ds_a", &d), TR_OK);
    tr_gpt_params p = {.seed = 1234, .seq_length = 16, .add_extra_token = 1, .pad = -1};
    tr_gpt_dataset other, built, loaded, fresh;
    /* Another rank before rank 0 built: a clear error, not a silent rebuild. */
    CHECK_INT_EQ(tr_gpt_dataset_build(&other, &low, TR_SPLIT_TRAIN, 0, 70, 200, &p, cache,
                                      TR_INDEX_LOAD_ONLY, &d),
                 TR_ERR_NOTFOUND);
    CHECK(tr_diags_find(&d, "data.cache_missing") != NULL);
    CHECK_INT_EQ(tr_gpt_dataset_build(&built, &low, TR_SPLIT_TRAIN, 0, 70, 200, &p, cache,
                                      TR_INDEX_BUILD_OR_LOAD, &d),
                 TR_OK);
    CHECK_INT_EQ(tr_gpt_dataset_build(&loaded, &low, TR_SPLIT_TRAIN, 0, 70, 200, &p, cache,
                                      TR_INDEX_LOAD_ONLY, &d),
                 TR_OK);
    CHECK_INT_EQ(loaded.n_samples, built.n_samples);
    CHECK_INT_EQ(loaded.n_document, built.n_document);
    CHECK(memcmp(loaded.shuffle_index, built.shuffle_index, (size_t)built.n_samples * 8) == 0);
    CHECK(memcmp(loaded.sample_index, built.sample_index, (size_t)built.n_sample_rows * 16) == 0);
    CHECK(memcmp(loaded.document_index, built.document_index, (size_t)built.n_document * 4) == 0);
    /* Anything that changes the indices changes the key. */
    tr_gpt_params p2 = p;
    p2.seed = 1235;
    CHECK_INT_EQ(tr_gpt_dataset_build(&fresh, &low, TR_SPLIT_TRAIN, 0, 70, 200, &p2, cache,
                                      TR_INDEX_NO_CACHE, &d),
                 TR_OK);
    CHECK(fresh.key != built.key);
    tr_gpt_dataset_free(&fresh);
    CHECK_INT_EQ(tr_gpt_dataset_build(&fresh, &low, TR_SPLIT_TRAIN, 0, 70, 201, &p, cache,
                                      TR_INDEX_NO_CACHE, &d),
                 TR_OK);
    CHECK(fresh.key != built.key);
    tr_gpt_dataset_free(&fresh);
    /* A damaged entry is reported, never used. */
    char *path = tr_index_cache_path(cache, built.key, "gpt-train");
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (f) {
        CHECK(ftruncate(fileno(f), 100) == 0);
        fclose(f);
    }
    tr_diags_clear(&d);
    CHECK_INT_EQ(tr_gpt_dataset_build(&fresh, &low, TR_SPLIT_TRAIN, 0, 70, 200, &p, cache,
                                      TR_INDEX_LOAD_ONLY, &d),
                 TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.cache_damaged") != NULL);
    remove(path);
    free(path);
    tr_gpt_dataset_free(&built);
    tr_gpt_dataset_free(&loaded);
    tr_gpt_lowlevel_close(&low);
    tr_diags_free(&d);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Rank 0 builds and writes every split's indices; the other ranks (after the caller's barrier)
 * load them and see exactly the same datasets. */
static void test_builder_rank0_then_others(void) {
    fixture fx;
    load_fixture("blend_weighted", &fx);
    if (!fx.text) return;
    char dir[] = "/tmp/tr_gpt_buildXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    tr_diags d;
    tr_diags_init(&d);
    tr_gpt_data ref, rank0, other;
    CHECK_INT_EQ(tr_gpt_data_build(&ref, &fx.spec, &d), TR_OK);
    fx.spec.cache_dir = dir;
    fx.spec.mode = TR_INDEX_LOAD_ONLY;
    CHECK_INT_EQ(tr_gpt_data_build(&other, &fx.spec, &d), TR_ERR_NOTFOUND); /* before rank 0 */
    fx.spec.mode = TR_INDEX_BUILD_OR_LOAD;
    CHECK_INT_EQ(tr_gpt_data_build(&rank0, &fx.spec, &d), TR_OK);
    fx.spec.mode = TR_INDEX_LOAD_ONLY;
    CHECK_INT_EQ(tr_gpt_data_build(&other, &fx.spec, &d), TR_OK);
    int64_t L = fx.spec.params.seq_length + 1;
    int64_t *a = malloc((size_t)L * 8), *b = malloc((size_t)L * 8);
    for (int sp = 0; sp < TR_N_SPLITS; sp++) {
        CHECK_INT_EQ(other.split[sp].size, ref.split[sp].size);
        for (int64_t i = 0; i < ref.split[sp].size; i++) {
            int ca = -1, cb = -2;
            CHECK_INT_EQ(tr_gpt_data_text(&ref, sp, i, a, &ca), TR_OK);
            CHECK_INT_EQ(tr_gpt_data_text(&other, sp, i, b, &cb), TR_OK);
            CHECK_INT_EQ(ca, cb);
            CHECK(memcmp(a, b, (size_t)L * 8) == 0);
        }
    }
    free(a);
    free(b);
    tr_gpt_data_free(&ref);
    tr_gpt_data_free(&rank0);
    tr_gpt_data_free(&other);
    tr_diags_free(&d);
    free_fixture(&fx);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* The config's dataset section selects the same datasets as the hand-made spec of a fixture. */
static void test_spec_from_config(void) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_config_init(&c, &d), TR_OK);
    tr_gpt_build_spec spec;
    tr_gpt_spec_storage st;
    /* No data path: mock data; no seq_length: a clear error. */
    CHECK_INT_EQ(tr_gpt_spec_from_config(&c, 999, -1, 1000, TR_INDEX_NO_CACHE, &spec, &st, &d),
                 TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.seq_length") != NULL);
    c.dataset.seq_length = 16;
    c.train.train_iters = 10;
    c.train.global_batch_size = 30;
    c.validation.eval_interval = 5;
    c.validation.eval_iters = 2;
    CHECK_INT_EQ(tr_gpt_spec_from_config(&c, 999, -1, 1000, TR_INDEX_NO_CACHE, &spec, &st, &d),
                 TR_OK);
    CHECK(spec.mock);
    CHECK_INT_EQ(spec.sizes[0], 300);
    CHECK_INT_EQ(spec.sizes[1], (10 / 5 + 1) * 2 * 30);
    CHECK_INT_EQ(spec.sizes[2], 60);
    tr_gpt_spec_storage_free(&st);
    const char *blend[] = {"0.3 " GPT_DIR "ds_a 0.7 " GPT_DIR "ds_b"};
    CHECK_INT_EQ(tr_config_set_strlist(&c, TR_FID_dataset_data_path, blend, 1), TR_OK);
    CHECK_INT_EQ(tr_gpt_spec_from_config(&c, 999, -1, 1000, TR_INDEX_NO_CACHE, &spec, &st, &d),
                 TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.split_required") != NULL);
    CHECK_INT_EQ(tr_config_set_str(&c, TR_FID_dataset_split, "90,5,5"), TR_OK);
    tr_diags_clear(&d);
    CHECK_INT_EQ(tr_gpt_spec_from_config(&c, 999, -1, 1000, TR_INDEX_NO_CACHE, &spec, &st, &d),
                 TR_OK);
    CHECK(!spec.mock);
    CHECK(spec.blend && spec.blend->n == 2 && spec.blend->weights);
    tr_gpt_data data;
    CHECK_INT_EQ(tr_gpt_data_build(&data, &spec, &d), TR_OK);
    CHECK(data.split[0].blended);
    CHECK_INT_EQ(data.split[0].size, 90 + 210); /* ceil(300*0.3) + ceil(300*0.7) */
    tr_gpt_data_free(&data);
    tr_gpt_spec_storage_free(&st);
    tr_config_free(&c);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_doc_start_from_eod), TR_TEST(test_spec_from_config),
             TR_TEST(test_builder_rank0_then_others),
             TR_TEST(test_single_dataset_multi_epoch_matches_megatron),
             TR_TEST(test_single_epoch_with_position_reset_matches_megatron),
             TR_TEST(test_final_epoch_joined_matches_megatron),
             TR_TEST(test_no_extra_token_and_partial_validation_match_megatron),
             TR_TEST(test_weighted_blend_matches_megatron),
             TR_TEST(test_unweighted_blend_matches_megatron),
             TR_TEST(test_per_split_blends_match_megatron),
             TR_TEST(test_mock_dataset_matches_megatron), TR_TEST(test_split_parse_and_ranges),
             TR_TEST(test_empty_split_is_reported), TR_TEST(test_blend_parse_forms),
             TR_TEST(test_blend_indices_track_weights), TR_TEST(test_cache_build_then_load))
