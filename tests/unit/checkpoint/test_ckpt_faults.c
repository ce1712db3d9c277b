/* Damaged and incomplete checkpoints are refused with an error naming the tensor and the file;
 * each fault has a passing twin (the undamaged checkpoint loads). */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/checkpoint/ckpt.h"
#include "runtime/checkpoint/reader.h"
#include "tests/ckpt/ckpt_util.h"
#include "tests/unit/harness.h"

static const ck_layout TP2 = {2, 1, 1, 1, 0};

typedef struct fixture {
    char *root, *iter;
    tr_diags d;
} fixture;

static void setup(fixture *f) {
    f->root = ck_tmpdir();
    tr_diags_init(&f->d);
    if (ck_save_layout(f->root, &TP2, 5, &f->d) != TR_OK) tr_diags_print_text(&f->d, stderr, 0);
    size_t n = strlen(f->root) + 32;
    f->iter = malloc(n);
    snprintf(f->iter, n, "%s/iter_0000005", f->root);
}

static void teardown(fixture *f) {
    ck_rm_rf(f->root);
    free(f->root);
    free(f->iter);
    tr_diags_free(&f->d);
}

static char *path_in(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Opens and loads everything layout TP2 holds; returns the first failing status. */
static tr_status open_and_load(const char *dir, tr_diags *d) {
    tr_ckpt_reader *r;
    TR_TRY(tr_ckpt_open(dir, &r, d));
    tr_status s = TR_OK;
    for (int rank = 0; rank < 2 && s == TR_OK; rank++) {
        ck_rank_state st;
        ck_build_rank(&st, &TP2, rank, 5);
        s = tr_ckpt_load_tensors(r, st.t, st.n, d);
        ck_free_rank(&st);
    }
    tr_ckpt_close(r);
    return s;
}

static const char *message_of(const tr_diags *d, const char *id) {
    const tr_diag *g = tr_diags_find(d, id);
    return g ? g->message : NULL;
}

static void test_intact_checkpoint_loads_and_verifies(void) {
    fixture f;
    setup(&f);
    CHECK(open_and_load(f.iter, &f.d) == TR_OK);
    tr_ckpt_reader *r;
    CHECK(tr_ckpt_open(f.iter, &r, &f.d) == TR_OK);
    CHECK(tr_ckpt_verify(r, NULL, &f.d) == TR_OK);
    tr_ckpt_close(r);
    CHECK_INT_EQ(f.d.n_errors, 0);
    teardown(&f);
}

static void test_flipped_byte(void) {
    fixture f;
    setup(&f);
    /* Rank 1 registered the embedding first, so its file starts with that tensor's bytes. */
    char *p = path_in(f.iter, "shard_r00001.bin");
    int fd = open(p, O_RDWR);
    unsigned char b = 0;
    CHECK(pread(fd, &b, 1, 3) == 1);
    b ^= 0x10;
    CHECK(pwrite(fd, &b, 1, 3) == 1);
    close(fd);
    CHECK(open_and_load(f.iter, &f.d) == TR_ERR_INVALID);
    const char *m = message_of(&f.d, "checkpoint.checksum_mismatch");
    CHECK_CONTAINS(m, "embedding.word_embeddings.weight");
    CHECK_CONTAINS(m, "shard_r00001.bin");
    /* verify finds the same shard without being asked for a slice. */
    tr_diags_clear(&f.d);
    tr_ckpt_reader *r;
    CHECK(tr_ckpt_open(f.iter, &r, &f.d) == TR_OK);
    CHECK(tr_ckpt_verify(r, NULL, &f.d) == TR_ERR_INVALID);
    CHECK_INT_EQ(f.d.n_errors, 1);
    CHECK_CONTAINS(message_of(&f.d, "checkpoint.checksum_mismatch"),
                   "embedding.word_embeddings.weight");
    tr_ckpt_close(r);
    free(p);
    teardown(&f);
}

static void test_truncated_file(void) {
    fixture f;
    setup(&f);
    char *p = path_in(f.iter, "shard_r00000.bin");
    struct stat st;
    CHECK(stat(p, &st) == 0);
    CHECK(truncate(p, st.st_size - 1) == 0);
    CHECK(open_and_load(f.iter, &f.d) == TR_ERR_INVALID);
    const char *m = message_of(&f.d, "checkpoint.file_truncated");
    CHECK_CONTAINS(m, "shard_r00000.bin");
    CHECK_CONTAINS(m, "holding tensor '");
    CHECK_CONTAINS(m, "truncated");
    free(p);
    teardown(&f);
}

static void test_missing_shard(void) {
    fixture f;
    setup(&f);
    char *p = path_in(f.iter, "shard_r00001.bin");
    CHECK(unlink(p) == 0);
    CHECK(open_and_load(f.iter, &f.d) == TR_ERR_INVALID);
    const char *m = message_of(&f.d, "checkpoint.file_missing");
    CHECK_CONTAINS(m, "shard_r00001.bin");
    CHECK_CONTAINS(m, "holding tensor '");
    free(p);
    teardown(&f);
}

/* Replaces every occurrence of `from` in the manifest with `to`. */
static void edit_manifest(const char *iter, const char *from, const char *to) {
    char *p = path_in(iter, TR_CKPT_MANIFEST);
    FILE *fp = fopen(p, "rb");
    char *text = calloc(1, 1 << 20);
    size_t n = fread(text, 1, (1 << 20) - 1, fp);
    fclose(fp);
    text[n] = '\0';
    fp = fopen(p, "wb");
    for (char *s = text, *hit; *s; s = hit + strlen(from)) {
        hit = strstr(s, from);
        if (!hit) {
            fputs(s, fp);
            break;
        }
        fwrite(s, 1, (size_t)(hit - s), fp);
        fputs(to, fp);
    }
    fclose(fp);
    free(text);
    free(p);
}

static void test_manifest_escaping_the_directory(void) {
    fixture f;
    setup(&f);
    /* A valid copy of the file exists one level up: only the name rule stops the load. */
    char *src = path_in(f.iter, "shard_r00001.bin"), *dst = path_in(f.root, "shard_r00001.bin");
    CHECK(link(src, dst) == 0);
    edit_manifest(f.iter, "\"shard_r00001.bin\"", "\"../shard_r00001.bin\"");
    CHECK(open_and_load(f.iter, &f.d) == TR_ERR_INVALID);
    const char *m = message_of(&f.d, "checkpoint.path_escape");
    CHECK_CONTAINS(m, "../shard_r00001.bin");
    CHECK_CONTAINS(m, "outside the checkpoint directory");
    tr_diags_clear(&f.d);
    edit_manifest(f.iter, "\"../shard_r00001.bin\"", "\"/etc/passwd\"");
    CHECK(open_and_load(f.iter, &f.d) == TR_ERR_INVALID);
    CHECK_CONTAINS(message_of(&f.d, "checkpoint.path_escape"), "/etc/passwd");
    free(src);
    free(dst);
    teardown(&f);
}

static void test_symlink_out_of_the_directory(void) {
    fixture f;
    setup(&f);
    char *src = path_in(f.iter, "shard_r00001.bin"), *out = path_in(f.root, "outside.bin");
    CHECK(rename(src, out) == 0);
    CHECK(symlink(out, src) == 0);
    CHECK(open_and_load(f.iter, &f.d) == TR_ERR_INVALID);
    const char *m = message_of(&f.d, "checkpoint.path_escape");
    CHECK_CONTAINS(m, "shard_r00001.bin");
    CHECK_CONTAINS(m, "symbolic link");
    free(src);
    free(out);
    teardown(&f);
}

static void test_manifest_strictness(void) {
    fixture f;
    setup(&f);
    edit_manifest(f.iter, "\"iteration\": 5", "\"iteration\": 5, \"iterations\": 5");
    CHECK(open_and_load(f.iter, &f.d) == TR_ERR_INVALID);
    CHECK_CONTAINS(message_of(&f.d, "checkpoint.manifest_invalid"), "unknown key 'iterations'");
    tr_diags_clear(&f.d);
    edit_manifest(f.iter, "\"iterations\": 5", "\"version\": 9");
    CHECK(open_and_load(f.iter, &f.d) == TR_ERR_INVALID);
    /* Repeated keys are refused by the JSON reader itself, with the line. */
    CHECK_CONTAINS(message_of(&f.d, "data.json_syntax"), "'version' appears twice");
    CHECK(tr_diags_find(&f.d, "checkpoint.manifest_invalid") != NULL);
    tr_diags_clear(&f.d);
    edit_manifest(f.iter, "\"version\": 1,", "\"version\": 2,");
    edit_manifest(f.iter, ", \"version\": 9", "");
    CHECK(open_and_load(f.iter, &f.d) == TR_ERR_INVALID);
    CHECK_CONTAINS(message_of(&f.d, "checkpoint.manifest_invalid"), "version 2");
    tr_diags_clear(&f.d);
    edit_manifest(f.iter, "{", "[");
    CHECK(open_and_load(f.iter, &f.d) != TR_OK);
    CHECK(tr_diags_find(&f.d, "checkpoint.manifest_invalid") != NULL);
    teardown(&f);
}

static void test_manifest_slice_outside_tensor(void) {
    fixture f;
    setup(&f);
    /* The embedding is [24, 8]; a shard claiming rows from 20 would run past the end. */
    edit_manifest(f.iter, "{\"offset\": [12, 0]", "{\"offset\": [20, 0]");
    CHECK(open_and_load(f.iter, &f.d) == TR_ERR_INVALID);
    CHECK_CONTAINS(message_of(&f.d, "checkpoint.manifest_invalid"),
                   "embedding.word_embeddings.weight");
    teardown(&f);
}

static void test_directory_without_manifest_is_incomplete(void) {
    fixture f;
    setup(&f);
    char *p = path_in(f.iter, TR_CKPT_MANIFEST);
    CHECK(unlink(p) == 0);
    CHECK(open_and_load(f.iter, &f.d) == TR_ERR_INVALID);
    CHECK_CONTAINS(message_of(&f.d, "checkpoint.incomplete"), "manifest.json");
    free(p);
    teardown(&f);
}

static void test_tracker_problems(void) {
    fixture f;
    setup(&f);
    char *dir;
    int64_t it;
    CHECK(tr_ckpt_find(f.root, -1, &dir, &it, &f.d) == TR_OK);
    CHECK_INT_EQ(it, 5);
    free(dir);
    /* A step the root does not hold, beside committed ones: an error listing what exists. */
    CHECK(tr_ckpt_find(f.root, 6, &dir, &it, &f.d) == TR_ERR_INVALID);
    CHECK_CONTAINS(message_of(&f.d, "checkpoint.missing_iteration"), "iter_0000006");
    CHECK_CONTAINS(message_of(&f.d, "checkpoint.missing_iteration"), "iterations in");
    CHECK_CONTAINS(message_of(&f.d, "checkpoint.missing_iteration"), ": iter_0000005");
    tr_diags_clear(&f.d);
    /* The tracker names an iteration whose directory is gone: never "no checkpoint". */
    char *five = path_in(f.root, "iter_0000005"), *moved = path_in(f.root, "moved");
    CHECK(rename(five, moved) == 0);
    CHECK(tr_ckpt_find(f.root, -1, &dir, &it, &f.d) == TR_ERR_INVALID);
    CHECK_CONTAINS(message_of(&f.d, "checkpoint.missing_iteration"),
                   "latest_checkpointed_iteration.txt names");
    CHECK_CONTAINS(message_of(&f.d, "checkpoint.missing_iteration"), ": none");
    CHECK(tr_diags_find(&f.d, "checkpoint.missing_iteration")->hint != NULL);
    CHECK(rename(moved, five) == 0);
    free(five);
    free(moved);
    tr_diags_clear(&f.d);
    char *tracker = path_in(f.root, TR_CKPT_TRACKER);
    FILE *fp = fopen(tracker, "w");
    fputs("five\n", fp);
    fclose(fp);
    CHECK(tr_ckpt_find(f.root, -1, &dir, &it, &f.d) == TR_ERR_INVALID);
    CHECK(tr_diags_find(&f.d, "checkpoint.tracker_invalid") != NULL);
    tr_diags_clear(&f.d);
    unlink(tracker);
    CHECK(tr_ckpt_find(f.root, -1, &dir, &it, &f.d) == TR_ERR_NOTFOUND);
    CHECK(tr_diags_find(&f.d, "checkpoint.no_checkpoint") != NULL);
    free(tracker);
    teardown(&f);
}

static void test_load_request_errors(void) {
    fixture f;
    setup(&f);
    tr_ckpt_reader *r;
    CHECK(tr_ckpt_open(f.iter, &r, &f.d) == TR_OK);
    float buf[24 * 8];
    tr_ckpt_slice s = {2, {0, 0}, {24, 8}};
    CHECK(tr_ckpt_read(r, "embedding.word_embeddings.weight", TR_CKPT_F32, &s, buf, &f.d) == TR_OK);
    CHECK(tr_ckpt_read(r, "embedding.word_embeddings.bias", TR_CKPT_F32, &s, buf, &f.d) ==
          TR_ERR_INVALID);
    CHECK_CONTAINS(message_of(&f.d, "checkpoint.tensor_missing"), "word_embeddings.bias");
    CHECK(tr_ckpt_read(r, "embedding.word_embeddings.weight", TR_CKPT_F64, &s, buf, &f.d) ==
          TR_ERR_INVALID);
    CHECK(tr_diags_find(&f.d, "checkpoint.dtype_mismatch") != NULL);
    tr_ckpt_slice past = {2, {1, 0}, {24, 8}};
    CHECK(tr_ckpt_read(r, "embedding.word_embeddings.weight", TR_CKPT_F32, &past, buf, &f.d) ==
          TR_ERR_INVALID);
    CHECK(tr_diags_find(&f.d, "checkpoint.slice_out_of_range") != NULL);
    int64_t g[2] = {25, 8};
    tr_ckpt_tensor t =
        tr_ckpt_tensor_full("embedding.word_embeddings.weight", TR_CKPT_F32, 2, g, buf);
    t.slice.shape[0] = 1;
    CHECK(tr_ckpt_load_tensors(r, &t, 1, &f.d) == TR_ERR_INVALID);
    CHECK(tr_diags_find(&f.d, "checkpoint.shape_mismatch") != NULL);
    tr_ckpt_close(r);
    teardown(&f);
}

/* Saves two ranks whose registrations are given; returns finalize's status. */
static tr_status save_two(const char *root, tr_ckpt_tensor *a, int na, tr_ckpt_tensor *b, int nb,
                          bool run_rank1, tr_diags *d) {
    tr_ckpt_save *s[2] = {NULL, NULL};
    tr_ckpt_save_opts o;
    tr_ckpt_save_opts_init(&o, root, 3);
    o.world = 2;
    o.nonce = tr_ckpt_new_nonce();
    o.fsync = false;
    tr_status st = tr_ckpt_save_begin(&o, &s[0], d);
    o.rank = 1;
    if (st == TR_OK) st = tr_ckpt_save_begin(&o, &s[1], d);
    if (st == TR_OK) st = tr_ckpt_save_write_shards(s[0], a, na, d);
    if (st == TR_OK && run_rank1) st = tr_ckpt_save_write_shards(s[1], b, nb, d);
    if (st == TR_OK) st = tr_ckpt_save_finalize(s[0], d);
    if (st == TR_OK) st = tr_ckpt_save_commit(s[0], d);
    tr_ckpt_save_free(s[0]);
    tr_ckpt_save_free(s[1]);
    return st;
}

static void test_save_rejects_bad_coverage(void) {
    char *root = ck_tmpdir();
    tr_diags d;
    tr_diags_init(&d);
    float x[8] = {0};
    int64_t g[1] = {8};
    tr_ckpt_tensor lo = tr_ckpt_tensor_full("w", TR_CKPT_F32, 1, g, x);
    tr_ckpt_tensor_split(&lo, 0, 2, 0);
    tr_ckpt_tensor hi = tr_ckpt_tensor_full("w", TR_CKPT_F32, 1, g, x);
    tr_ckpt_tensor_split(&hi, 0, 2, 1);
    /* Passing twin: the two halves tile the tensor. */
    CHECK(save_two(root, &lo, 1, &hi, 1, true, &d) == TR_OK);
    CHECK_INT_EQ(d.n_errors, 0);
    /* Both ranks claim the low half as replica 0. */
    CHECK(save_two(root, &lo, 1, &lo, 1, true, &d) == TR_ERR_INVALID);
    CHECK_CONTAINS(message_of(&d, "checkpoint.overlap"), "'w'");
    tr_diags_clear(&d);
    /* The high half's owner marks it as a non-writing replica: nobody writes it. */
    hi.replica_id = 1;
    CHECK(save_two(root, &lo, 1, &hi, 1, true, &d) == TR_ERR_INVALID);
    CHECK_CONTAINS(message_of(&d, "checkpoint.not_covered"), "4 of 8");
    tr_diags_clear(&d);
    hi.replica_id = 0;
    /* Rank 1 never wrote (no barrier): finalize refuses instead of publishing half a checkpoint. */
    CHECK(save_two(root, &lo, 1, &hi, 1, false, &d) == TR_ERR_INVALID);
    CHECK_CONTAINS(message_of(&d, "checkpoint.incomplete"), "rank 1");
    tr_diags_clear(&d);
    /* The ranks disagree on the global shape. */
    int64_t g2[1] = {9};
    tr_ckpt_tensor other = tr_ckpt_tensor_full("w", TR_CKPT_F32, 1, g2, x);
    other.slice.offset[0] = 4;
    other.slice.shape[0] = 4;
    CHECK(save_two(root, &lo, 1, &other, 1, true, &d) == TR_ERR_INVALID);
    CHECK_CONTAINS(message_of(&d, "checkpoint.inconsistent_tensor"), "'w'");
    tr_diags_clear(&d);
    /* A slice outside the tensor is caught at registration. */
    tr_ckpt_tensor outside = hi;
    outside.slice.offset[0] = 6;
    CHECK(save_two(root, &lo, 1, &outside, 1, true, &d) == TR_ERR_INVALID);
    CHECK_CONTAINS(message_of(&d, "checkpoint.bad_tensor"), "[6, 10)");
    /* Several ranks without a shared nonce would write into different directories. */
    tr_ckpt_save_opts o;
    tr_ckpt_save_opts_init(&o, root, 4);
    o.world = 2;
    tr_ckpt_save *s = NULL;
    CHECK(tr_ckpt_save_begin(&o, &s, &d) == TR_ERR_INVALID);
    CHECK(s == NULL && tr_diags_find(&d, "checkpoint.no_nonce") != NULL);
    /* None of the failed saves moved the tracker off the good checkpoint. */
    char *dir;
    int64_t it;
    CHECK(tr_ckpt_find(root, -1, &dir, &it, &d) == TR_OK);
    CHECK_INT_EQ(it, 3);
    free(dir);
    tr_diags_free(&d);
    ck_rm_rf(root);
    free(root);
}

TR_TEST_MAIN(TR_TEST(test_intact_checkpoint_loads_and_verifies), TR_TEST(test_flipped_byte),
             TR_TEST(test_truncated_file), TR_TEST(test_missing_shard),
             TR_TEST(test_manifest_escaping_the_directory),
             TR_TEST(test_symlink_out_of_the_directory), TR_TEST(test_manifest_strictness),
             TR_TEST(test_manifest_slice_outside_tensor),
             TR_TEST(test_directory_without_manifest_is_incomplete), TR_TEST(test_tracker_problems),
             TR_TEST(test_load_request_errors), TR_TEST(test_save_rejects_bad_coverage))
