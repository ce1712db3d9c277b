/* A checkpoint root that someone else has tampered with: Trestle must never remove or read
 * anything outside the directories it wrote, and must never block on a file that is not a
 * regular file. Each hostile case runs under tr_test_deadline, so a hang fails instead of stalling.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/checkpoint/ckpt.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/reader.h"
#include "tests/ckpt/ckpt_util.h"
#include "tests/unit/harness.h"

static const ck_layout ONE = {1, 1, 1, 1, 0};

static char *path_in(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* A directory outside the checkpoint root holding one precious file. */
static char *make_victim(void) {
    char *v = ck_tmpdir();
    char *p = path_in(v, "precious.txt");
    FILE *f = fopen(p, "w");
    fputs("keep me\n", f);
    fclose(f);
    free(p);
    return v;
}

static bool victim_intact(const char *v) {
    char *p = path_in(v, "precious.txt");
    struct stat st;
    bool ok = stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

static void test_resave_over_symlinked_iteration_keeps_the_target(void) {
    char *root = ck_tmpdir(), *victim = make_victim();
    char *link = path_in(root, "iter_0000005");
    CHECK(symlink(victim, link) == 0);
    tr_diags d;
    tr_diags_init(&d);
    CHECK(ck_save_layout(root, &ONE, 5, &d) != TR_OK);
    CHECK(tr_diags_find(&d, "checkpoint.not_owned") != NULL);
    CHECK(victim_intact(victim));
    tr_diags_free(&d);
    ck_rm_rf(root);
    ck_rm_rf(victim);
    free(link);
    free(root);
    free(victim);
}

static void test_retention_skips_symlinks(void) {
    char *root = ck_tmpdir(), *victim = make_victim();
    tr_diags d;
    tr_diags_init(&d);
    char *old = path_in(root, "iter_0000001"), *stale = path_in(root, "iter_0000002.tmp-abc");
    CHECK(symlink(victim, old) == 0);
    CHECK(symlink(victim, stale) == 0);
    CHECK(ck_save_layout(root, &ONE, 5, &d) == TR_OK);
    CHECK(ck_save_layout(root, &ONE, 6, &d) == TR_OK);
    CHECK(tr_ckpt_retain(root, 1, 0, &d) == TR_OK);
    CHECK(victim_intact(victim));
    struct stat st;
    CHECK(lstat(old, &st) == 0 && S_ISLNK(st.st_mode)); /* left alone, not ours */
    char *five = path_in(root, "iter_0000005");
    CHECK(lstat(five, &st) != 0); /* ours, beyond most_recent_k: removed */
    CHECK(tr_diags_find(&d, "checkpoint.not_owned") != NULL);
    free(five);
    free(old);
    free(stale);
    tr_diags_free(&d);
    ck_rm_rf(root);
    ck_rm_rf(victim);
    free(root);
    free(victim);
}

static void test_symlinked_iteration_is_not_read(void) {
    char *root = ck_tmpdir(), *elsewhere = ck_tmpdir();
    tr_diags d;
    tr_diags_init(&d);
    CHECK(ck_save_layout(elsewhere, &ONE, 7, &d) == TR_OK);
    char *target = path_in(elsewhere, "iter_0000007"), *link = path_in(root, "iter_0000007");
    CHECK(symlink(target, link) == 0);
    char *tracker = path_in(root, "latest_checkpointed_iteration.txt");
    FILE *f = fopen(tracker, "w");
    fputs("7\n", f);
    fclose(f);
    char *dir = NULL;
    int64_t it;
    CHECK(tr_ckpt_find(root, -1, &dir, &it, &d) != TR_OK);
    CHECK(dir == NULL);
    CHECK_CONTAINS(tr_diags_find(&d, "checkpoint.no_checkpoint")->message, "symbolic link");
    free(dir);
    free(tracker);
    free(target);
    free(link);
    tr_diags_free(&d);
    ck_rm_rf(root);
    ck_rm_rf(elsewhere);
    free(root);
    free(elsewhere);
}

/* Replaces name in dir with a FIFO nobody writes to. */
static void fifo_in_place_of(const char *dir, const char *name) {
    char *p = path_in(dir, name);
    unlink(p);
    CHECK(mkfifo(p, 0600) == 0);
    free(p);
}

static void test_fifos_are_refused_without_blocking(void) {
    const char *names[] = {"latest_checkpointed_iteration.txt", "iter_0000005/manifest.json",
                           "iter_0000005/shard_r00000.bin"};
    for (int i = 0; i < 3; i++) {
        char *root = ck_tmpdir();
        tr_diags d;
        tr_diags_init(&d);
        CHECK(ck_save_layout(root, &ONE, 5, &d) == TR_OK);
        fifo_in_place_of(root, names[i]);
        tr_test_deadline(5, "a read blocked on a FIFO");
        char *dir = NULL;
        int64_t it;
        tr_status s = tr_ckpt_find(root, i == 0 ? -1 : 5, &dir, &it, &d);
        tr_ckpt_reader *r = NULL;
        if (s == TR_OK) s = tr_ckpt_open(dir, &r, &d);
        tr_test_deadline(0, NULL);
        CHECK(s != TR_OK);
        CHECK(d.n_errors > 0);
        if (d.n_errors > 0) CHECK_CONTAINS(d.items[0].message, "regular file");
        tr_ckpt_close(r);
        free(dir);
        tr_diags_free(&d);
        ck_rm_rf(root);
        free(root);
    }
}

static void test_manifest_that_is_a_directory(void) {
    char *root = ck_tmpdir();
    tr_diags d;
    tr_diags_init(&d);
    CHECK(ck_save_layout(root, &ONE, 5, &d) == TR_OK);
    char *iter = path_in(root, "iter_0000005"), *m = path_in(iter, "manifest.json");
    unlink(m);
    CHECK(mkdir(m, 0755) == 0);
    tr_ckpt_reader *r = NULL;
    CHECK(tr_ckpt_open(iter, &r, &d) != TR_OK);
    CHECK(tr_diags_find(&d, "checkpoint.incomplete") != NULL);
    if (d.n_errors) CHECK_CONTAINS(d.items[0].message, "directory");
    rmdir(m);
    free(m);
    free(iter);
    tr_diags_free(&d);
    ck_rm_rf(root);
    free(root);
}

/* A manifest whose tensor shape multiplies past 64 bits: refused by name, without a signed
 * overflow (the sanitizer build halts on one). Each dimension alone is in range. */
static void test_manifest_with_huge_shape(void) {
    static const char *const shapes[] = {"[4503599627370496, 4503599627370496]",
                                         "[2147483648, 2147483648]", "[1, 2305843009213693952]"};
    for (int i = 0; i < 3; i++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "{\"format\": \"trestle-checkpoint\", \"version\": 1, \"code_version\": \"x\", "
                 "\"iteration\": 1, \"config_fingerprint\": \"0000000000000000\", \"world\": 1, "
                 "\"layout\": {\"tp\": 1, \"pp\": 1, \"vpp\": 1, \"dp\": 1, \"cp\": 1, \"ep\": 1, "
                 "\"dist_opt\": 0}, \"files\": [{\"name\": \"shard_r00000.bin\", \"bytes\": 8}], "
                 "\"tensors\": [{\"name\": \"w\", \"dtype\": \"f64\", \"shape\": %s, "
                 "\"tp_axis\": -1, \"pp_axis\": -1, \"dp_axis\": -1, \"shards\": [{\"offset\": "
                 "[0, 0], \"shape\": [1, 1], \"file\": 0, \"pos\": 0, \"bytes\": 8, "
                 "\"xxh3\": \"0000000000000000\"}]}]}\n",
                 shapes[i]);
        tr_ckpt_manifest m;
        tr_ckpt_manifest_init(&m);
        tr_diags d;
        tr_diags_init(&d);
        CHECK(tr_ckpt_manifest_parse(text, strlen(text), "manifest.json", &m, &d) != TR_OK);
        const tr_diag *g = tr_diags_find(&d, "checkpoint.manifest_invalid");
        CHECK(g != NULL);
        if (g && i < 2) CHECK_CONTAINS(g->message, "more than 2^63 bytes");
        if (!g) tr_diags_print_text(&d, stderr, false);
        tr_ckpt_manifest_free(&m);
        tr_diags_free(&d);
    }
}

static void test_manifest_iteration_must_match_its_directory(void) {
    char *root = ck_tmpdir();
    tr_diags d;
    tr_diags_init(&d);
    CHECK(ck_save_layout(root, &ONE, 5, &d) == TR_OK);
    char *five = path_in(root, "iter_0000005"), *nine = path_in(root, "iter_0000009");
    tr_ckpt_reader *r = NULL;
    CHECK(tr_ckpt_open(five, &r, &d) == TR_OK);
    tr_ckpt_close(r);
    CHECK(rename(five, nine) == 0);
    r = NULL;
    CHECK(tr_ckpt_open(nine, &r, &d) != TR_OK);
    const tr_diag *g = tr_diags_find(&d, "checkpoint.manifest_invalid");
    CHECK(g != NULL);
    if (g)
        CHECK_CONTAINS(g->message,
                       "records iteration 5, but its directory is named for iteration 9");
    tr_ckpt_close(r);
    free(five);
    free(nine);
    tr_diags_free(&d);
    ck_rm_rf(root);
    free(root);
}

TR_TEST_MAIN(TR_TEST(test_manifest_iteration_must_match_its_directory),
             TR_TEST(test_manifest_with_huge_shape),
             TR_TEST(test_resave_over_symlinked_iteration_keeps_the_target),
             TR_TEST(test_retention_skips_symlinks), TR_TEST(test_symlinked_iteration_is_not_read),
             TR_TEST(test_fifos_are_refused_without_blocking),
             TR_TEST(test_manifest_that_is_a_directory))
