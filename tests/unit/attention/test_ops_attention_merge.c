/* The log-sum-exp merge (tr_ops.attention_merge) that context parallelism's ring uses: the
 * attention of one set of queries over two disjoint key sets, each computed alone and merged,
 * equals a double-precision softmax over the union written here (the oracle), and the gradients
 * the ring takes (each block's backward fed the MERGED output and lse) match central differences
 * of sum(merged out * w). Also the running row without keys yet (lse -inf) and the lse stride of
 * a half of a longer sequence. */
#include <string.h>

#include "tests/unit/kernels/test_ops_util.h"

#define ops (tr_ops_cpu())

enum { C = 5, H = 4, G = 2, D = 8 };

typedef struct merge_ctx {
    float *q, *k[2], *v[2], *o, *lse, *ob, *lseb, *wt;
    tr_attn_desc d;
} merge_ctx;

/* Both blocks, the first written, the second merged in. */
static double merged_loss(void *vc) {
    merge_ctx *c = vc;
    ops->attention_fwd(c->o, c->lse, c->q, c->k[0], c->v[0], &c->d);
    ops->attention_fwd(c->ob, c->lseb, c->q, c->k[1], c->v[1], &c->d);
    ops->attention_merge(c->o, c->lse, C, c->ob, c->lseb, C, H, D);
    return dot_w(c->o, c->wt, (int64_t)C * H * D);
}

static void setup(merge_ctx *c) {
    c->d = (tr_attn_desc){.batch = 1, .seq = C, .heads = H, .groups = G, .head_dim = D};
    c->d.scale = 1.0f / sqrtf((float)D);
    c->q = rand_buf(C * H * D, -1.5f, 1.5f);
    for (int s = 0; s < 2; s++) {
        c->k[s] = rand_buf(C * G * D, -1.5f, 1.5f);
        c->v[s] = rand_buf(C * G * D, -1, 1);
    }
    c->o = zero_buf(C * H * D), c->ob = zero_buf(C * H * D);
    c->lse = zero_buf(H * C), c->lseb = zero_buf(H * C);
    c->wt = rand_buf(C * H * D, -1, 1);
}

static void teardown(merge_ctx *c) {
    free(c->q), free(c->o), free(c->ob), free(c->lse), free(c->lseb), free(c->wt);
    for (int s = 0; s < 2; s++) free(c->k[s]), free(c->v[s]);
}

static void test_merge_equals_union_softmax(void) {
    rng_seed(71);
    merge_ctx c;
    setup(&c);
    merged_loss(&c);
    double *ref = calloc(C * H * D, sizeof(double)), ref_lse[H * C];
    for (int h = 0; h < H; h++) {
        int g = h / (H / G);
        for (int t = 0; t < C; t++) {
            double s[2 * C], mx = -INFINITY, sum = 0.0;
            for (int j = 0; j < 2 * C; j++) {
                const float *kr = c.k[j / C] + ((int64_t)(j % C) * G + g) * D;
                const float *qr = c.q + ((int64_t)t * H + h) * D;
                double dot = 0.0;
                for (int e = 0; e < D; e++) dot += (double)qr[e] * kr[e];
                s[j] = dot * c.d.scale;
                if (s[j] > mx) mx = s[j];
            }
            for (int j = 0; j < 2 * C; j++) sum += exp(s[j] - mx);
            ref_lse[h * C + t] = mx + log(sum);
            for (int j = 0; j < 2 * C; j++) {
                const float *vr = c.v[j / C] + ((int64_t)(j % C) * G + g) * D;
                double p = exp(s[j] - mx) / sum;
                for (int e = 0; e < D; e++) ref[((int64_t)t * H + h) * D + e] += p * vr[e];
            }
        }
    }
    CHECK(max_scaled_err_d(c.o, ref, C * H * D) < 1e-6);
    CHECK(max_rel_err_d(c.lse, ref_lse, H * C, 1e-6) < 1e-6);
    free(ref);
    teardown(&c);
}

/* What the ring does per block: dq summed over both, each block's dK/dV its own. */
static void test_merge_gradients(void) {
    rng_seed(72);
    merge_ctx c;
    setup(&c);
    merged_loss(&c);
    float *dq = zero_buf(C * H * D), *dqb = zero_buf(C * H * D), *dk[2], *dv[2];
    for (int s = 0; s < 2; s++) {
        dk[s] = zero_buf(C * G * D), dv[s] = zero_buf(C * G * D);
        CHECK(ops->attention_bwd(s ? dqb : dq, dk[s], dv[s], c.wt, c.q, c.k[s], c.v[s], c.o, c.lse,
                                 &c.d) == TR_OK);
    }
    CHECK(ops->add(dq, dqb, C * H * D) == TR_OK);
    CHECK(grad_check("merge dq", merged_loss, &c, c.q, dq, C * H * D, 160) == 0);
    for (int s = 0; s < 2; s++) {
        CHECK(grad_check("merge dk", merged_loss, &c, c.k[s], dk[s], C * G * D, 80) == 0);
        CHECK(grad_check("merge dv", merged_loss, &c, c.v[s], dv[s], C * G * D, 80) == 0);
        free(dk[s]), free(dv[s]);
    }
    free(dq), free(dqb);
    teardown(&c);
}

/* A running row without keys (lse -inf) takes the other block whatever its output held (NaN
 * here), and the lse of a half of a longer sequence is read and written at its stride. */
static void test_empty_row_and_stride(void) {
    rng_seed(73);
    enum { LD = 2 * C };
    float o[C * H * D], ob[C * H * D], lse[H * LD], lseb[H * C];
    for (int i = 0; i < C * H * D; i++) o[i] = NAN, ob[i] = rng_uniform(-1, 1);
    for (int i = 0; i < H * LD; i++) lse[i] = 7.0f;
    for (int h = 0; h < H; h++)
        for (int t = 0; t < C; t++) lse[h * LD + C + t] = -INFINITY, lseb[h * C + t] = 0.25f * t;
    CHECK(ops->attention_merge(o, lse + C, LD, ob, lseb, C, H, D) == TR_OK);
    CHECK(memcmp(o, ob, sizeof o) == 0);
    for (int h = 0; h < H; h++)
        for (int t = 0; t < C; t++) {
            CHECK(lse[h * LD + t] == 7.0f);
            CHECK(lse[h * LD + C + t] == 0.25f * t);
        }
    CHECK(ops->attention_merge(o, lse, C - 1, ob, lseb, C, H, D) == TR_ERR_INVALID);
}

TR_TEST_MAIN(TR_TEST(test_merge_equals_union_softmax), TR_TEST(test_merge_gradients),
             TR_TEST(test_empty_row_and_stride))
