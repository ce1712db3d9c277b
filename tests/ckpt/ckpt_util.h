/* Shared by the checkpoint tests: scratch directories and a synthetic "model" whose tensors are
 * split the way TP (rows and columns), PP (layer ranges, interleaved chunks) and the distributed
 * optimizer (flat DP ranges) split real ones. Values are a pure function of (tensor, element),
 * so any layout's slice can be checked bitwise without keeping the saved copy. */
#ifndef TR_TEST_CKPT_UTIL_H
#define TR_TEST_CKPT_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/checkpoint/ckpt.h"
#include "runtime/checkpoint/reader.h"

static inline char *ck_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    char buf[512];
    snprintf(buf, sizeof buf, "%s/trestle_ckpt_XXXXXX", base && base[0] ? base : "/tmp");
    char *p = strdup(buf);
    if (!p || !mkdtemp(p)) {
        perror("mkdtemp");
        exit(1);
    }
    return p;
}

static inline void ck_rm_rf(const char *dir) {
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

/* Element e of tensor `seed` at iteration `it`: an exact float, distinct per element. */
static inline float ck_value(uint32_t seed, int64_t it, int64_t e) {
    uint64_t x = (uint64_t)seed * 0x9E3779B97F4A7C15ull ^
                 (uint64_t)(e + 1) * 0xBF58476D1CE4E5B9ull ^
                 (uint64_t)(it + 7) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (float)(int32_t)(x & 0xFFFFFF) / 4096.0f;
}

/* Fills a slice with the values of the global tensor at the slice's elements. */
static inline void ck_fill(float *dst, uint32_t seed, int64_t it, int ndim, const int64_t *gshape,
                           const tr_ckpt_slice *s) {
    int64_t vol = tr_ckpt_slice_volume(s);
    for (int64_t k = 0; k < vol; k++) {
        int64_t rem = k, g = 0, stride = 1;
        for (int i = ndim - 1; i >= 0; i--) {
            int64_t idx = rem % s->shape[i];
            rem /= s->shape[i];
            g += (s->offset[i] + idx) * stride;
            stride *= gshape[i];
        }
        dst[k] = ck_value(seed, it, g);
    }
}

typedef struct ck_layout {
    int tp, pp, vpp, dp, dist_opt;
} ck_layout;

enum { CK_L = 8, CK_H = 8, CK_V = 24, CK_FLAT = 1003, CK_MAX_T = 64 };

typedef struct ck_rank_state {
    tr_ckpt_tensor t[CK_MAX_T];
    uint32_t seed[CK_MAX_T];
    int n;
    int64_t scalars[2];
} ck_rank_state;

static inline int ck_world(const ck_layout *l) {
    return l->tp * l->pp * l->dp;
}

static inline void ck_add(ck_rank_state *s, tr_ckpt_tensor t, uint32_t seed, int64_t it) {
    s->seed[s->n] = seed;
    if (t.dtype == TR_CKPT_F32) {
        t.data = malloc((size_t)tr_ckpt_slice_volume(&t.slice) * sizeof(float));
        ck_fill(t.data, seed, it, t.ndim, t.global_shape, &t.slice);
    }
    s->t[s->n++] = t;
}

/* The tensors rank r registers under layout l at iteration it (data allocated and filled). */
static inline void ck_build_rank(ck_rank_state *s, const ck_layout *l, int r, int64_t it) {
    memset(s, 0, sizeof *s);
    int tp_r = r % l->tp, dp_r = (r / l->tp) % l->dp, pp_r = r / (l->tp * l->dp);
    int vpp = l->vpp > 1 ? l->vpp : 1;
    /* Vocab-parallel embedding on the first stage: rows split by TP. */
    if (pp_r == 0) {
        int64_t g[2] = {CK_V, CK_H};
        tr_ckpt_tensor t =
            tr_ckpt_tensor_full("embedding.word_embeddings.weight", TR_CKPT_F32, 2, g, NULL);
        t.tp_axis = 0;
        tr_ckpt_tensor_split(&t, 0, l->tp, tp_r);
        t.replica_id = dp_r;
        ck_add(s, t, 1, it);
    }
    /* Layer-stacked tensors: axis 0 = layers (PP/VPP), then column- or row-parallel splits. */
    for (int v = 0; v < vpp; v++) {
        int64_t block = (int64_t)v * l->pp + pp_r, blocks = (int64_t)l->pp * vpp;
        int64_t gq[3] = {CK_L, 3 * CK_H, CK_H}, gp[3] = {CK_L, CK_H, CK_H}, gn[2] = {CK_L, CK_H};
        tr_ckpt_tensor q = tr_ckpt_tensor_full("decoder.layers.self_attention.linear_qkv.weight",
                                               TR_CKPT_F32, 3, gq, NULL);
        q.pp_axis = 0;
        q.tp_axis = 1; /* column parallel: output rows */
        tr_ckpt_tensor_split(&q, 0, blocks, block);
        tr_ckpt_tensor_split(&q, 1, l->tp, tp_r);
        q.replica_id = dp_r;
        ck_add(s, q, 2, it);
        tr_ckpt_tensor p = tr_ckpt_tensor_full("decoder.layers.self_attention.linear_proj.weight",
                                               TR_CKPT_F32, 3, gp, NULL);
        p.pp_axis = 0;
        p.tp_axis = 2; /* row parallel: input columns */
        tr_ckpt_tensor_split(&p, 0, blocks, block);
        tr_ckpt_tensor_split(&p, 2, l->tp, tp_r);
        p.replica_id = dp_r;
        ck_add(s, p, 3, it);
        tr_ckpt_tensor n =
            tr_ckpt_tensor_full("decoder.layers.input_layernorm.weight", TR_CKPT_F32, 2, gn, NULL);
        n.pp_axis = 0;
        tr_ckpt_tensor_split(&n, 0, blocks, block);
        n.replica_id = tp_r + l->tp * dp_r; /* replicated over TP and DP */
        ck_add(s, n, 4, it);
    }
    /* Distributed-optimizer state: one flat buffer, DP ranges (uneven), replicated over TP/PP. */
    int64_t gf[1] = {CK_FLAT};
    const char *flat_names[2] = {"optimizer.exp_avg.flat", "optimizer.exp_avg_sq.flat"};
    for (int k = 0; k < 2; k++) {
        tr_ckpt_tensor f = tr_ckpt_tensor_full(flat_names[k], TR_CKPT_F32, 1, gf, NULL);
        f.dp_axis = 0;
        if (l->dist_opt) {
            tr_ckpt_tensor_split(&f, 0, l->dp, dp_r);
            f.replica_id = tp_r + l->tp * pp_r;
        } else {
            f.replica_id = r;
        }
        ck_add(s, f, 5 + (uint32_t)k, it);
    }
    /* Scalars every rank holds; rank 0 writes them. */
    s->scalars[0] = it;
    s->scalars[1] = it * 32;
    const char *scalar_names[2] = {"iteration", "data.consumed_samples"};
    for (int k = 0; k < 2; k++) {
        tr_ckpt_tensor c = tr_ckpt_tensor_full(scalar_names[k], TR_CKPT_I64, 0, NULL, NULL);
        c.data = &s->scalars[k];
        c.replica_id = r;
        s->seed[s->n] = 0;
        s->t[s->n++] = c;
    }
}

static inline void ck_free_rank(ck_rank_state *s) {
    for (int i = 0; i < s->n; i++)
        if (s->t[i].dtype == TR_CKPT_F32) free(s->t[i].data);
}

static inline tr_ckpt_layout ck_to_layout(const ck_layout *l) {
    tr_ckpt_layout out;
    tr_ckpt_layout_init(&out);
    out.tp = l->tp;
    out.pp = l->pp;
    out.vpp = l->vpp > 1 ? l->vpp : 1;
    out.dp = l->dp;
    out.dist_opt = l->dist_opt;
    return out;
}

/* Every rank of l saves iteration it into root; returns the status of the whole save. */
static inline tr_status ck_save_layout_sync(const char *root, const ck_layout *l, int64_t it,
                                            bool sync, tr_diags *d) {
    int world = ck_world(l);
    ck_rank_state *st = calloc((size_t)world, sizeof *st);
    tr_ckpt_save **sv = calloc((size_t)world, sizeof *sv);
    tr_status s = TR_OK;
    uint64_t nonce = tr_ckpt_new_nonce();
    for (int r = 0; r < world && s == TR_OK; r++) {
        ck_build_rank(&st[r], l, r, it);
        tr_ckpt_save_opts o;
        tr_ckpt_save_opts_init(&o, root, it);
        o.rank = r;
        o.world = world;
        o.nonce = nonce;
        o.layout = ck_to_layout(l);
        o.fsync = sync;
        s = tr_ckpt_save_begin(&o, &sv[r], d);
        if (s == TR_OK) s = tr_ckpt_save_write_shards(sv[r], st[r].t, st[r].n, d);
    }
    /* The caller's barrier sits here. */
    if (s == TR_OK) s = tr_ckpt_save_finalize(sv[0], d);
    if (s == TR_OK) s = tr_ckpt_save_commit(sv[0], d);
    for (int r = 0; r < world; r++) {
        tr_ckpt_save_free(sv[r]);
        ck_free_rank(&st[r]);
    }
    free(sv);
    free(st);
    return s;
}

static inline tr_status ck_save_layout(const char *root, const ck_layout *l, int64_t it,
                                       tr_diags *d) {
    return ck_save_layout_sync(root, l, it, false, d);
}

/* Every rank of l loads the latest checkpoint; counts elements that differ from the truth. */
static inline long ck_load_and_compare(const char *root, const ck_layout *l, int64_t it,
                                       tr_diags *d) {
    char *dir;
    int64_t found;
    if (tr_ckpt_find(root, -1, &dir, &found, d) != TR_OK) return -1;
    tr_ckpt_reader *r;
    tr_status s = tr_ckpt_open(dir, &r, d);
    free(dir);
    if (s != TR_OK) return -1;
    long bad = found == it ? 0 : 1000000;
    for (int rank = 0; rank < ck_world(l); rank++) {
        ck_rank_state st;
        ck_build_rank(&st, l, rank, it);
        for (int i = 0; i < st.n; i++) {
            size_t bytes =
                (size_t)tr_ckpt_slice_volume(&st.t[i].slice) * tr_ckpt_dtype_size(st.t[i].dtype);
            memset(st.t[i].data, 0xA5, bytes); /* poison: the load must overwrite all of it */
        }
        if (tr_ckpt_load_tensors(r, st.t, st.n, d) != TR_OK) bad += 1000000;
        for (int i = 0; i < st.n; i++) {
            const tr_ckpt_tensor *t = &st.t[i];
            if (t->dtype == TR_CKPT_I64) {
                int64_t want = strcmp(t->name, "iteration") == 0 ? it : it * 32;
                bad += *(int64_t *)t->data != want;
                continue;
            }
            int64_t vol = tr_ckpt_slice_volume(&t->slice);
            float *want = malloc((size_t)vol * sizeof *want);
            ck_fill(want, st.seed[i], it, t->ndim, t->global_shape, &t->slice);
            for (int64_t k = 0; k < vol; k++)
                bad += memcmp(&want[k], (float *)t->data + k, sizeof(float)) != 0;
            free(want);
        }
        ck_free_rank(&st);
    }
    tr_ckpt_close(r);
    return bad;
}

#endif
