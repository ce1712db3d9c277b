/* numpy's random streams reproduced in C, checked against outputs numpy itself wrote
 * (tests/data/gpt/rng.txt, from gen_rng_fixtures.py). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/datasets/mock_rng.h"
#include "runtime/data/datasets/mt19937.h"
#include "tests/unit/harness.h"

static char *load_fixture(void) {
    FILE *f = fopen(TRESTLE_SOURCE_DIR "/tests/data/gpt/rng.txt", "rb");
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

/* Calls fn on each fixture line starting with tag (the rest of the line after the tag). */
static int for_lines(const char *tag, void (*fn)(char *rest)) {
    char *text = load_fixture();
    CHECK(text != NULL);
    if (!text) return 0;
    int count = 0;
    size_t tl = strlen(tag);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, tag, tl) == 0 && line[tl] == ' ') {
            fn(line + tl + 1);
            count++;
        }
    }
    free(text);
    return count;
}

static uint64_t next_u64(char **p) {
    return strtoull(*p, p, 10);
}

static void check_mt32(char *p) {
    tr_mt19937 s;
    tr_mt19937_seed(&s, (uint32_t)next_u64(&p));
    for (int i = 0; i < 16; i++) CHECK_INT_EQ(tr_mt19937_next32(&s), next_u64(&p));
}

static void test_mt19937_matches_numpy_randomstate(void) {
    CHECK_INT_EQ(for_lines("mt32", check_mt32), 4);
}

static void check_shuffle(char *p) {
    uint32_t seed = (uint32_t)next_u64(&p);
    size_t n = (size_t)next_u64(&p);
    int32_t *x = malloc(n * sizeof *x);
    int64_t *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) x[i] = (int32_t)i, y[i] = (int64_t)i;
    tr_mt19937 s, t;
    tr_mt19937_seed(&s, seed);
    tr_mt19937_seed(&t, seed);
    tr_mt19937_shuffle_i32(&s, x, n);
    tr_mt19937_shuffle_i64(&t, y, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t want = (int64_t)next_u64(&p);
        bad += x[i] != want || y[i] != want;
    }
    CHECK_INT_EQ(bad, 0);
    free(x);
    free(y);
}

static void test_shuffle_matches_numpy(void) {
    CHECK_INT_EQ(for_lines("shuffle", check_shuffle), 6);
}

static void check_shuffle2(char *p) {
    tr_mt19937 s;
    tr_mt19937_seed(&s, (uint32_t)next_u64(&p));
    size_t n1 = (size_t)next_u64(&p), n2 = (size_t)next_u64(&p);
    int32_t a[64];
    int64_t b[64];
    for (size_t i = 0; i < n1; i++) a[i] = (int32_t)i;
    for (size_t i = 0; i < n2; i++) b[i] = (int64_t)i;
    tr_mt19937_shuffle_i32(&s, a, n1);
    tr_mt19937_shuffle_i64(&s, b, n2);
    for (size_t i = 0; i < n1; i++) CHECK_INT_EQ(a[i], next_u64(&p));
    for (size_t i = 0; i < n2; i++) CHECK_INT_EQ(b[i], next_u64(&p));
}

/* One generator serves successive shuffles (document index, then shuffle index). */
static void test_successive_shuffles_share_the_stream(void) {
    CHECK_INT_EQ(for_lines("shuffle2", check_shuffle2), 1);
}

static void check_integers(char *p) {
    tr_pcg64 g;
    tr_pcg64_seed(&g, (uint32_t)next_u64(&p));
    int32_t low = (int32_t)next_u64(&p), high = (int32_t)next_u64(&p);
    size_t count = (size_t)next_u64(&p);
    uint64_t want_sum = next_u64(&p), sum = 0;
    int bad_first = 0;
    for (size_t i = 0; i < count; i++) {
        int32_t v = tr_pcg64_integers_i32(&g, low, high);
        CHECK(v >= low && v < high);
        sum += (uint64_t)(i + 1) * (uint64_t)v;
        if (i < 32 && v != (int32_t)next_u64(&p)) bad_first++;
    }
    CHECK_INT_EQ(bad_first, 0);
    CHECK(sum == want_sum);
}

static void test_default_rng_integers_match_numpy(void) {
    CHECK_INT_EQ(for_lines("integers", check_integers), 3);
}

/* A different seed must give a different stream (guards against ignoring the seed). */
static void test_seed_changes_stream(void) {
    tr_mt19937 a, b;
    tr_mt19937_seed(&a, 1);
    tr_mt19937_seed(&b, 2);
    CHECK(tr_mt19937_next32(&a) != tr_mt19937_next32(&b));
    CHECK_INT_EQ(tr_mt19937_interval(&a, 0), 0);
    for (int i = 0; i < 1000; i++) CHECK(tr_mt19937_interval(&a, 5) <= 5);
}

TR_TEST_MAIN(TR_TEST(test_mt19937_matches_numpy_randomstate), TR_TEST(test_shuffle_matches_numpy),
             TR_TEST(test_successive_shuffles_share_the_stream),
             TR_TEST(test_default_rng_integers_match_numpy), TR_TEST(test_seed_changes_stream))
