/* checkpoint.async_save: the background writer produces the same bytes as a synchronous save,
 * writes the values as of the snapshot (not later updates), and reports its errors at join. */
#include "runtime/checkpoint/ckpt.h"
#include "runtime/checkpoint/reader.h"
#include "tests/ckpt/ckpt_util.h"
#include "tests/unit/harness.h"

static const ck_layout L = {2, 2, 1, 2, 1};

static char *slurp(const char *root, const char *name, size_t *len) {
    char p[700];
    snprintf(p, sizeof p, "%s/iter_0000009/%s", root, name);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    *len = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

/* Every rank saves iteration 9 of layout L, asynchronously or not. With scribble, each rank
 * overwrites its buffers right after async_start returns, as training would. */
static tr_status save(const char *root, bool async, bool scribble, tr_diags *d) {
    enum { W = 8 };
    ck_rank_state st[W];
    tr_ckpt_save *sv[W];
    tr_ckpt_async *as[W];
    tr_status s = TR_OK;
    for (int r = 0; r < W; r++) {
        ck_build_rank(&st[r], &L, r, 9);
        tr_ckpt_save_opts o;
        tr_ckpt_save_opts_init(&o, root, 9);
        o.rank = r;
        o.world = W;
        o.nonce = 77;
        o.layout = ck_to_layout(&L);
        o.fsync = false;
        if (tr_ckpt_save_begin(&o, &sv[r], d) != TR_OK) s = TR_ERR_INVALID;
    }
    for (int r = 0; r < W && s == TR_OK; r++) {
        if (!async) {
            s = tr_ckpt_save_write_shards(sv[r], st[r].t, st[r].n, d);
            continue;
        }
        s = tr_ckpt_async_start(sv[r], st[r].t, st[r].n, &as[r], d);
        if (s == TR_OK && scribble)
            for (int i = 0; i < st[r].n; i++)
                memset(st[r].t[i].data, 0xEE,
                       (size_t)tr_ckpt_slice_volume(&st[r].t[i].slice) *
                           tr_ckpt_dtype_size(st[r].t[i].dtype));
    }
    if (async)
        for (int r = 0; r < W; r++) {
            tr_status j = tr_ckpt_async_join(as[r], d);
            if (s == TR_OK) s = j;
        }
    if (s == TR_OK) s = tr_ckpt_save_finalize(sv[0], d);
    if (s == TR_OK) s = tr_ckpt_save_commit(sv[0], d);
    for (int r = 0; r < W; r++) {
        tr_ckpt_save_free(sv[r]);
        ck_free_rank(&st[r]);
    }
    return s;
}

static void test_async_equals_sync(void) {
    char *a = ck_tmpdir(), *b = ck_tmpdir();
    tr_diags d;
    tr_diags_init(&d);
    CHECK(save(a, false, false, &d) == TR_OK);
    CHECK(save(b, true, true, &d) == TR_OK);
    const char *files[] = {"manifest.json",    "shard_r00000.bin", "shard_r00001.bin",
                           "shard_r00003.bin", "shard_r00005.bin", "rank_00007.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        size_t la = 0, lb = 0;
        char *x = slurp(a, files[i], &la), *y = slurp(b, files[i], &lb);
        CHECK(x && y);
        CHECK_INT_EQ(la, lb);
        CHECK(x && y && la == lb && memcmp(x, y, la) == 0);
        free(x);
        free(y);
    }
    /* And the async checkpoint holds the snapshot's values, under another layout too. */
    const ck_layout other = {1, 4, 1, 1, 0};
    CHECK_INT_EQ(ck_load_and_compare(b, &other, 9, &d), 0);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
    ck_rm_rf(a);
    ck_rm_rf(b);
    free(a);
    free(b);
}

static void test_async_error_surfaces_at_join(void) {
    char *root = ck_tmpdir();
    tr_diags d;
    tr_diags_init(&d);
    tr_ckpt_save_opts o;
    tr_ckpt_save_opts_init(&o, root, 1);
    o.fsync = false;
    tr_ckpt_save *s;
    CHECK(tr_ckpt_save_begin(&o, &s, &d) == TR_OK);
    int64_t g[1] = {4};
    tr_ckpt_tensor t = tr_ckpt_tensor_full("w", TR_CKPT_F32, 1, g, NULL); /* no data */
    tr_ckpt_async *a;
    CHECK(tr_ckpt_async_start(s, &t, 1, &a, &d) == TR_OK);
    CHECK_INT_EQ(d.n_errors, 0); /* nothing reported before join */
    CHECK(tr_ckpt_async_join(a, &d) == TR_ERR_INVALID);
    CHECK_CONTAINS(tr_diags_find(&d, "checkpoint.bad_tensor")->message, "'w'");
    /* Passing twin: with data the same save completes. */
    float x[4] = {1, 2, 3, 4};
    t.data = x;
    tr_diags_clear(&d);
    CHECK(tr_ckpt_async_start(s, &t, 1, &a, &d) == TR_OK);
    while (!tr_ckpt_async_done(a)) usleep(100);
    CHECK(tr_ckpt_async_join(a, &d) == TR_OK);
    CHECK(tr_ckpt_save_finalize(s, &d) == TR_OK);
    CHECK(tr_ckpt_save_commit(s, &d) == TR_OK);
    tr_ckpt_save_free(s);
    tr_diags_free(&d);
    ck_rm_rf(root);
    free(root);
}

TR_TEST_MAIN(TR_TEST(test_async_equals_sync), TR_TEST(test_async_error_surfaces_at_join))
