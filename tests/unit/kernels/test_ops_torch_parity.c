/* Parity with PyTorch: tests/reference/ops_fixtures.py stored seeded inputs and float64 torch
 * results in tests/reference/fixtures/ops.bin; every op here must match them to a relative
 * error of 1e-4, measured per tensor as max|ours - torch| / max|torch| (element-wise ratios
 * are meaningless for entries that are ~0, e.g. attention gradients with cancellation). */
#include <string.h>

#include "tests/unit/kernels/test_ops_util.h"

#define ops        (tr_ops_cpu())
#define PARITY_TOL 1e-4

typedef struct fix {
    char name[48];
    uint64_t n;
    float *data;
} fix;

static fix g_fix[64];
static int g_nfix = -1;

static int load_fixtures(void) {
    if (g_nfix >= 0) return g_nfix;
    g_nfix = 0;
    const char *path = TRESTLE_SOURCE_DIR "/tests/reference/fixtures/ops.bin";
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "  cannot open %s\n", path);
        return 0;
    }
    char magic[8];
    uint32_t count = 0;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "TRFIX001", 8) || fread(&count, 4, 1, f) != 1 ||
        count > 64) {
        fclose(f);
        return 0;
    }
    for (uint32_t i = 0; i < count; i++) {
        fix *x = &g_fix[i];
        if (fread(x->name, 1, 48, f) != 48 || fread(&x->n, 8, 1, f) != 1 || x->n > (1u << 24))
            break;
        x->name[47] = 0;
        x->data = malloc(sizeof(float) * (x->n ? x->n : 1));
        if (fread(x->data, sizeof(float), x->n, f) != x->n) {
            free(x->data);
            break;
        }
        g_nfix++;
    }
    fclose(f);
    return g_nfix;
}

static const float *get(const char *name, uint64_t n) {
    for (int i = 0; i < g_nfix; i++)
        if (!strcmp(g_fix[i].name, name)) {
            if (g_fix[i].n != n) {
                fprintf(stderr, "  fixture %s has %llu values, expected %llu\n", name,
                        (unsigned long long)g_fix[i].n, (unsigned long long)n);
                return NULL;
            }
            return g_fix[i].data;
        }
    fprintf(stderr, "  fixture %s missing\n", name);
    return NULL;
}

static void match(const char *name, const float *ours, uint64_t n) {
    const float *ref = get(name, n);
    CHECK(ref != NULL);
    if (!ref) return;
    double e = max_scaled_err(ours, ref, (int64_t)n);
    if (!(e <= PARITY_TOL)) fprintf(stderr, "  %s: relative error %.3g\n", name, e);
    CHECK(e <= PARITY_TOL);
}

static void test_fixtures_load(void) {
    CHECK(load_fixtures() >= 39);
}

static void test_attention_parity(void) {
    load_fixtures();
    enum { B = 2, T = 16, H = 4, G = 2, D = 8, NQ = B * T * H * D, NK = B * T * G * D };
    const float *q = get("attn.q", NQ), *k = get("attn.k", NK), *v = get("attn.v", NK),
                *dout = get("attn.dout", NQ);
    CHECK(q && k && v && dout);
    if (!(q && k && v && dout)) return;
    static float o[NQ], lse[B * H * T], dq[NQ], dk[NK], dv[NK];
    tr_attn_desc d = {.batch = B,
                      .seq = T,
                      .heads = H,
                      .groups = G,
                      .head_dim = D,
                      .scale = 1.0f / sqrtf(D),
                      .causal = 1,
                      .block_q = 4,
                      .block_k = 8};
    CHECK(ops->attention_fwd(o, lse, q, k, v, &d) == TR_OK);
    CHECK(ops->attention_bwd(dq, dk, dv, dout, q, k, v, o, lse, &d) == TR_OK);
    match("attn.out", o, NQ);
    match("attn.lse", lse, B * H * T);
    match("attn.dq", dq, NQ);
    match("attn.dk", dk, NK);
    match("attn.dv", dv, NK);
}

static void test_norm_parity(void) {
    load_fixtures();
    enum { R = 6, D = 32 };
    const float *x = get("norm.x", R * D), *w = get("norm.w", D), *b = get("norm.b", D),
                *dy = get("norm.dy", R * D);
    CHECK(x && w && b && dy);
    if (!(x && w && b && dy)) return;
    float y[R * D], mean[R], rstd[R], dx[R * D], dw[D], db[D];
    memset(dx, 0, sizeof dx), memset(dw, 0, sizeof dw);
    CHECK(ops->rmsnorm_fwd(y, rstd, x, w, R, D, 1e-5f, 0) == TR_OK);
    CHECK(ops->rmsnorm_bwd(dx, dw, dy, x, w, rstd, R, D, 0) == TR_OK);
    match("rms.y", y, R * D), match("rms.dx", dx, R * D), match("rms.dw", dw, D);
    memset(dx, 0, sizeof dx), memset(dw, 0, sizeof dw), memset(db, 0, sizeof db);
    CHECK(ops->layernorm_fwd(y, mean, rstd, x, w, b, R, D, 1e-5f, 0) == TR_OK);
    CHECK(ops->layernorm_bwd(dx, dw, db, dy, x, w, mean, rstd, R, D, 0) == TR_OK);
    match("ln.y", y, R * D), match("ln.dx", dx, R * D), match("ln.dw", dw, D),
        match("ln.db", db, D);
    /* zero-centred gamma stores w - 1 and must give the same result */
    float wz[D];
    for (int j = 0; j < D; j++) wz[j] = w[j] - 1.0f;
    CHECK(ops->rmsnorm_fwd(y, rstd, x, wz, R, D, 1e-5f, 1) == TR_OK);
    match("rms.y", y, R * D);
}

static void test_rope_llama3_parity(void) {
    load_fixtures();
    enum { B = 2, T = 8, H = 3, D = 16, N = B * T * H * D };
    const float *x = get("rope.x", N), *dy = get("rope.dy", N);
    CHECK(x && dy);
    if (!(x && dy)) return;
    tr_rope_params p = {.rot_dim = D,
                        .base = 500000.0,
                        .llama3 = 1,
                        .factor = 8.0,
                        .low_freq_factor = 1.0,
                        .high_freq_factor = 4.0,
                        .original_max_position = 8192.0};
    float cs[T * D / 2], sn[T * D / 2], y[N], dx[N];
    CHECK(ops->rope_table(cs, sn, &p, T, 8180) == TR_OK);
    CHECK(ops->rope_fwd(y, x, cs, sn, B, T, H, D, D) == TR_OK);
    CHECK(ops->rope_bwd(dx, dy, cs, sn, B, T, H, D, D) == TR_OK);
    match("rope.y", y, N), match("rope.dx", dx, N);
}

static void test_activation_parity(void) {
    load_fixtures();
    enum { R = 5, FF = 12, NG = 257 };
    const float *x = get("swiglu.x", R * 2 * FF), *dy = get("swiglu.dy", R * FF);
    const float *gx = get("gelu.x", NG), *gdy = get("gelu.dy", NG);
    CHECK(x && dy && gx && gdy);
    if (!(x && dy && gx && gdy)) return;
    float y[R * FF], dx[R * 2 * FF], gy[NG], gdx[NG];
    CHECK(ops->swiglu_fwd(y, x, R, FF) == TR_OK);
    CHECK(ops->swiglu_bwd(dx, dy, x, R, FF) == TR_OK);
    match("swiglu.y", y, R * FF), match("swiglu.dx", dx, R * 2 * FF);
    CHECK(ops->gelu_fwd(gy, gx, NG, 0) == TR_OK);
    CHECK(ops->gelu_bwd(gdx, gdy, gx, NG, 0) == TR_OK);
    match("gelu_erf.y", gy, NG), match("gelu_erf.dx", gdx, NG);
    CHECK(ops->gelu_fwd(gy, gx, NG, 1) == TR_OK);
    CHECK(ops->gelu_bwd(gdx, gdy, gx, NG, 1) == TR_OK);
    match("gelu_tanh.y", gy, NG), match("gelu_tanh.dx", gdx, NG);
}

static void test_cross_entropy_parity(void) {
    load_fixtures();
    enum { R = 8, V = 300 };
    const float *lg = get("ce.logits", R * V), *tf = get("ce.targets", R), *dl = get("ce.dloss", R);
    CHECK(lg && tf && dl);
    if (!(lg && tf && dl)) return;
    int32_t tg[R];
    for (int r = 0; r < R; r++) tg[r] = (int32_t)tf[r];
    static float buf[R * V];
    float stats[3 * R], loss[R];
    memcpy(buf, lg, sizeof buf);
    /* two shards of 120 and 180 rows of vocab, merged */
    float st2[3 * R], a[R * 120], b[R * 180];
    for (int r = 0; r < R; r++) {
        memcpy(a + r * 120, lg + r * V, sizeof(float) * 120);
        memcpy(b + r * 180, lg + r * V + 120, sizeof(float) * 180);
    }
    CHECK(ops->ce_stats(stats, a, tg, R, 120, 0) == TR_OK);
    CHECK(ops->ce_stats(st2, b, tg, R, 180, 120) == TR_OK);
    CHECK(ops->ce_merge(stats, st2, R) == TR_OK);
    CHECK(ops->ce_loss(loss, stats, tg, R) == TR_OK);
    match("ce.loss", loss, R);
    CHECK(ops->ce_bwd(a, stats, tg, dl, R, 120, 0) == TR_OK);
    CHECK(ops->ce_bwd(b, stats, tg, dl, R, 180, 120) == TR_OK);
    for (int r = 0; r < R; r++) {
        memcpy(buf + r * V, a + r * 120, sizeof(float) * 120);
        memcpy(buf + r * V + 120, b + r * 180, sizeof(float) * 180);
    }
    match("ce.dlogits", buf, R * V);
}

static void free_fixtures(void) {
    for (int i = 0; i < g_nfix; i++) free(g_fix[i].data);
    g_nfix = -1;
}

TR_TEST_MAIN(TR_TEST(test_fixtures_load), TR_TEST(test_attention_parity), TR_TEST(test_norm_parity),
             TR_TEST(test_rope_llama3_parity), TR_TEST(test_activation_parity),
             TR_TEST(test_cross_entropy_parity), TR_TEST(free_fixtures))
