/* The large-shape half of test_cuda_ops (tests/gpu/cuda_ops_test.h): realistic shapes, index
 * arithmetic past 2^31 elements, and the in-place aliasing the op contract allows. */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/cuda_ops_test.h"

/* ---- Realistic shapes, index math past 2^31 elements, aliasing the contract allows ---------
 * A tensor of more than 2^31 floats (8 GiB: the logits of 16 x 4096 tokens over a 128256
 * vocabulary) is filled with a constant on the device, its last rows get random values, and
 * only those rows are compared with the CPU op run on the same rows: a 32-bit index would land
 * them elsewhere. */
#define PAST_2G ((int64_t)1 << 31)

/* An upload through the legacy stream, which the context's stream does not wait for: the ops
 * queued before it (a fill of the same buffer, a kernel still reading it) finish first. */
static void put(float *d, const float *h, size_t n) {
    gt_sync();
    CHECK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    gt_settle();
}

/* A device buffer of n floats (n may exceed 2^31) holding `value`. */
static float *dev_const(int64_t n, float value) {
    float *d = gt_dev_bytes(NULL, (size_t)n * sizeof(float));
    CHECK(gpu->fill(d, n, value) == TR_OK);
    gt_sync();
    return d;
}

/* The llama3 vocabulary whole and split in two shards: stats, loss and in-place gradient. */
void test_ce_vocab_128k(void) {
    const int rows = 6, V = 128256;
    size_t n = (size_t)rows * V;
    float *logits = rnd(n, -12, 12);
    int32_t tg[6] = {0, V - 1, -1, 77777, 5, V / 2};
    int32_t *dtg = gt_dev_bytes(tg, sizeof tg);
    float *dl = gt_dev(logits, n), *ds = gt_dev_poison(3 * rows), stats[18], loss[6];
    CHECK(cpu->ce_stats(stats, logits, tg, rows, V, 0) == TR_OK);
    CHECK(gpu->ce_stats(ds, dl, dtg, rows, V, 0) == TR_OK);
    CHECK_DEV("ce_stats vocab 128256", ds, stats, 3 * rows, FP32);
    float *dloss = gt_dev_poison(rows);
    CHECK(cpu->ce_loss(loss, stats, tg, rows) == TR_OK);
    CHECK(gpu->ce_loss(dloss, ds, dtg, rows) == TR_OK);
    CHECK_DEV("ce_loss vocab 128256", dloss, loss, rows, FP32);
    float *dscale = gt_dev_poison(1), mean = 0.0f;
    CHECK(cpu->loss_mean(&mean, loss, tg, rows) == TR_OK);
    CHECK(gpu->loss_mean(dscale, dloss, dtg, rows) == TR_OK);
    CHECK_DEV("loss_mean vocab 128256", dscale, &mean, 1, FP32);
    CHECK(cpu->ce_bwd(logits, stats, tg, NULL, rows, V, 0) == TR_OK);
    CHECK(gpu->ce_bwd(dl, ds, dtg, NULL, rows, V, 0) == TR_OK);
    CHECK_DEV("ce_bwd vocab 128256 (in place)", dl, logits, n, FP32);
    free(logits), gt_free(dtg), gt_free(dl), gt_free(ds), gt_free(dloss), gt_free(dscale);
}

void test_ce_past_2g(void) {
    const int V = 128256, tail = 4;
    const int rows = (int)(PAST_2G / V) + 1 + tail; /* the tail starts past element 2^31 */
    const int first = rows - tail;
    CHECK((int64_t)first * V >= PAST_2G);
    int32_t *tg = malloc(sizeof(int32_t) * (size_t)rows);
    for (int r = 0; r < rows; r++) tg[r] = r % 5 == 1 ? -1 : (int32_t)gt_uniform(0, (float)V);
    tg[first] = V - 1, tg[first + 1] = -1;
    int32_t *dtg = gt_dev_bytes(tg, sizeof(int32_t) * (size_t)rows);
    float *dl = dev_const((int64_t)rows * V, 0.25f);
    float *h = rnd((size_t)tail * V, -10, 10);
    put(dl + (int64_t)first * V, h, (size_t)tail * V);
    float *ds = gt_dev_poison(3 * (size_t)rows), stats[3 * 4];
    CHECK(gpu->ce_stats(ds, dl, dtg, rows, V, 0) == TR_OK);
    CHECK(cpu->ce_stats(stats, h, tg + first, tail, V, 0) == TR_OK);
    for (int k = 0; k < 3; k++) {
        char name[64];
        snprintf(name, sizeof name, "ce_stats past 2^31 elements, plane %d", k);
        CHECK_DEV(name, ds + (size_t)k * rows + first, stats + k * tail, tail, FP32);
    }
    CHECK(gpu->ce_bwd(dl, ds, dtg, NULL, rows, V, 0) == TR_OK);
    CHECK(cpu->ce_bwd(h, stats, tg + first, NULL, tail, V, 0) == TR_OK);
    CHECK_DEV("ce_bwd past 2^31 elements", dl + (int64_t)first * V, h, (size_t)tail * V, FP32);
    free(tg), free(h), gt_free(dtg), gt_free(dl), gt_free(ds);
}

/* Llama widths: RMSNorm and LayerNorm at dim 8192 (a 70B model's), zero-centred gamma. */
void test_norms_dim_8192(void) {
    const int rows = 24, dim = 8192;
    size_t n = (size_t)rows * dim;
    float *x = rnd(n, -4, 6), *w = rnd(dim, -0.5f, 0.5f), *b = rnd(dim, -1, 1);
    float *g = rnd(n, -1, 1), *gx = rnd(n, -1, 1), *gw = rnd(dim, -1, 1), *gb = rnd(dim, -1, 1);
    float *y = malloc(n * 4), *mean = malloc(rows * 4), *rstd = malloc(rows * 4);
    float *dx = gt_dev(x, n), *dw = gt_dev(w, dim), *db = gt_dev(b, dim), *dy = gt_dev_poison(n);
    float *dmean = gt_dev_poison(rows), *drstd = gt_dev_poison(rows);
    CHECK(cpu->layernorm_fwd(y, mean, rstd, x, w, b, rows, dim, 1e-5f, 1) == TR_OK);
    CHECK(gpu->layernorm_fwd(dy, dmean, drstd, dx, dw, db, rows, dim, 1e-5f, 1) == TR_OK);
    CHECK_DEV("layernorm_fwd dim 8192 zc", dy, y, n, FP32);
    float *dg = gt_dev(g, n), *dgx = gt_dev(gx, n), *dgw = gt_dev(gw, dim), *dgb = gt_dev(gb, dim);
    float *cm = gt_dev(mean, rows), *cr = gt_dev(rstd, rows);
    CHECK(cpu->layernorm_bwd(gx, gw, gb, g, x, w, mean, rstd, rows, dim, 1) == TR_OK);
    CHECK(gpu->layernorm_bwd(dgx, dgw, dgb, dg, dx, dw, cm, cr, rows, dim, 1) == TR_OK);
    CHECK_DEV("layernorm_bwd dim 8192 dx (accumulates)", dgx, gx, n, FP32);
    CHECK_DEV("layernorm_bwd dim 8192 dw", dgw, gw, dim, FP32);
    CHECK_DEV("layernorm_bwd dim 8192 db", dgb, gb, dim, FP32);
    CHECK(cpu->rmsnorm_fwd(y, rstd, x, w, rows, dim, 1e-6f, 1) == TR_OK);
    CHECK(gpu->rmsnorm_fwd(dy, drstd, dx, dw, rows, dim, 1e-6f, 1) == TR_OK);
    CHECK_DEV("rmsnorm_fwd dim 8192 zc", dy, y, n, FP32);
    CHECK_DEV("rmsnorm_fwd dim 8192 rstd", drstd, rstd, rows, FP32);
    put(cr, rstd, rows);
    CHECK(cpu->rmsnorm_bwd(gx, gw, g, x, w, rstd, rows, dim, 1) == TR_OK);
    CHECK(gpu->rmsnorm_bwd(dgx, dgw, dg, dx, dw, cr, rows, dim, 1) == TR_OK);
    CHECK_DEV("rmsnorm_bwd dim 8192 dx (accumulates)", dgx, gx, n, FP32);
    CHECK_DEV("rmsnorm_bwd dim 8192 dw", dgw, gw, dim, FP32);
    free(x), free(w), free(b), free(g), free(gx), free(gw), free(gb), free(y), free(mean),
        free(rstd);
    gt_free(dx), gt_free(dw), gt_free(db), gt_free(dy), gt_free(dmean), gt_free(drstd), gt_free(dg),
        gt_free(dgx), gt_free(dgw), gt_free(dgb), gt_free(cm), gt_free(cr);
}

/* RMSNorm rows past element 2^31 (forward and dx; dw sums every row and is checked above). */
void test_norm_past_2g(void) {
    const int dim = 8192, tail = 2;
    const int rows = (int)(PAST_2G / dim) + tail, first = rows - tail;
    size_t tn = (size_t)tail * dim;
    float *w = rnd(dim, 0.5f, 1.5f), *dw = gt_dev(w, dim);
    float *x = rnd(tn, -3, 3), *g = rnd(tn, -1, 1), *gx = rnd(tn, -1, 1);
    float *y = malloc(tn * 4), rstd[2];
    int64_t total = (int64_t)rows * dim;
    float *dx = dev_const(total, 1.0f), *dy = dev_const(total, 0.0f);
    float *drstd = gt_dev_poison((size_t)rows);
    put(dx + (int64_t)first * dim, x, tn);
    CHECK(gpu->rmsnorm_fwd(dy, drstd, dx, dw, rows, dim, 1e-5f, 0) == TR_OK);
    CHECK(cpu->rmsnorm_fwd(y, rstd, x, w, tail, dim, 1e-5f, 0) == TR_OK);
    CHECK_DEV("rmsnorm_fwd rows past 2^31 elements", dy + (int64_t)first * dim, y, tn, FP32);
    CHECK_DEV("rmsnorm_fwd rstd past 2^31 elements", drstd + first, rstd, tail, FP32);
    /* backward into dx_out (the old dy buffer), from gradient g (the forward's y buffer) */
    float *dgrad = dy, *dxo = dev_const(total, 0.0f);
    CHECK(gpu->fill(dgrad, total, 0.0f) == TR_OK);
    put(dgrad + (int64_t)first * dim, g, tn);
    put(dxo + (int64_t)first * dim, gx, tn);
    CHECK(gpu->rmsnorm_bwd(dxo, NULL, dgrad, dx, dw, drstd, rows, dim, 0) == TR_OK);
    CHECK(cpu->rmsnorm_bwd(gx, NULL, g, x, w, rstd, tail, dim, 0) == TR_OK);
    CHECK_DEV("rmsnorm_bwd dx past 2^31 elements", dxo + (int64_t)first * dim, gx, tn, FP32);
    free(w), free(x), free(g), free(gx), free(y);
    gt_free(dw), gt_free(dx), gt_free(dy), gt_free(drstd), gt_free(dxo);
}

/* Element-wise ops and the squared norm over more than 2^31 elements. */
void test_flat_past_2g(void) {
    const int64_t tail = 4096, n = PAST_2G + tail;
    float *h = rnd((size_t)tail, -2, 2), *hy = rnd((size_t)tail, -2, 2);
    float *dx = dev_const(n, 0.5f), *dy = dev_const(n, 0.25f);
    put(dx + PAST_2G, h, (size_t)tail);
    put(dy + PAST_2G, hy, (size_t)tail);
    CHECK(gpu->add(dy, dx, n) == TR_OK && cpu->add(hy, h, tail) == TR_OK);
    CHECK_DEV("add past 2^31 elements", dy + PAST_2G, hy, (size_t)tail, EXACTISH);
    float *dss = gt_dev_poison(1);
    CHECK(gpu->sum_squares(dss, dx, n) == TR_OK);
    double want = (double)PAST_2G * 0.25; /* the constant part: 2^31 x 0.5^2 */
    for (int64_t i = 0; i < tail; i++) want += (double)h[i] * h[i];
    float wantf = (float)want;
    CHECK_DEV("sum_squares over 2^31 + 4096 elements", dss, &wantf, 1, FP32);
    free(h), free(hy), gt_free(dx), gt_free(dy), gt_free(dss);
}

/* RoPE at Llama 3 8B's head_dim 128 over a 4096-token sequence, forward in place. */
void test_rope_head_dim_128(void) {
    const int B = 1, T = 4096, H = 8, D = 128;
    float *cs, *sn, *dcs, *dsn;
    rope_tables(D, 8, T, 0, &cs, &sn, &dcs, &dsn);
    size_t n = (size_t)B * T * H * D;
    float *x = rnd(n, -1, 1), *dx = gt_dev(x, n);
    CHECK(cpu->rope_fwd(x, x, cs, sn, B, T, H, D, D) == TR_OK);
    CHECK(gpu->rope_fwd(dx, dx, dcs, dsn, B, T, H, D, D) == TR_OK);
    CHECK_DEV("rope_fwd head_dim 128, seq 4096, in place", dx, x, n, EXACTISH);
    CHECK(cpu->rope_bwd(x, x, cs, sn, B, T, H, D, D) == TR_OK);
    CHECK(gpu->rope_bwd(dx, dx, dcs, dsn, B, T, H, D, D) == TR_OK);
    CHECK_DEV("rope_bwd head_dim 128, in place", dx, x, n, EXACTISH);
    free(cs), free(sn), free(x), gt_free(dcs), gt_free(dsn), gt_free(dx);
}

/* Element-wise ops accept out == in (kernels/ops.h). */
void test_in_place(void) {
    const int64_t n = 70001;
    float *x = rnd((size_t)n, -5, 5), *g = rnd((size_t)n, -1, 1);
    float *dx = gt_dev(x, (size_t)n), *dg = gt_dev(g, (size_t)n);
    CHECK(cpu->gelu_bwd(g, g, x, n, 1) == TR_OK && gpu->gelu_bwd(dg, dg, dx, n, 1) == TR_OK);
    CHECK_DEV("gelu_bwd dx == dy", dg, g, (size_t)n, FP32);
    CHECK(cpu->gelu_fwd(x, x, n, 0) == TR_OK && gpu->gelu_fwd(dx, dx, n, 0) == TR_OK);
    CHECK_DEV("gelu_fwd y == x", dx, x, (size_t)n, FP32);
    CHECK(cpu->dropout_fwd(x, x, n, 0.1f, 99, 12345) == TR_OK);
    CHECK(gpu->dropout_fwd(dx, dx, n, 0.1f, 99, 12345) == TR_OK);
    CHECK_DEV("dropout_fwd y == x", dx, x, (size_t)n, EXACTISH);
    CHECK(cpu->add(x, x, n) == TR_OK && gpu->add(dx, dx, n) == TR_OK);
    CHECK_DEV("add y == x", dx, x, (size_t)n, EXACTISH);
    free(x), free(g), gt_free(dx), gt_free(dg);
}
