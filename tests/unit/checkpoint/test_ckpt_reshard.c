/* Resharding: a checkpoint saved by every rank of one layout is loaded by every rank of another,
 * and each rank's slices must come back bitwise equal to the values of the global tensors. */
#include <stdbool.h>

#include "runtime/checkpoint/ckpt.h"
#include "runtime/checkpoint/reader.h"
#include "runtime/checkpoint/reshard.h"
#include "tests/ckpt/ckpt_util.h"
#include "tests/unit/harness.h"

/* Counts RESHARD / IMPOSSIBLE verdicts of the metadata-only plan for target layout l. */
static void plan_counts(const char *root, const ck_layout *l, int *reshard, int *impossible) {
    tr_diags d;
    tr_diags_init(&d);
    char *dir;
    int64_t it;
    *reshard = *impossible = -1;
    tr_ckpt_reader *r = NULL;
    if (tr_ckpt_find(root, -1, &dir, &it, &d) == TR_OK) {
        tr_ckpt_open(dir, &r, &d);
        free(dir);
    }
    if (r) {
        const tr_ckpt_manifest *m = tr_ckpt_reader_manifest(r);
        tr_ckpt_layout t = ck_to_layout(l);
        tr_ckpt_plan_item *items;
        tr_ckpt_plan(m, &t, &items, &d);
        *reshard = *impossible = 0;
        for (int i = 0; i < m->n_tensors; i++) {
            *reshard += items[i].kind == TR_CKPT_PLAN_RESHARD;
            *impossible += items[i].kind == TR_CKPT_PLAN_IMPOSSIBLE;
        }
        free(items);
        tr_ckpt_close(r);
    }
    tr_diags_free(&d);
}

typedef struct pair {
    const char *label;
    ck_layout from, to;
    bool same_grid; /* the target cuts every tensor into the same blocks (owners differ) */
} pair;

static const pair PAIRS[] = {
    {"TP2PP2 -> TP1PP4", {2, 2, 1, 1, 0}, {1, 4, 1, 1, 0}, false},
    {"TP4 -> DP4 dist-opt", {4, 1, 1, 1, 0}, {1, 1, 1, 4, 1}, false},
    {"PP2VPP2 -> PP4", {1, 2, 2, 1, 0}, {1, 4, 1, 1, 0}, true},
    {"PP4 -> PP2VPP2", {1, 4, 1, 1, 0}, {1, 2, 2, 1, 0}, true},
    {"DP2 dist-opt -> DP3 dist-opt", {1, 1, 1, 2, 1}, {1, 1, 1, 3, 1}, false},
    {"TP2DP2 dist-opt -> PP2DP2", {2, 1, 1, 2, 1}, {1, 2, 1, 2, 0}, false},
    {"TP1 -> TP2PP2DP2 dist-opt", {1, 1, 1, 1, 0}, {2, 2, 1, 2, 1}, false},
    {"TP2PP2VPP2 -> TP4", {2, 2, 2, 1, 0}, {4, 1, 1, 1, 0}, false},
    {"TP8 -> TP1", {8, 1, 1, 1, 0}, {1, 1, 1, 1, 0}, false},
    {"PP2DP2 dist-opt -> TP2PP4", {1, 2, 1, 2, 1}, {2, 4, 1, 1, 0}, false},
};

static void test_reshard_pairs(void) {
    for (size_t i = 0; i < sizeof PAIRS / sizeof PAIRS[0]; i++) {
        char *root = ck_tmpdir();
        tr_diags d;
        tr_diags_init(&d);
        int64_t it = 100 + (int64_t)i;
        CHECK(ck_save_layout(root, &PAIRS[i].from, it, &d) == TR_OK);
        long bad = ck_load_and_compare(root, &PAIRS[i].to, it, &d);
        if (bad != 0) {
            fprintf(stderr, "  pair %s: %ld bad elements\n", PAIRS[i].label, bad);
            tr_diags_print_text(&d, stderr, false);
        }
        CHECK_INT_EQ(bad, 0);
        int reshard, impossible;
        plan_counts(root, &PAIRS[i].to, &reshard, &impossible);
        if (PAIRS[i].same_grid)
            CHECK_INT_EQ(reshard, 0);
        else
            CHECK(reshard > 0);
        CHECK_INT_EQ(impossible, 0);
        plan_counts(root, &PAIRS[i].from, &reshard, &impossible);
        CHECK_INT_EQ(reshard, 0); /* the saving layout reads exactly what it wrote */
        CHECK_INT_EQ(impossible, 0);
        tr_diags_free(&d);
        ck_rm_rf(root);
        free(root);
    }
}

static void test_same_layout_round_trip(void) {
    const ck_layout l = {2, 2, 2, 2, 1};
    char *root = ck_tmpdir();
    tr_diags d;
    tr_diags_init(&d);
    CHECK(ck_save_layout(root, &l, 7, &d) == TR_OK);
    CHECK_INT_EQ(ck_load_and_compare(root, &l, 7, &d), 0);
    /* A later save of another layout replaces what `latest` names; both stay loadable. */
    const ck_layout l2 = {1, 4, 1, 2, 0};
    CHECK(ck_save_layout(root, &l2, 8, &d) == TR_OK);
    CHECK_INT_EQ(ck_load_and_compare(root, &l, 8, &d), 0);
    tr_diags_free(&d);
    ck_rm_rf(root);
    free(root);
}

static void test_plan_impossible_split(void) {
    const ck_layout from = {2, 1, 1, 1, 0};
    const ck_layout uneven = {1, 3, 1, 1, 0}; /* 8 layers over 3 stages: uneven, loadable */
    const ck_layout to_bad = {5, 1, 1, 1, 0}; /* no TP-split dimension divides by 5 */
    char *root = ck_tmpdir();
    tr_diags d;
    tr_diags_init(&d);
    CHECK(ck_save_layout(root, &from, 1, &d) == TR_OK);
    int reshard, impossible;
    plan_counts(root, &uneven, &reshard, &impossible);
    CHECK_INT_EQ(impossible, 0);
    CHECK(reshard >= 3); /* at least the three layer-stacked tensors */
    plan_counts(root, &to_bad, &reshard, &impossible);
    CHECK(impossible >= 1);
    tr_diags_free(&d);
    ck_rm_rf(root);
    free(root);
}

static void test_layout_parse(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_ckpt_layout l;
    tr_ckpt_layout_init(&l);
    CHECK(tr_ckpt_layout_parse("tp=2,pp=4,vpp=2,dp=3,dist_opt=1", &l, &d) == TR_OK);
    CHECK(l.tp == 2 && l.pp == 4 && l.vpp == 2 && l.dp == 3 && l.dist_opt == 1);
    CHECK(tr_ckpt_layout_parse("model.tensor_model_parallel_size=8,ddp.use_distributed_optimizer="
                               "false,model.virtual_pipeline_model_parallel_size=null",
                               &l, &d) == TR_OK);
    CHECK(l.tp == 8 && l.dist_opt == 0 && l.vpp == 1);
    CHECK(tr_ckpt_layout_parse("tq=2", &l, &d) != TR_OK);
    CHECK(tr_ckpt_layout_parse("tp=0", &l, &d) != TR_OK);
    CHECK(tr_ckpt_layout_parse("tp=2x", &l, &d) != TR_OK);
    CHECK(tr_ckpt_layout_parse("tp", &l, &d) != TR_OK);
    CHECK(tr_diags_find(&d, "checkpoint.bad_layout") != NULL);
    tr_diags_free(&d);
}

/* fully_parallel_save: replicated slices are cut over the DP group so every DP rank writes a
 * share; the checkpoint loads exactly as the unspread one and the bytes are spread out. */
static void test_fully_parallel_spread(void) {
    const ck_layout l = {2, 1, 1, 4, 0};
    const int world = 8;
    char *root = ck_tmpdir();
    tr_diags d;
    tr_diags_init(&d);
    ck_rank_state *st = calloc(world, sizeof *st);
    tr_ckpt_save *sv[8];
    for (int r = 0; r < world; r++) {
        ck_build_rank(&st[r], &l, r, 3);
        int dp_r = (r / l.tp) % l.dp, tp_r = r % l.tp;
        tr_ckpt_tensor w[CK_MAX_T]; /* the spread copies; st keeps the load registration */
        memcpy(w, st[r].t, sizeof w);
        for (int i = 0; i < st[r].n; i++) {
            tr_ckpt_tensor *t = &w[i];
            /* Held by the DP group of this TP rank: the TP-split weights. Replicas across TP
             * too (layernorm, optimizer, scalars) are spread by TP rank 0's group only. */
            bool tp_split = t->tp_axis >= 0;
            if (tp_split || tp_r == 0) tr_ckpt_tensor_spread(t, dp_r, l.dp);
        }
        tr_ckpt_save_opts o;
        tr_ckpt_save_opts_init(&o, root, 3);
        o.rank = r;
        o.world = world;
        o.nonce = 99;
        o.fsync = false;
        CHECK(tr_ckpt_save_begin(&o, &sv[r], &d) == TR_OK);
        CHECK(tr_ckpt_save_write_shards(sv[r], w, st[r].n, &d) == TR_OK);
    }
    CHECK(tr_ckpt_save_finalize(sv[0], &d) == TR_OK);
    CHECK(tr_ckpt_save_commit(sv[0], &d) == TR_OK);
    if (d.n_errors) tr_diags_print_text(&d, stderr, false);
    for (int r = 0; r < world; r++) {
        tr_ckpt_save_free(sv[r]);
        ck_free_rank(&st[r]);
    }
    free(st);
    CHECK_INT_EQ(ck_load_and_compare(root, &l, 3, &d), 0);
    /* Every rank wrote something, and no rank more than half of the data. */
    char *dir;
    int64_t it;
    tr_ckpt_reader *r = NULL;
    CHECK(tr_ckpt_find(root, -1, &dir, &it, &d) == TR_OK && tr_ckpt_open(dir, &r, &d) == TR_OK);
    free(dir);
    if (r) {
        const tr_ckpt_manifest *m = tr_ckpt_reader_manifest(r);
        uint64_t total = 0, most = 0;
        int empty = 0;
        for (int f = 0; f < m->n_files; f++) {
            total += m->files[f].bytes;
            most = m->files[f].bytes > most ? m->files[f].bytes : most;
            empty += m->files[f].bytes == 0;
        }
        CHECK_INT_EQ(m->n_files, world);
        CHECK_INT_EQ(empty, 0);
        CHECK(most * 2 < total);
        tr_ckpt_close(r);
    }
    tr_diags_free(&d);
    ck_rm_rf(root);
    free(root);
}

static void test_spread_small_tensor(void) {
    float x[2][3] = {{1, 2, 3}, {4, 5, 6}};
    int64_t g[2] = {2, 3};
    tr_ckpt_tensor a = tr_ckpt_tensor_full("w", TR_CKPT_F32, 2, g, x);
    tr_ckpt_tensor b = a, c = a;
    tr_ckpt_tensor_spread(&a, 0, 4);
    tr_ckpt_tensor_spread(&b, 1, 4);
    tr_ckpt_tensor_spread(&c, 3, 4); /* only two rows for four ranks: no share */
    CHECK(a.replica_id == 0 && a.slice.offset[0] == 0 && a.slice.shape[0] == 1 && a.data == x[0]);
    CHECK(b.replica_id == 0 && b.slice.offset[0] == 1 && b.slice.shape[0] == 1 && b.data == x[1]);
    CHECK(c.replica_id != 0);
}

TR_TEST_MAIN(TR_TEST(test_fully_parallel_spread), TR_TEST(test_spread_small_tensor),
             TR_TEST(test_reshard_pairs), TR_TEST(test_same_layout_round_trip),
             TR_TEST(test_plan_impossible_split), TR_TEST(test_layout_parse))
