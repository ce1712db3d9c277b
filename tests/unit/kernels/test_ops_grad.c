/* Finite-difference gradient checks for every op with a backward in the CPU op table. Each
 * check builds the scalar sum(out * w) for random w, so the analytic backward is fed dout = w. */
#include <string.h>

#include "tests/unit/kernels/test_ops_util.h"

#define ops (tr_ops_cpu())

/* ---- GEMM: the three products of a linear layer y = x W^T ---- */
typedef struct lin_ctx {
    float *x, *W, *y, *wt;
    int M, K, N;
} lin_ctx;

static double lin_loss(void *vc) {
    lin_ctx *c = vc;
    ops->gemm(TR_NOTRANS, TR_TRANS, c->M, c->N, c->K, 1.0f, c->x, c->K, c->W, c->K, 0.0f, c->y,
              c->N);
    return dot_w(c->y, c->wt, (int64_t)c->M * c->N);
}

static void test_gemm_linear_grads(void) {
    rng_seed(1);
    lin_ctx c = {.M = 7, .K = 5, .N = 6};
    c.x = rand_buf(c.M * c.K, -1, 1);
    c.W = rand_buf(c.N * c.K, -1, 1);
    c.y = zero_buf(c.M * c.N);
    c.wt = rand_buf(c.M * c.N, -1, 1);
    float *dx = zero_buf(c.M * c.K), *dW = rand_buf(c.N * c.K, -1, 1);
    float *dW0 = malloc(sizeof(float) * c.N * c.K);
    memcpy(dW0, dW, sizeof(float) * c.N * c.K);
    CHECK(ops->gemm(TR_NOTRANS, TR_NOTRANS, c.M, c.K, c.N, 1.0f, c.wt, c.N, c.W, c.K, 0.0f, dx,
                    c.K) == TR_OK);
    /* beta = 1 accumulates the weight grad on top of what was there. */
    CHECK(ops->gemm(TR_TRANS, TR_NOTRANS, c.N, c.K, c.M, 1.0f, c.wt, c.N, c.x, c.K, 1.0f, dW,
                    c.K) == TR_OK);
    for (int i = 0; i < c.N * c.K; i++) dW[i] -= dW0[i];
    CHECK(grad_check("gemm dx", lin_loss, &c, c.x, dx, c.M * c.K, 1000) == 0);
    CHECK(grad_check("gemm dW", lin_loss, &c, c.W, dW, c.N * c.K, 1000) == 0);
    free(c.x), free(c.W), free(c.y), free(c.wt), free(dx), free(dW), free(dW0);
}

static void test_gemm_all_transposes(void) {
    rng_seed(2);
    int m = 5, n = 7, k = 4;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float *a = rand_buf(m * k, -1, 1), *b = rand_buf(k * n, -1, 1);
            float *cc = rand_buf(m * n, -1, 1);
            double ref[35];
            int lda = ta ? m : k, ldb = tb ? k : n;
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double s = 0;
                    for (int p = 0; p < k; p++)
                        s += (double)(ta ? a[p * lda + i] : a[i * lda + p]) *
                             (tb ? b[j * ldb + p] : b[p * ldb + j]);
                    ref[i * n + j] = 0.5 * s - 2.0 * cc[i * n + j];
                }
            CHECK(ops->gemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, -2.0f, cc, n) == TR_OK);
            CHECK(max_rel_err_d(cc, ref, m * n, 1e-3) < 1e-5);
            free(a), free(b), free(cc);
        }
    float x = 0;
    CHECK(ops->gemm(TR_NOTRANS, TR_NOTRANS, 2, 2, 2, 1, &x, 1, &x, 2, 0, &x, 2) == TR_ERR_INVALID);
}

static void test_bias(void) {
    rng_seed(3);
    int R = 6, C = 9;
    float *y = rand_buf(R * C, -1, 1), *b = rand_buf(C, -1, 1), *y0 = malloc(sizeof(float) * R * C);
    memcpy(y0, y, sizeof(float) * R * C);
    CHECK(ops->bias_add(y, b, R, C) == TR_OK);
    int bad = 0;
    for (int i = 0; i < R * C; i++) bad += y[i] != y0[i] + b[i % C];
    CHECK(bad == 0);
    float *db = zero_buf(C);
    db[0] = 1.0f;
    CHECK(ops->bias_grad(db, y0, R, C) == TR_OK);
    for (int j = 0; j < C; j++) {
        double s = j == 0 ? 1.0 : 0.0;
        for (int r = 0; r < R; r++) s += y0[r * C + j];
        CHECK_CLOSE(db[j], s, 1e-6, 1e-6);
    }
    free(y), free(b), free(y0), free(db);
}

/* ---- norms ---- */
typedef struct norm_ctx {
    float *x, *w, *b, *y, *mean, *rstd, *wt;
    int R, D, zc, rms;
} norm_ctx;

static double norm_loss(void *vc) {
    norm_ctx *c = vc;
    if (c->rms)
        ops->rmsnorm_fwd(c->y, c->rstd, c->x, c->w, c->R, c->D, 1e-5f, c->zc);
    else
        ops->layernorm_fwd(c->y, c->mean, c->rstd, c->x, c->w, c->b, c->R, c->D, 1e-5f, c->zc);
    return dot_w(c->y, c->wt, (int64_t)c->R * c->D);
}

static void norm_case(int rms, int zc) {
    rng_seed(10 + rms * 2 + zc);
    norm_ctx c = {.R = 5, .D = 12, .zc = zc, .rms = rms};
    c.x = rand_buf(c.R * c.D, -2, 2);
    c.w = rand_buf(c.D, zc ? -0.5f : 0.5f, zc ? 0.5f : 1.5f);
    c.b = rand_buf(c.D, -1, 1);
    c.y = zero_buf(c.R * c.D);
    c.mean = zero_buf(c.R);
    c.rstd = zero_buf(c.R);
    c.wt = rand_buf(c.R * c.D, -1, 1);
    norm_loss(&c);
    float *dx = zero_buf(c.R * c.D), *dw = zero_buf(c.D), *db = zero_buf(c.D);
    if (rms)
        CHECK(ops->rmsnorm_bwd(dx, dw, c.wt, c.x, c.w, c.rstd, c.R, c.D, zc) == TR_OK);
    else
        CHECK(ops->layernorm_bwd(dx, dw, db, c.wt, c.x, c.w, c.mean, c.rstd, c.R, c.D, zc) ==
              TR_OK);
    CHECK(grad_check("norm dx", norm_loss, &c, c.x, dx, c.R * c.D, 1000) == 0);
    CHECK(grad_check("norm dw", norm_loss, &c, c.w, dw, c.D, 1000) == 0);
    if (!rms) CHECK(grad_check("norm db", norm_loss, &c, c.b, db, c.D, 1000) == 0);
    /* dx accumulates into the residual-stream gradient. */
    float *dx2 = zero_buf(c.R * c.D);
    for (int i = 0; i < c.R * c.D; i++) dx2[i] = 1.0f;
    if (rms)
        ops->rmsnorm_bwd(dx2, NULL, c.wt, c.x, c.w, c.rstd, c.R, c.D, zc);
    else
        ops->layernorm_bwd(dx2, NULL, NULL, c.wt, c.x, c.w, c.mean, c.rstd, c.R, c.D, zc);
    for (int i = 0; i < c.R * c.D; i++) CHECK_CLOSE(dx2[i] - 1.0f, dx[i], 1e-5, 1e-6);
    free(c.x), free(c.w), free(c.b), free(c.y), free(c.mean), free(c.rstd), free(c.wt);
    free(dx), free(dw), free(db), free(dx2);
}

static void test_layernorm(void) {
    norm_case(0, 0), norm_case(0, 1);
}
static void test_rmsnorm(void) {
    norm_case(1, 0), norm_case(1, 1);
}

/* ---- RoPE (partial rotary) ---- */
typedef struct rope_ctx {
    float *x, *y, *cs, *sn, *wt;
    int B, T, H, D, R;
} rope_ctx;

static double rope_loss(void *vc) {
    rope_ctx *c = vc;
    ops->rope_fwd(c->y, c->x, c->cs, c->sn, c->B, c->T, c->H, c->D, c->R);
    return dot_w(c->y, c->wt, (int64_t)c->B * c->T * c->H * c->D);
}

static void test_rope(void) {
    rng_seed(20);
    rope_ctx c = {.B = 2, .T = 5, .H = 3, .D = 8, .R = 6};
    int64_t n = (int64_t)c.B * c.T * c.H * c.D;
    tr_rope_params p = {.rot_dim = c.R, .base = 10000.0};
    c.cs = zero_buf(c.T * c.R / 2);
    c.sn = zero_buf(c.T * c.R / 2);
    CHECK(ops->rope_table(c.cs, c.sn, &p, c.T, 3) == TR_OK);
    c.x = rand_buf(n, -1, 1);
    c.y = zero_buf(n);
    c.wt = rand_buf(n, -1, 1);
    float *dx = zero_buf(n);
    CHECK(ops->rope_bwd(dx, c.wt, c.cs, c.sn, c.B, c.T, c.H, c.D, c.R) == TR_OK);
    CHECK(grad_check("rope dx", rope_loss, &c, c.x, dx, n, 1000) == 0);
    /* in place, and the backward undoes the forward (rotations are orthogonal) */
    float *z = malloc(sizeof(float) * n);
    memcpy(z, c.x, sizeof(float) * n);
    ops->rope_fwd(z, z, c.cs, c.sn, c.B, c.T, c.H, c.D, c.R);
    ops->rope_bwd(z, z, c.cs, c.sn, c.B, c.T, c.H, c.D, c.R);
    CHECK(max_rel_err(z, c.x, n, 1e-3) < 1e-5);
    free(c.x), free(c.y), free(c.cs), free(c.sn), free(c.wt), free(dx), free(z);
}

/* ---- attention ---- */
typedef struct attn_ctx {
    float *q, *k, *v, *o, *lse, *wt;
    tr_attn_desc d;
} attn_ctx;

static double attn_loss(void *vc) {
    attn_ctx *c = vc;
    ops->attention_fwd(c->o, c->lse, c->q, c->k, c->v, &c->d);
    return dot_w(c->o, c->wt, (int64_t)c->d.batch * c->d.seq * c->d.heads * c->d.head_dim);
}

static void attn_case(int causal) {
    rng_seed(30 + causal);
    attn_ctx c = {.d = {.batch = 2,
                        .seq = 11,
                        .heads = 4,
                        .groups = 2,
                        .head_dim = 8,
                        .causal = causal,
                        .block_q = 4,
                        .block_k = 3}};
    c.d.scale = 1.0f / sqrtf(8.0f);
    int64_t nq = (int64_t)c.d.batch * c.d.seq * c.d.heads * c.d.head_dim;
    int64_t nk = nq / 2;
    c.q = rand_buf(nq, -1.5f, 1.5f);
    c.k = rand_buf(nk, -1.5f, 1.5f);
    c.v = rand_buf(nk, -1, 1);
    c.o = zero_buf(nq);
    c.lse = zero_buf(c.d.batch * c.d.heads * c.d.seq);
    c.wt = rand_buf(nq, -1, 1);
    attn_loss(&c);
    float *dq = zero_buf(nq), *dk = zero_buf(nk), *dv = zero_buf(nk);
    CHECK(ops->attention_bwd(dq, dk, dv, c.wt, c.q, c.k, c.v, c.o, c.lse, &c.d) == TR_OK);
    CHECK(grad_check("attn dq", attn_loss, &c, c.q, dq, nq, 150) == 0);
    CHECK(grad_check("attn dk", attn_loss, &c, c.k, dk, nk, 150) == 0);
    CHECK(grad_check("attn dv", attn_loss, &c, c.v, dv, nk, 150) == 0);
    free(c.q), free(c.k), free(c.v), free(c.o), free(c.lse), free(c.wt), free(dq), free(dk),
        free(dv);
}

static void test_attention_causal(void) {
    attn_case(1);
}
static void test_attention_full(void) {
    attn_case(0);
}

/* ---- activations ---- */
typedef struct act_ctx {
    float *x, *y, *wt;
    int64_t n, ny;
    int kind, rows, ffn;
} act_ctx;

static double act_loss(void *vc) {
    act_ctx *c = vc;
    if (c->kind < 2)
        ops->gelu_fwd(c->y, c->x, c->n, c->kind);
    else if (c->kind == 2)
        ops->swiglu_fwd(c->y, c->x, c->rows, c->ffn);
    else
        ops->dropout_fwd(c->y, c->x, c->n, 0.3f, 1234, 77);
    return dot_w(c->y, c->wt, c->ny);
}

static void act_case(int kind) {
    rng_seed(40 + kind);
    act_ctx c = {.kind = kind, .rows = 6, .ffn = 10};
    c.n = kind == 2 ? c.rows * 2 * c.ffn : 200;
    c.ny = kind == 2 ? c.rows * c.ffn : c.n;
    c.x = rand_buf(c.n, -4, 4);
    c.y = zero_buf(c.ny);
    c.wt = rand_buf(c.ny, -1, 1);
    float *dx = zero_buf(c.n);
    if (kind < 2)
        CHECK(ops->gelu_bwd(dx, c.wt, c.x, c.n, kind) == TR_OK);
    else if (kind == 2)
        CHECK(ops->swiglu_bwd(dx, c.wt, c.x, c.rows, c.ffn) == TR_OK);
    else
        CHECK(ops->dropout_bwd(dx, c.wt, c.n, 0.3f, 1234, 77) == TR_OK);
    CHECK(grad_check("act dx", act_loss, &c, c.x, dx, c.n, 1000) == 0);
    free(c.x), free(c.y), free(c.wt), free(dx);
}

static void test_gelu_erf(void) {
    act_case(0);
}
static void test_gelu_tanh(void) {
    act_case(1);
}
static void test_swiglu(void) {
    act_case(2);
}
static void test_dropout_grad(void) {
    act_case(3);
}

/* ---- cross entropy ---- */
typedef struct ce_ctx {
    float *logits, *stats, *loss, *wr;
    int32_t *tg;
    int R, V;
} ce_ctx;

static double ce_total(void *vc) {
    ce_ctx *c = vc;
    ops->ce_stats(c->stats, c->logits, c->tg, c->R, c->V, 0);
    ops->ce_loss(c->loss, c->stats, c->tg, c->R);
    return dot_w(c->loss, c->wr, c->R);
}

static void test_cross_entropy_grad(void) {
    rng_seed(50);
    ce_ctx c = {.R = 5, .V = 17};
    c.logits = rand_buf(c.R * c.V, -3, 3);
    c.stats = zero_buf(3 * c.R);
    c.loss = zero_buf(c.R);
    c.wr = rand_buf(c.R, 0.2f, 1.0f);
    int32_t tg[5] = {3, 16, -1, 0, 9};
    c.tg = tg;
    ce_total(&c);
    float *g = malloc(sizeof(float) * c.R * c.V);
    memcpy(g, c.logits, sizeof(float) * c.R * c.V);
    CHECK(ops->ce_bwd(g, c.stats, c.tg, c.wr, c.R, c.V, 0) == TR_OK);
    CHECK(grad_check("ce dlogits", ce_total, &c, c.logits, g, c.R * c.V, 1000) == 0);
    for (int j = 0; j < c.V; j++) CHECK(g[2 * c.V + j] == 0.0f); /* ignored row */
    free(c.logits), free(c.stats), free(c.loss), free(c.wr), free(g);
}

/* ---- embeddings ---- */
typedef struct emb_ctx {
    float *table, *wpe, *out, *wt;
    int32_t *ids;
    int n, dim, start, end, B, T;
} emb_ctx;

static double emb_loss(void *vc) {
    emb_ctx *c = vc;
    ops->embedding_fwd(c->out, c->ids, c->table, c->n, c->dim, c->start, c->end);
    ops->pos_embedding_fwd(c->out, c->wpe, c->B, c->T, c->dim, 2);
    return dot_w(c->out, c->wt, (int64_t)c->n * c->dim);
}

static void test_embedding_grads(void) {
    rng_seed(60);
    emb_ctx c = {.dim = 6, .start = 4, .end = 10, .B = 2, .T = 7};
    c.n = c.B * c.T;
    int32_t ids[14] = {4, 5, 9, 9, 0, 12, 4, 7, 7, 7, 3, 10, 8, 6};
    c.ids = ids;
    c.table = rand_buf((c.end - c.start) * c.dim, -1, 1);
    c.wpe = rand_buf((c.T + 2) * c.dim, -1, 1);
    c.out = zero_buf(c.n * c.dim);
    c.wt = rand_buf(c.n * c.dim, -1, 1);
    float *dt = zero_buf((c.end - c.start) * c.dim), *dp = zero_buf((c.T + 2) * c.dim);
    CHECK(ops->embedding_bwd(dt, c.ids, c.wt, c.n, c.dim, c.start, c.end) == TR_OK);
    CHECK(ops->pos_embedding_bwd(dp, c.wt, c.B, c.T, c.dim, 2) == TR_OK);
    CHECK(grad_check("emb dtable", emb_loss, &c, c.table, dt, (c.end - c.start) * c.dim, 1000) ==
          0);
    CHECK(grad_check("emb dwpe", emb_loss, &c, c.wpe, dp, (c.T + 2) * c.dim, 1000) == 0);
    free(c.table), free(c.wpe), free(c.out), free(c.wt), free(dt), free(dp);
}

static void test_table_complete(void) {
    /* every slot filled: a missing op would be a NULL call at run time */
    const void *const *slot = (const void *const *)((const char *)ops + sizeof(const char *));
    size_t nslots = (sizeof(tr_ops) - sizeof(const char *)) / sizeof(void *);
    for (size_t i = 0; i < nslots; i++) CHECK(slot[i] != NULL);
    CHECK_STR_EQ(ops->name, "cpu");
}

TR_TEST_MAIN(TR_TEST(test_table_complete), TR_TEST(test_gemm_linear_grads),
             TR_TEST(test_gemm_all_transposes), TR_TEST(test_bias), TR_TEST(test_layernorm),
             TR_TEST(test_rmsnorm), TR_TEST(test_rope), TR_TEST(test_attention_causal),
             TR_TEST(test_attention_full), TR_TEST(test_gelu_erf), TR_TEST(test_gelu_tanh),
             TR_TEST(test_swiglu), TR_TEST(test_dropout_grad), TR_TEST(test_cross_entropy_grad),
             TR_TEST(test_embedding_grads))
