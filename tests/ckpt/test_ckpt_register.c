/* The registration rules of runtime/train/state_dict.c, without MPI: every TP rank's model is
 * built in-process (initialisation is layout-independent), so
 *  - every slice a TP rank registers holds exactly the values of that region of the TP1
 *    registration of the same logical tensor, with the same global shape (QKV, SwiGLU gate/up,
 *    row- and column-parallel weights and biases, the vocabulary with TP-dependent padding);
 *  - the writers (replica 0) of the ranks of a TP x DP layout tile every tensor exactly once,
 *    with and without fully_parallel_save, and the writes are spread over the ranks;
 *  - a tied embedding's copy is registered but never written. */
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "runtime/model/model.h"
#include "runtime/train/checkpointing.h"
#include "runtime/train/state_dict.h"

enum { VOCAB_REAL = 20, VOCAB_PADDED = 32 };

static tr_model_spec llama(void) {
    return (tr_model_spec){.num_layers = 3,
                           .hidden = 16,
                           .heads = 8,
                           .groups = 4,
                           .head_dim = 2,
                           .ffn = 24,
                           .vocab = VOCAB_PADDED,
                           .vocab_real = VOCAB_REAL,
                           .seq = 8,
                           .swiglu = 1,
                           .eps = 1e-5f,
                           .init_std = 0.3,
                           .embed_init_std = 0.5};
}

static tr_model_spec gpt(void) {
    tr_model_spec s = llama();
    s.swiglu = 0;
    s.layernorm = 1;
    s.learned_pos = 1;
    s.bias_linear = 1;
    s.bias_qkv = 1;
    s.tied = 1;
    return s;
}

typedef struct rank_view {
    tr_model m;
    tr_config c;
    tr_train_ckpt k;
    tr_ckpt_list l;
} rank_view;

/* The registrations of TP rank tp_rank of tp, DP rank dp_rank of dp. */
static void view_make(rank_view *v, tr_model_spec s, int tp, int tp_rank, int dp, int dp_rank,
                      bool fully_parallel, bool for_save) {
    memset(v, 0, sizeof *v);
    CHECK_INT_EQ(tr_model_create(&v->m, &s, (tr_tp_shard){tp_rank, tp}, tr_ops_cpu(), 1), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&v->m, 1234), TR_OK);
    v->c.checkpoint.fully_parallel_save = fully_parallel;
    v->k.env.c = &v->c;
    v->k.env.model = &v->m;
    v->k.tp = tp;
    v->k.tp_rank = tp_rank;
    v->k.dp = dp;
    v->k.dp_rank = dp_rank;
    v->k.rank = tp_rank + tp * dp_rank;
    v->k.world = tp * dp;
    CHECK_INT_EQ(tr_ckpt_list_add_params(&v->l, &v->k, "", v->m.params, 0, for_save), TR_OK);
}

static void view_free(rank_view *v) {
    tr_ckpt_list_free(&v->l);
    tr_model_free(&v->m);
}

static const tr_ckpt_tensor *find(const tr_ckpt_list *l, const char *name, int64_t layer) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->t[i].name, name) == 0 &&
            (layer < 0 || l->t[i].slice.offset[0] == layer || l->t[i].pp_axis < 0))
            return &l->t[i];
    return NULL;
}

/* Element (row, col) of the registration's local slice data, by global coordinates. */
static float at_global(const tr_ckpt_tensor *t, const int64_t *g) {
    int64_t idx = 0;
    for (int d = 0; d < t->ndim; d++) idx = idx * t->slice.shape[d] + (g[d] - t->slice.offset[d]);
    return ((const float *)t->data)[idx];
}

static void check_tp_slices(tr_model_spec s, int tp) {
    rank_view one;
    view_make(&one, s, 1, 0, 1, 0, false, false);
    for (int r = 0; r < tp; r++) {
        rank_view v;
        view_make(&v, s, tp, r, 1, 0, false, false);
        int64_t compared = 0;
        for (int i = 0; i < v.l.n; i++) {
            const tr_ckpt_tensor *t = &v.l.t[i];
            int64_t layer = t->pp_axis == 0 ? t->slice.offset[0] : -1;
            const tr_ckpt_tensor *ref = find(&one.l, t->name, layer);
            CHECK(ref != NULL);
            if (!ref) continue;
            CHECK_INT_EQ(t->ndim, ref->ndim);
            for (int d = 0; d < t->ndim; d++)
                CHECK_INT_EQ(t->global_shape[d], ref->global_shape[d]);
            int64_t n = tr_ckpt_slice_volume(&t->slice), bad = 0;
            for (int64_t e = 0; e < n; e++) {
                int64_t g[TR_CKPT_MAX_DIMS], rest = e;
                for (int d = t->ndim - 1; d >= 0; d--) {
                    g[d] = t->slice.offset[d] + rest % t->slice.shape[d];
                    rest /= t->slice.shape[d];
                }
                bad += at_global(t, g) != at_global(ref, g);
            }
            if (bad) fprintf(stderr, "  tp %d rank %d: %s differs\n", tp, r, t->name);
            CHECK_INT_EQ(bad, 0);
            compared += n;
        }
        CHECK(compared > 0);
        view_free(&v);
    }
    /* The vocabulary is stored unpadded, and fc1 of SwiGLU as gate and up. */
    const tr_ckpt_tensor *emb = find(&one.l, "embedding.word_embeddings.weight", -1);
    CHECK(emb && emb->global_shape[0] == VOCAB_REAL);
    if (s.swiglu) {
        const tr_ckpt_tensor *gate = find(&one.l, "decoder.layers.mlp.linear_fc1.gate.weight", 0);
        CHECK(gate && gate->global_shape[1] == s.ffn && gate->global_shape[0] == s.num_layers);
        CHECK(find(&one.l, "decoder.layers.mlp.linear_fc1.weight", 0) == NULL);
    }
    view_free(&one);
}

static void test_tp_slices_match_tp1(void) {
    for (int tp = 2; tp <= 4; tp *= 2) {
        check_tp_slices(llama(), tp);
        check_tp_slices(gpt(), tp);
    }
}

/* Writers of every tensor over the ranks of a TP x DP layout: total written volume equals the
 * tensor's, and no two written slices overlap. */
static void check_writers(tr_model_spec s, int tp, int dp, bool fully_parallel) {
    int n = tp * dp;
    rank_view *v = calloc((size_t)n, sizeof *v);
    int64_t *per_rank = calloc((size_t)n, sizeof *per_rank);
    for (int r = 0; r < n; r++) view_make(&v[r], s, tp, r % tp, dp, r / tp, fully_parallel, true);
    const tr_ckpt_list *names = &v[0].l;
    for (int i = 0; i < names->n; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = strcmp(names->t[i].name, names->t[j].name) == 0;
        if (seen) continue;
        const char *name = names->t[i].name;
        int64_t volume = 1, written = 0, overlaps = 0;
        for (int d = 0; d < names->t[i].ndim; d++) volume *= names->t[i].global_shape[d];
        for (int r = 0; r < n; r++)
            for (int a = 0; a < v[r].l.n; a++) {
                const tr_ckpt_tensor *t = &v[r].l.t[a];
                if (strcmp(t->name, name) != 0 || t->replica_id != 0) continue;
                written += tr_ckpt_slice_volume(&t->slice);
                per_rank[r] += tr_ckpt_slice_volume(&t->slice);
                for (int q = r; q < n; q++)
                    for (int b = q == r ? a + 1 : 0; b < v[q].l.n; b++) {
                        const tr_ckpt_tensor *u = &v[q].l.t[b];
                        tr_ckpt_slice ov;
                        if (strcmp(u->name, name) == 0 && u->replica_id == 0 &&
                            tr_ckpt_slice_overlap(&t->slice, &u->slice, &ov))
                            overlaps++;
                    }
            }
        if (written != volume || overlaps)
            fprintf(stderr, "  %s: %lld of %lld elements written, %lld overlaps\n", name,
                    (long long)written, (long long)volume, (long long)overlaps);
        CHECK_INT_EQ(written, volume);
        CHECK_INT_EQ(overlaps, 0);
    }
    /* fully_parallel_save: every rank writes something; without it DP rank 0 writes it all. */
    for (int r = 0; r < n; r++) {
        if (fully_parallel) CHECK(per_rank[r] > 0);
        if (!fully_parallel && r >= tp) CHECK_INT_EQ(per_rank[r], 0);
    }
    for (int r = 0; r < n; r++) view_free(&v[r]);
    free(v);
    free(per_rank);
}

static void test_writers_tile_every_tensor(void) {
    for (int fp = 0; fp < 2; fp++) {
        check_writers(llama(), 2, 2, fp);
        check_writers(gpt(), 2, 3, fp);
        check_writers(llama(), 4, 1, fp);
        check_writers(gpt(), 1, 4, fp);
    }
}

static void test_tied_copy_is_not_written(void) {
    rank_view v;
    view_make(&v, gpt(), 1, 0, 1, 0, false, true);
    const tr_ckpt_tensor *emb = find(&v.l, "embedding.word_embeddings.weight", -1);
    CHECK(emb && emb->replica_id == 0);
    tr_ckpt_list_free(&v.l);
    for (int i = 0; i < v.m.n_info; i++)
        if (strcmp(v.m.info[i].name, "embedding.word_embeddings.weight") == 0)
            v.m.info[i].tied_copy = true;
    CHECK_INT_EQ(tr_ckpt_list_add_params(&v.l, &v.k, "", v.m.params, 0, true), TR_OK);
    emb = find(&v.l, "embedding.word_embeddings.weight", -1);
    CHECK(emb && emb->replica_id != 0); /* registered, so it is loaded; never written */
    view_free(&v);
}

TR_TEST_MAIN(TR_TEST(test_tp_slices_match_tp1), TR_TEST(test_writers_tile_every_tensor),
             TR_TEST(test_tied_copy_is_not_written))
