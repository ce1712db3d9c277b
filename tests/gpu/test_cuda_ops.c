/* Every op of the CUDA table against the CPU op on fresh random inputs, with poisoned outputs.
 *
 * Limits (relative L2 error against the CPU result), and why:
 *  - 1e-6: ops whose every element is the same float expression on both backends (flat helpers,
 *    dropout, embeddings, casts); the only slack is fused multiply-add contraction by nvcc.
 *  - 1e-5: ops through libm-vs-CUDA transcendental functions (a few ulp each: GeLU, SiLU, exp in
 *    the norms and cross entropy) and fp32 GEMM/reductions summed in a different order (error
 *    grows like sqrt(k) * 6e-8, about 1e-6 at our sizes).
 *  - 1e-4: attention backward, where P = exp(s - lse) and dS = P (dP - di) compound the
 *    reordered dot products of both passes.
 *  - 1e-2: the bf16 GEMM against the fp32 CPU GEMM (bf16 keeps 8 significant bits, 4e-3 per
 *    operand rounding).
 *  - 2e-2 (bf16) and 5e-3 (fp16): the tensor-core attention (desc.lowp) against the fp32 CPU op
 *    on the same fp32 inputs. The kernels round q, k, v, dO, P and dS, each a relative error of
 *    at most u = 2^-8 (bf16) or 2^-11 (fp16); the results are sums of many such terms with
 *    independent errors, so their relative L2 error is about u (4e-3 / 5e-4), and the backward
 *    adds the cancellation of dP - di, a few u more. The limits are ~5u (bf16) and ~10u (fp16):
 *    loose enough for that, far below the O(1) error of a wrong mask, fragment or tile bound. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/arena.h"
#include "kernels/cuda/cuda_mixed.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "tests/gpu/cuda_ops_test.h"

const tr_ops *cpu, *gpu;

float *rnd(size_t n, float lo, float hi) {
    float *h = malloc(n * sizeof(float) + 1);
    gt_fill(h, n, lo, hi);
    return h;
}

static float *copy_of(const float *h, size_t n) {
    float *c = malloc(n * sizeof(float) + 1);
    memcpy(c, h, n * sizeof(float));
    return c;
}

static void test_gemm(void) {
    const int m = 37, n = 45, k = 53, pad = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
            size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb;
            size_t nc = (size_t)m * ldc;
            float *a = rnd(na, -1, 1), *b = rnd(nb, -1, 1), *c = rnd(nc, -1, 1);
            float *da = gt_dev(a, na), *db = gt_dev(b, nb), *dc = gt_dev(c, nc);
            CHECK(cpu->gemm(ta, tb, m, n, k, 0.7f, a, lda, b, ldb, 0.5f, c, ldc) == TR_OK);
            CHECK(gpu->gemm(ta, tb, m, n, k, 0.7f, da, lda, db, ldb, 0.5f, dc, ldc) == TR_OK);
            char name[64];
            snprintf(name, sizeof name, "gemm ta=%d tb=%d beta=0.5", ta, tb);
            CHECK_DEV(name, dc, c, nc, FP32);
            free(a), free(b), free(c), gt_free(da), gt_free(db), gt_free(dc);
        }
    /* k == 0 with beta == 0 overwrites C, NaN included (BLAS rule). */
    float *dc = gt_dev_poison(6), zero[6] = {0};
    CHECK(gpu->gemm(TR_NOTRANS, TR_NOTRANS, 2, 3, 0, 1.0f, NULL, 1, NULL, 3, 0.0f, dc, 3) == TR_OK);
    CHECK_DEV("gemm k=0 beta=0", dc, zero, 6, 0.0);
    gt_free(dc);
}

static void test_gemm_bf16(void) {
    const int m = 64, n = 96, k = 128;
    for (int tb = 0; tb < 2; tb++) {
        size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
        float *a = rnd(na, -1, 1), *b = rnd(nb, -1, 1), *bias = rnd(n, -1, 1);
        float *c = calloc(nc, sizeof(float));
        CHECK(cpu->gemm(TR_NOTRANS, tb, m, n, k, 1.0f, a, k, b, tb ? k : n, 0.0f, c, n) == TR_OK);
        CHECK(cpu->bias_add(c, bias, m, n) == TR_OK);
        float *da = gt_dev(a, na), *db = gt_dev(b, nb), *dbias = gt_dev(bias, n);
        uint16_t *ha = gt_dev_bytes(NULL, na * 2), *hb = gt_dev_bytes(NULL, nb * 2);
        CHECK(tr_cuda_f32_to_bf16(ha, da, (int64_t)na) == TR_OK);
        CHECK(tr_cuda_f32_to_bf16(hb, db, (int64_t)nb) == TR_OK);
        float *dc = gt_dev_poison(nc);
        CHECK(tr_cuda_gemm_bf16(TR_NOTRANS, tb, m, n, k, 1.0f, ha, k, hb, tb ? k : n, 0.0f, dc,
                                TR_CUDA_F32, n, dbias) == TR_OK);
        CHECK_DEV(tb ? "gemm_bf16 (N,T) + bias, fp32 out" : "gemm_bf16 (N,N) + bias, fp32 out", dc,
                  c, nc, 1e-2);
        /* bf16 output, then back to fp32 for the comparison */
        uint16_t *hc = gt_dev_bytes(NULL, nc * 2);
        CHECK(tr_cuda_gemm_bf16(TR_NOTRANS, tb, m, n, k, 1.0f, ha, k, hb, tb ? k : n, 0.0f, hc,
                                TR_CUDA_BF16, n, dbias) == TR_OK);
        CHECK(tr_cuda_bf16_to_f32(dc, hc, (int64_t)nc) == TR_OK);
        CHECK_DEV("gemm_bf16 + bias, bf16 out", dc, c, nc, 1e-2);
        free(a), free(b), free(bias), free(c);
        gt_free(da), gt_free(db), gt_free(dbias), gt_free(ha), gt_free(hb), gt_free(hc),
            gt_free(dc);
    }
}

/* The table's gemm_lowp against the CPU table's on the same fp32 inputs: both round the operands
 * to nearest even, and a product of two bf16 (or fp16) values is exact in fp32, so only the fp32
 * summation order differs. Strided operands, beta != 0; fp16 overflow gives inf on both; and
 * round_lowp is the CPU's bit for bit. */
static void test_gemm_lowp(void) {
    const int m = 37, n = 45, k = 53, pad = 3;
    for (int t = TR_LOWP_BF16; t <= TR_LOWP_F16; t++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
                size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb;
                size_t nc = (size_t)m * ldc;
                float *a = rnd(na, -2, 2), *b = rnd(nb, -2, 2), *c = rnd(nc, -1, 1);
                float *da = gt_dev(a, na), *db = gt_dev(b, nb), *dc = gt_dev(c, nc);
                CHECK(cpu->gemm_lowp((tr_lowp)t, ta, tb, m, n, k, 0.7f, a, lda, b, ldb, 0.5f, c,
                                     ldc) == TR_OK);
                CHECK(gpu->gemm_lowp((tr_lowp)t, ta, tb, m, n, k, 0.7f, da, lda, db, ldb, 0.5f, dc,
                                     ldc) == TR_OK);
                gt_sync();
                char name[64];
                snprintf(name, sizeof name, "gemm_lowp %s ta=%d tb=%d beta=0.5",
                         t == TR_LOWP_BF16 ? "bf16" : "fp16", ta, tb);
                CHECK_DEV(name, dc, c, nc, FP32);
                free(a), free(b), free(c), gt_free(da), gt_free(db), gt_free(dc);
            }
    float a[2] = {70000.0f, 1.0f}, b[2] = {1.0f, 1.0f};
    float *da = gt_dev(a, 2), *db = gt_dev(b, 2), *dc = gt_dev_poison(1);
    CHECK(gpu->gemm_lowp(TR_LOWP_F16, TR_NOTRANS, TR_NOTRANS, 1, 1, 2, 1.0f, da, 2, db, 1, 0.0f, dc,
                         1) == TR_OK);
    float *got = gt_host(dc, 1);
    CHECK(isinf(got[0])); /* 70000 is beyond fp16's 65504 */
    free(got);
    gt_free(da), gt_free(db), gt_free(dc);
    const size_t nr = 4096;
    for (int t = TR_LOWP_BF16; t <= TR_LOWP_F16; t++) {
        float *x = rnd(nr, -70000, 70000);
        for (size_t i = 0; i < nr; i += 3) x[i] *= 1e-9f; /* fp16 subnormals too */
        float *dx = gt_dev(x, nr);
        CHECK(cpu->round_lowp((tr_lowp)t, x, (int64_t)nr) == TR_OK);
        CHECK(gpu->round_lowp((tr_lowp)t, dx, (int64_t)nr) == TR_OK);
        float *h = gt_host(dx, nr);
        CHECK(memcmp(h, x, nr * sizeof(float)) == 0);
        free(h), free(x), gt_free(dx);
    }
}

/* The weight-copy ops (docs/cuda.md, "Mixed precision"). cast_lowp: the CPU's bit patterns
 * exactly (overflow to inf, fp16 subnormals, signed zero). */
static void test_cast_lowp(void) {
    const size_t n = 5000;
    float *x = rnd(n, -70000, 70000);
    for (size_t i = 0; i < n; i += 3) x[i] *= 1e-9f; /* fp16 subnormals */
    x[0] = -0.0f, x[1] = 65520.0f, x[2] = INFINITY, x[4] = 3.0e38f;
    float *dx = gt_dev(x, n);
    uint16_t *want = malloc(n * 2), *got = malloc(n * 2), *dh = gt_dev_bytes(NULL, n * 2);
    for (int t = TR_LOWP_BF16; t <= TR_LOWP_F16; t++) {
        CHECK(cpu->cast_lowp((tr_lowp)t, want, x, (int64_t)n) == TR_OK);
        CHECK(gpu->cast_lowp((tr_lowp)t, dh, dx, (int64_t)n) == TR_OK);
        gt_sync();
        CHECK(cudaMemcpy(got, dh, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += got[i] != want[i];
        printf("  cast_lowp %s: %zu of %zu bit patterns differ from the CPU's\n",
               t == TR_LOWP_BF16 ? "bf16" : "fp16", bad, n);
        CHECK(bad == 0);
    }
    CHECK(gpu->cast_lowp((tr_lowp)0, dh, dx, (int64_t)n) == TR_ERR_INVALID);
    free(x), free(want), free(got), gt_free(dx), gt_free(dh);
}

/* gemm_lowp_ex against the CPU table's on the same half-precision operands (each backend's
 * cast_lowp of the same fp32 values, bitwise equal by test_cast_lowp): only the fp32 summation
 * order differs. Every mix of fp32 and half operands, all transposes, strided operands, beta,
 * the bias (bf16: cuBLASLt's epilogue; fp16: the kernel after the GEMM); and a tall operand
 * whose rows exceed one grid dimension (the 2-D cast's row loop). */
static void gemm_ex_case(tr_lowp t, int ta, int tb, int m, int n, int k, int pad, bool with_bias) {
    int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb, nc = (size_t)m * ldc;
    float beta = with_bias ? 0.0f : 0.5f;
    float *a = rnd(na, -2, 2), *b = rnd(nb, -2, 2), *c0 = rnd(nc, -1, 1), *bias = rnd(n, -1, 1);
    float *da = gt_dev(a, na), *db = gt_dev(b, nb), *dbias = gt_dev(bias, n);
    uint16_t *ha = malloc(na * 2), *hb = malloc(nb * 2);
    uint16_t *dha = gt_dev_bytes(NULL, na * 2), *dhb = gt_dev_bytes(NULL, nb * 2);
    CHECK(cpu->cast_lowp(t, ha, a, (int64_t)na) == TR_OK);
    CHECK(cpu->cast_lowp(t, hb, b, (int64_t)nb) == TR_OK);
    CHECK(gpu->cast_lowp(t, dha, da, (int64_t)na) == TR_OK);
    CHECK(gpu->cast_lowp(t, dhb, db, (int64_t)nb) == TR_OK);
    for (int mask = 0; mask < 4; mask++) {
        bool la = mask & 1, lb = mask & 2;
        float *c = copy_of(c0, nc), *dc = gt_dev(c0, nc);
        tr_gemm_operand oa = {la ? (const void *)ha : a, lda, la};
        tr_gemm_operand ob = {lb ? (const void *)hb : b, ldb, lb};
        tr_gemm_operand doa = {la ? (const void *)dha : da, lda, la};
        tr_gemm_operand dob = {lb ? (const void *)dhb : db, ldb, lb};
        CHECK(cpu->gemm_lowp_ex(t, ta, tb, m, n, k, 0.7f, oa, ob, beta, c, ldc,
                                with_bias ? bias : NULL) == TR_OK);
        CHECK(gpu->gemm_lowp_ex(t, ta, tb, m, n, k, 0.7f, doa, dob, beta, dc, ldc,
                                with_bias ? dbias : NULL) == TR_OK);
        gt_sync();
        char name[96];
        snprintf(name, sizeof name, "gemm_lowp_ex %s %dx%dx%d t=%d%d half=%d%d %s",
                 t == TR_LOWP_BF16 ? "bf16" : "fp16", m, n, k, ta, tb, la, lb,
                 with_bias ? "+bias" : "beta=0.5");
        CHECK_DEV(name, dc, c, nc, FP32);
        free(c), gt_free(dc);
    }
    free(a), free(b), free(c0), free(bias), free(ha), free(hb);
    gt_free(da), gt_free(db), gt_free(dbias), gt_free(dha), gt_free(dhb);
}

static void test_gemm_lowp_ex(void) {
    for (int t = TR_LOWP_BF16; t <= TR_LOWP_F16; t++) {
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                gemm_ex_case((tr_lowp)t, ta, tb, 37, 45, 53, 3, false);
                gemm_ex_case((tr_lowp)t, ta, tb, 37, 45, 53, 3, true);
            }
        /* The model's shapes: x W^T and dy W with aligned, unpadded operands. */
        gemm_ex_case((tr_lowp)t, 0, 1, 128, 192, 64, 0, true);
        gemm_ex_case((tr_lowp)t, 0, 0, 128, 64, 192, 0, false);
        gemm_ex_case((tr_lowp)t, 0, 1, 70000, 8, 16, 0, true);
    }
    /* Argument checks before any launch. */
    float *d = gt_dev_poison(4);
    tr_gemm_operand o = {d, 2, false};
    CHECK(gpu->gemm_lowp_ex(TR_LOWP_BF16, TR_NOTRANS, TR_NOTRANS, 2, 2, 2, 1.0f, o, o, 1.0f, d, 2,
                            d) == TR_ERR_INVALID); /* bias with beta != 0 */
    CHECK(gpu->gemm_lowp_ex((tr_lowp)3, TR_NOTRANS, TR_NOTRANS, 2, 2, 2, 1.0f, o, o, 0.0f, d, 2,
                            NULL) == TR_ERR_INVALID);
    tr_gemm_operand narrow = {d, 1, true};
    CHECK(gpu->gemm_lowp_ex(TR_LOWP_F16, TR_NOTRANS, TR_NOTRANS, 2, 2, 2, 1.0f, narrow, o, 0.0f, d,
                            2, NULL) == TR_ERR_INVALID);
    gt_free(d);
}

static void test_casts(void) {
    const size_t n = 1000;
    float *x = rnd(n, -100, 100);
    float *dx = gt_dev(x, n), *back = gt_dev_poison(n);
    uint16_t *h = gt_dev_bytes(NULL, n * 2);
    CHECK(tr_cuda_f32_to_bf16(h, dx, (int64_t)n) == TR_OK);
    CHECK(tr_cuda_bf16_to_f32(back, h, (int64_t)n) == TR_OK);
    CHECK_DEV("f32 -> bf16 -> f32 (unit roundoff 2^-8)", back, x, n, 1.0 / 256);
    /* a value already in bf16 survives exactly: its round trip is the identity */
    float *once = gt_host(back, n), *donce = gt_dev(once, n);
    CHECK(tr_cuda_f32_to_bf16(h, donce, (int64_t)n) == TR_OK);
    CHECK(tr_cuda_bf16_to_f32(back, h, (int64_t)n) == TR_OK);
    CHECK_DEV("bf16 round trip of bf16 values", back, once, n, 0.0);
    CHECK(tr_cuda_f32_to_f16(h, dx, (int64_t)n) == TR_OK);
    CHECK(tr_cuda_f16_to_f32(back, h, (int64_t)n) == TR_OK);
    CHECK_DEV("f32 -> f16 -> f32 (unit roundoff 2^-11)", back, x, n, 1.0 / 2048);
    /* overlapping source and destination are refused before any launch */
    CHECK(tr_cuda_f32_to_bf16((uint16_t *)dx, dx, (int64_t)n) == TR_ERR_INVALID);
    /* loss-scale check: a finite buffer leaves the flag, an inf sets it */
    float zero = 0.0f, *flag = gt_dev(&zero, 1);
    CHECK(tr_cuda_unscale_check(dx, (int64_t)n, 0.5f, flag) == TR_OK);
    float *halved = copy_of(x, n);
    for (size_t i = 0; i < n; i++) halved[i] *= 0.5f;
    CHECK_DEV("unscale_check 0.5", dx, halved, n, 0.0);
    CHECK_DEV("unscale_check flag (finite)", flag, &zero, 1, 0.0);
    float inf = INFINITY, one = 1.0f;
    CHECK(cudaMemcpy(dx + 17, &inf, sizeof inf, cudaMemcpyHostToDevice) == cudaSuccess);
    gt_settle();
    CHECK(tr_cuda_unscale_check(dx, (int64_t)n, 1.0f, flag) == TR_OK);
    CHECK_DEV("unscale_check flag (inf)", flag, &one, 1, 0.0);
    free(x), free(once), free(halved);
    gt_free(dx), gt_free(back), gt_free(h), gt_free(donce), gt_free(flag);
}

static void test_flat(void) {
    const int64_t n = 10007;
    float *x = rnd(n, -2, 2), *y = rnd(n, -2, 2);
    float *dx = gt_dev(x, n), *dy = gt_dev(y, n);
    CHECK(cpu->add(y, x, n) == TR_OK && gpu->add(dy, dx, n) == TR_OK);
    CHECK_DEV("add", dy, y, n, EXACTISH);
    CHECK(cpu->scale(y, n, -0.3f) == TR_OK && gpu->scale(dy, n, -0.3f) == TR_OK);
    CHECK_DEV("scale", dy, y, n, EXACTISH);
    float ss_c, *dss = gt_dev_poison(1);
    CHECK(cpu->sum_squares(&ss_c, y, n) == TR_OK && gpu->sum_squares(dss, dy, n) == TR_OK);
    CHECK_DEV("sum_squares", dss, &ss_c, 1, EXACTISH);
    CHECK(cpu->fill(y, n, 1.25f) == TR_OK && gpu->fill(dy, n, 1.25f) == TR_OK);
    CHECK_DEV("fill", dy, y, n, 0.0);
    float *bias = rnd(37, -1, 1), *db = gt_dev(bias, 37), *m = rnd(37 * 271, -1, 1);
    float *dm = gt_dev(m, 37 * 271);
    CHECK(cpu->bias_add(m, bias, 271, 37) == TR_OK && gpu->bias_add(dm, db, 271, 37) == TR_OK);
    CHECK_DEV("bias_add", dm, m, 37 * 271, EXACTISH);
    CHECK(cpu->bias_grad(bias, m, 271, 37) == TR_OK && gpu->bias_grad(db, dm, 271, 37) == TR_OK);
    CHECK_DEV("bias_grad (accumulates)", db, bias, 37, FP32);
    free(x), free(y), free(bias), free(m);
    gt_free(dx), gt_free(dy), gt_free(dss), gt_free(db), gt_free(dm);
}

static void test_embedding(void) {
    const int n = 300, dim = 40, v0 = 50, v1 = 130;
    int32_t ids[300];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)gt_uniform(0, 180); /* some outside the shard */
    ids[7] = ids[8] = ids[9] = 60;                                    /* repeats accumulate */
    int32_t *dids = gt_dev_bytes(ids, sizeof ids);
    float *table = rnd((size_t)(v1 - v0) * dim, -1, 1), *dtable = gt_dev(table, (v1 - v0) * dim);
    float *out = malloc(sizeof(float) * n * dim), *dout = gt_dev_poison((size_t)n * dim);
    CHECK(cpu->embedding_fwd(out, ids, table, n, dim, v0, v1) == TR_OK);
    CHECK(gpu->embedding_fwd(dout, dids, dtable, n, dim, v0, v1) == TR_OK);
    CHECK_DEV("embedding_fwd (vocab shard)", dout, out, (size_t)n * dim, 0.0);
    float *g = rnd((size_t)n * dim, -1, 1), *dg = gt_dev(g, (size_t)n * dim);
    CHECK(cpu->embedding_bwd(table, ids, g, n, dim, v0, v1) == TR_OK);
    CHECK(gpu->embedding_bwd(dtable, dids, dg, n, dim, v0, v1) == TR_OK);
    CHECK_DEV("embedding_bwd (accumulates)", dtable, table, (size_t)(v1 - v0) * dim, EXACTISH);
    const int B = 3, T = 20, off = 5;
    float *wpe = rnd((size_t)(off + T) * dim, -1, 1), *dwpe = gt_dev(wpe, (off + T) * dim);
    float *x = rnd((size_t)B * T * dim, -1, 1), *dx = gt_dev(x, (size_t)B * T * dim);
    CHECK(cpu->pos_embedding_fwd(x, wpe, B, T, dim, off) == TR_OK);
    CHECK(gpu->pos_embedding_fwd(dx, dwpe, B, T, dim, off) == TR_OK);
    CHECK_DEV("pos_embedding_fwd", dx, x, (size_t)B * T * dim, EXACTISH);
    CHECK(cpu->pos_embedding_bwd(wpe, x, B, T, dim, off) == TR_OK);
    CHECK(gpu->pos_embedding_bwd(dwpe, dx, B, T, dim, off) == TR_OK);
    CHECK_DEV("pos_embedding_bwd (accumulates)", dwpe, wpe, (size_t)(off + T) * dim, EXACTISH);
    free(table), free(out), free(g), free(wpe), free(x);
    gt_free(dids), gt_free(dtable), gt_free(dout), gt_free(dg), gt_free(dwpe), gt_free(dx);
}

static void test_norms(void) {
    const int rows = 300, dim = 200;
    size_t n = (size_t)rows * dim;
    for (int zc = 0; zc < 2; zc++)
        for (int rms = 0; rms < 2; rms++) {
            float *x = rnd(n, -3, 5), *w = rnd(dim, 0.5f, 1.5f), *b = rnd(dim, -1, 1);
            float *y = malloc(n * sizeof(float)), *mean = malloc(rows * 4),
                  *rstd = malloc(rows * 4);
            float *dx_ = gt_dev(x, n), *dw_ = gt_dev(w, dim), *db_ = gt_dev(b, dim);
            float *dy_ = gt_dev_poison(n), *dmean = gt_dev_poison(rows),
                  *drstd = gt_dev_poison(rows);
            char name[80];
            if (rms) {
                CHECK(cpu->rmsnorm_fwd(y, rstd, x, w, rows, dim, 1e-5f, zc) == TR_OK);
                CHECK(gpu->rmsnorm_fwd(dy_, drstd, dx_, dw_, rows, dim, 1e-5f, zc) == TR_OK);
            } else {
                CHECK(cpu->layernorm_fwd(y, mean, rstd, x, w, b, rows, dim, 1e-5f, zc) == TR_OK);
                CHECK(gpu->layernorm_fwd(dy_, dmean, drstd, dx_, dw_, db_, rows, dim, 1e-5f, zc) ==
                      TR_OK);
                snprintf(name, sizeof name, "layernorm_fwd mean zc=%d", zc);
                CHECK_DEV(name, dmean, mean, rows, FP32);
            }
            snprintf(name, sizeof name, "%s_fwd y zc=%d", rms ? "rmsnorm" : "layernorm", zc);
            CHECK_DEV(name, dy_, y, n, FP32);
            snprintf(name, sizeof name, "%s_fwd rstd zc=%d", rms ? "rmsnorm" : "layernorm", zc);
            CHECK_DEV(name, drstd, rstd, rows, FP32);
            /* backward: dx, dw, db all accumulate onto random starting values */
            float *g = rnd(n, -1, 1), *gx = rnd(n, -1, 1), *gw = rnd(dim, -1, 1),
                  *gb = rnd(dim, -1, 1);
            float *dg = gt_dev(g, n), *dgx = gt_dev(gx, n), *dgw = gt_dev(gw, dim),
                  *dgb = gt_dev(gb, dim);
            /* saved statistics: the CPU's, so both backwards see identical inputs */
            float *dmean2 = gt_dev(mean, rows), *drstd2 = gt_dev(rstd, rows);
            if (rms) {
                CHECK(cpu->rmsnorm_bwd(gx, gw, g, x, w, rstd, rows, dim, zc) == TR_OK);
                CHECK(gpu->rmsnorm_bwd(dgx, dgw, dg, dx_, dw_, drstd2, rows, dim, zc) == TR_OK);
            } else {
                CHECK(cpu->layernorm_bwd(gx, gw, gb, g, x, w, mean, rstd, rows, dim, zc) == TR_OK);
                CHECK(gpu->layernorm_bwd(dgx, dgw, dgb, dg, dx_, dw_, dmean2, drstd2, rows, dim,
                                         zc) == TR_OK);
                snprintf(name, sizeof name, "layernorm_bwd db zc=%d", zc);
                CHECK_DEV(name, dgb, gb, dim, FP32);
            }
            snprintf(name, sizeof name, "%s_bwd dx zc=%d", rms ? "rmsnorm" : "layernorm", zc);
            CHECK_DEV(name, dgx, gx, n, FP32);
            snprintf(name, sizeof name, "%s_bwd dw zc=%d", rms ? "rmsnorm" : "layernorm", zc);
            CHECK_DEV(name, dgw, gw, dim, FP32);
            free(x), free(w), free(b), free(y), free(mean), free(rstd), free(g), free(gx), free(gw),
                free(gb);
            gt_free(dx_), gt_free(dw_), gt_free(db_), gt_free(dy_), gt_free(dmean), gt_free(drstd),
                gt_free(dg), gt_free(dgx), gt_free(dgw), gt_free(dgb), gt_free(dmean2),
                gt_free(drstd2);
        }
    /* frozen weights: dw/db NULL is allowed, dx still accumulates */
    float *x = rnd(64, -1, 1), *dx = gt_dev(x, 64), *w = gt_dev(x, 8), *r = gt_dev(x, 8);
    CHECK(gpu->rmsnorm_bwd(dx, NULL, dx, dx, w, r, 8, 8, 0) == TR_OK);
    gt_sync();
    free(x), gt_free(dx), gt_free(w), gt_free(r);
}

void rope_tables(int rot, double factor, int T, int offset, float **cs, float **sn, float **dcs,
                 float **dsn) {
    tr_rope_params p = {.rot_dim = rot,
                        .base = 500000.0,
                        .llama3 = 1,
                        .factor = factor,
                        .low_freq_factor = 1,
                        .high_freq_factor = 4,
                        .original_max_position = 8192};
    size_t n = (size_t)T * (size_t)(rot / 2);
    *cs = malloc(sizeof(float) * n), *sn = malloc(sizeof(float) * n);
    *dcs = gt_dev_poison(n), *dsn = gt_dev_poison(n);
    CHECK(cpu->rope_table(*cs, *sn, &p, T, offset) == TR_OK &&
          gpu->rope_table(*dcs, *dsn, &p, T, offset) == TR_OK);
}

static void test_rope(void) {
    const int B = 2, T = 33, H = 3, D = 40, rot = 32, half = rot / 2;
    float *cs, *sn, *dcs, *dsn;
    rope_tables(rot, 32, T, 7, &cs, &sn, &dcs, &dsn);
    /* the same host code in double on both sides: equal up to a stray last-bit rounding */
    CHECK_DEV("rope_table cos (llama3, offset 7)", dcs, cs, (size_t)T * half, 1e-7);
    CHECK_DEV("rope_table sin", dsn, sn, (size_t)T * half, 1e-7);
    size_t n = (size_t)B * T * H * D;
    float *x = rnd(n, -1, 1), *y = malloc(n * sizeof(float));
    float *dx = gt_dev(x, n), *dy = gt_dev_poison(n);
    CHECK(cpu->rope_fwd(y, x, cs, sn, B, T, H, D, rot) == TR_OK);
    CHECK(gpu->rope_fwd(dy, dx, dcs, dsn, B, T, H, D, rot) == TR_OK);
    CHECK_DEV("rope_fwd (pass-through channels)", dy, y, n, EXACTISH);
    CHECK(cpu->rope_bwd(x, x, cs, sn, B, T, H, D, rot) == TR_OK); /* in place */
    CHECK(gpu->rope_bwd(dx, dx, dcs, dsn, B, T, H, D, rot) == TR_OK);
    CHECK_DEV("rope_bwd in place", dx, x, n, EXACTISH);
    free(cs), free(sn), free(x), free(y);
    gt_free(dcs), gt_free(dsn), gt_free(dx), gt_free(dy);
}

static void test_activations(void) {
    const int rows = 50, ffn = 173;
    size_t n = (size_t)rows * ffn;
    for (int t = 0; t < 2; t++) {
        float *x = rnd(n, -6, 6), *g = rnd(n, -1, 1), *y = malloc(n * 4);
        float *dx = gt_dev(x, n), *dg = gt_dev(g, n), *dy = gt_dev_poison(n);
        CHECK(cpu->gelu_fwd(y, x, (int64_t)n, t) == TR_OK &&
              gpu->gelu_fwd(dy, dx, (int64_t)n, t) == TR_OK);
        CHECK_DEV(t ? "gelu_fwd tanh" : "gelu_fwd erf", dy, y, n, FP32);
        CHECK(cpu->gelu_bwd(y, g, x, (int64_t)n, t) == TR_OK);
        CHECK(gpu->gelu_bwd(dy, dg, dx, (int64_t)n, t) == TR_OK);
        CHECK_DEV(t ? "gelu_bwd tanh" : "gelu_bwd erf", dy, y, n, FP32);
        free(x), free(g), free(y), gt_free(dx), gt_free(dg), gt_free(dy);
    }
    float *x = rnd(2 * n, -6, 6), *g = rnd(n, -1, 1), *y = malloc(2 * n * 4);
    float *dx = gt_dev(x, 2 * n), *dg = gt_dev(g, n), *dy = gt_dev_poison(2 * n);
    CHECK(cpu->swiglu_fwd(y, x, rows, ffn) == TR_OK && gpu->swiglu_fwd(dy, dx, rows, ffn) == TR_OK);
    CHECK_DEV("swiglu_fwd", dy, y, n, FP32);
    CHECK(cpu->swiglu_bwd(y, g, x, rows, ffn) == TR_OK &&
          gpu->swiglu_bwd(dy, dg, dx, rows, ffn) == TR_OK);
    CHECK_DEV("swiglu_bwd", dy, y, 2 * n, FP32);
    CHECK(gpu->swiglu_bwd(dx, dg, dx, rows, ffn) == TR_ERR_INVALID); /* aliasing refused */
    /* dropout: identical Philox bits, so identical masks; offset as a shard would use */
    const float p = 0.3f;
    CHECK(cpu->dropout_fwd(y, x, (int64_t)n, p, 1234, 999) == TR_OK);
    CHECK(gpu->dropout_fwd(dy, dx, (int64_t)n, p, 1234, 999) == TR_OK);
    CHECK_DEV("dropout_fwd (same mask)", dy, y, n, EXACTISH);
    float *got = gt_host(dy, n);
    int same_zeros = 1;
    for (size_t i = 0; i < n; i++) same_zeros &= (got[i] == 0.0f) == (y[i] == 0.0f);
    CHECK(same_zeros);
    CHECK(cpu->dropout_bwd(y, g, (int64_t)n, p, 1234, 999) == TR_OK);
    CHECK(gpu->dropout_bwd(dy, dg, (int64_t)n, p, 1234, 999) == TR_OK);
    CHECK_DEV("dropout_bwd", dy, y, n, EXACTISH);
    CHECK(gpu->dropout_fwd(dy, dx, (int64_t)n, 1.0f, 1, 0) == TR_ERR_INVALID);
    free(x), free(g), free(y), free(got), gt_free(dx), gt_free(dg), gt_free(dy);
}

static void test_cross_entropy(void) {
    const int rows = 40, V = 5003, split = 2100;
    float *logits = rnd((size_t)rows * V, -8, 8);
    int32_t tg[40];
    for (int r = 0; r < rows; r++) tg[r] = r % 7 == 3 ? -1 : (int32_t)gt_uniform(0, (float)V);
    int32_t *dtg = gt_dev_bytes(tg, sizeof tg);
    /* two shards [0, split) and [split, V), merged one way on the CPU, the other on the GPU */
    float *l0 = malloc(sizeof(float) * rows * split),
          *l1 = malloc(sizeof(float) * rows * (V - split));
    for (int r = 0; r < rows; r++) {
        memcpy(l0 + (size_t)r * split, logits + (size_t)r * V, sizeof(float) * split);
        memcpy(l1 + (size_t)r * (V - split), logits + (size_t)r * V + split,
               sizeof(float) * (V - split));
    }
    float s0[120], s1[120], loss[40], gmax[40];
    CHECK(cpu->ce_stats(s0, l0, tg, rows, split, 0) == TR_OK);
    CHECK(cpu->ce_stats(s1, l1, tg, rows, V - split, split) == TR_OK);
    float *d0 = gt_dev(l0, (size_t)rows * split), *d1 = gt_dev(l1, (size_t)rows * (V - split));
    float *ds0 = gt_dev_poison(120), *ds1 = gt_dev_poison(120);
    CHECK(gpu->ce_stats(ds0, d0, dtg, rows, split, 0) == TR_OK);
    CHECK(gpu->ce_stats(ds1, d1, dtg, rows, V - split, split) == TR_OK);
    CHECK_DEV("ce_stats shard 0", ds0, s0, 120, FP32);
    CHECK_DEV("ce_stats shard 1", ds1, s1, 120, FP32);
    /* Megatron style on the GPU: rebase both to the global max, add the sums */
    for (int r = 0; r < rows; r++) gmax[r] = s0[r] > s1[r] ? s0[r] : s1[r];
    float *dg = gt_dev(gmax, rows);
    CHECK(gpu->ce_rebase(ds0, dg, rows) == TR_OK && gpu->ce_rebase(ds1, dg, rows) == TR_OK);
    CHECK(gpu->add(ds0 + rows, ds1 + rows, 2 * rows) == TR_OK);
    float *merged = copy_of(s0, 120);
    CHECK(cpu->ce_merge(merged, s1, rows) == TR_OK);
    CHECK_DEV("ce_rebase + sum == ce_merge", ds0, merged, 120, FP32);
    float *dmerged = gt_dev(s0, 120), *ds1c = gt_dev(s1, 120);
    CHECK(gpu->ce_merge(dmerged, ds1c, rows) == TR_OK);
    CHECK_DEV("ce_merge", dmerged, merged, 120, FP32);
    /* a "global" max below a shard's max is a caller error, reported as on the CPU */
    float low[40];
    for (int r = 0; r < rows; r++) low[r] = s0[r] - 1.0f;
    float *dlow = gt_dev(low, rows), *ds0c = gt_dev(s0, 120);
    CHECK(gpu->ce_rebase(ds0c, dlow, rows) == TR_ERR_INVALID);
    CHECK(cpu->ce_loss(loss, merged, tg, rows) == TR_OK);
    float *dloss = gt_dev_poison(rows);
    CHECK(gpu->ce_loss(dloss, dmerged, dtg, rows) == TR_OK);
    CHECK_DEV("ce_loss (ignored rows 0)", dloss, loss, rows, FP32);
    float *scale = rnd(rows, 0.5f, 2.0f), *dscale = gt_dev(scale, rows);
    CHECK(cpu->ce_bwd(l1, merged, tg, scale, rows, V - split, split) == TR_OK);
    CHECK(gpu->ce_bwd(d1, dmerged, dtg, dscale, rows, V - split, split) == TR_OK);
    CHECK_DEV("ce_bwd shard 1 (dloss per row)", d1, l1, (size_t)rows * (V - split), FP32);
    CHECK(cpu->ce_bwd(l0, merged, tg, NULL, rows, split, 0) == TR_OK);
    CHECK(gpu->ce_bwd(d0, dmerged, dtg, NULL, rows, split, 0) == TR_OK);
    CHECK_DEV("ce_bwd shard 0 (dloss NULL)", d0, l0, (size_t)rows * split, FP32);
    free(logits), free(l0), free(l1), free(merged), free(scale);
    gt_free(dtg), gt_free(d0), gt_free(d1), gt_free(ds0), gt_free(ds1), gt_free(dg),
        gt_free(dmerged), gt_free(ds1c), gt_free(dlow), gt_free(ds0c), gt_free(dloss),
        gt_free(dscale);
}

static void test_optimizers(void) {
    const int64_t n = 5000;
    float *p = rnd(n, -1, 1), *m = calloc(n, 4), *v = calloc(n, 4), *g = rnd(n, -1, 1);
    float *dp = gt_dev(p, n), *dm = gt_dev(m, n), *dv = gt_dev(v, n), *dg = gt_dev(g, n);
    for (int64_t step = 1; step <= 3; step++) {
        tr_adamw_params a = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 1.0f};
        CHECK(cpu->adamw(p, g, m, v, n, &a) == TR_OK && gpu->adamw(dp, dg, dm, dv, n, &a) == TR_OK);
    }
    CHECK_DEV("adamw 3 steps: param", dp, p, n, EXACTISH);
    CHECK_DEV("adamw 3 steps: exp_avg", dm, m, n, EXACTISH);
    CHECK_DEV("adamw 3 steps: exp_avg_sq", dv, v, n, EXACTISH);
    tr_adamw_params bad = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0, 1.0f};
    CHECK(gpu->adamw(dp, dg, dm, dv, n, &bad) == TR_ERR_INVALID); /* step is 1-based */
    memset(m, 0, n * 4);
    CHECK(cudaMemset(dm, 0, n * 4) == cudaSuccess);
    gt_settle();
    for (int i = 0; i < 2; i++) {
        tr_sgd_params s = {0.1f, 0.9f, 0.01f, 1};
        CHECK(cpu->sgd(p, g, m, n, &s) == TR_OK && gpu->sgd(dp, dg, dm, n, &s) == TR_OK);
    }
    CHECK_DEV("sgd nesterov 2 steps", dp, p, n, EXACTISH);
    free(p), free(m), free(v), free(g);
    gt_free(dp), gt_free(dm), gt_free(dv), gt_free(dg);
}

/* Device arenas: one cudaMalloc per kind, usable device pointers, exact peaks, and a request
 * the card cannot hold answered with TR_ERR_NOMEM rather than a crash. */
static void test_arenas(void) {
    size_t cap[TR_ARENA_KIND_COUNT] = {1 << 20, 1 << 20, 2 << 20, 4 << 20, 1 << 20};
    tr_arenas s;
    CHECK(tr_arenas_create(&s, cap) == TR_OK);
    float *a, *b;
    CHECK(tr_arena_alloc(&s.a[TR_ARENA_ACTIVATIONS], 1000 * sizeof(float), (void **)&a) == TR_OK);
    size_t mark = tr_arena_mark(&s.a[TR_ARENA_ACTIVATIONS]);
    CHECK(tr_arena_alloc(&s.a[TR_ARENA_ACTIVATIONS], 3 << 20, (void **)&b) == TR_OK);
    struct cudaPointerAttributes attr;
    CHECK(cudaPointerGetAttributes(&attr, b) == cudaSuccess && attr.type == cudaMemoryTypeDevice);
    CHECK(tr_ops_cuda()->fill(b, 1000, 3.0f) == TR_OK); /* the memory is really usable */
    float want[1000];
    for (int i = 0; i < 1000; i++) want[i] = 3.0f;
    CHECK_DEV("fill inside the activations arena", b, want, 1000, 0.0);
    CHECK(tr_arena_reset(&s.a[TR_ARENA_ACTIVATIONS], mark) == TR_OK);
    CHECK_INT_EQ(s.a[TR_ARENA_ACTIVATIONS].peak, 4096 + (3 << 20));
    CHECK(tr_arena_alloc(&s.a[TR_ARENA_ACTIVATIONS], 4 << 20, (void **)&b) == TR_ERR_NOMEM);
    CHECK_INT_EQ(tr_arenas_peak_total(&s), 4096 + (3 << 20));
    tr_arenas_log_peaks(&s);
    tr_arenas_destroy(&s);
    tr_arena huge;
    CHECK(tr_arena_create(&huge, TR_ARENA_PARAMS, (size_t)1 << 50) == TR_ERR_NOMEM); /* 1 PiB */
    CHECK(cudaGetLastError() == cudaSuccess); /* and no sticky error left behind */
}

/* The runtime's layout ops: strided copies of a sub-block (QKV split, sequence-parallel block
 * order), a filled column band (padded vocabulary) and the masked loss mean (bitwise: both sum
 * in double in row order). Outputs start poisoned, so only the copied / filled elements and
 * the untouched ones that the CPU also left alone are compared. */
static void test_layout(void) {
    const int64_t rows = 301, lds = 97, ldd = 83, cols = 61;
    float *src = rnd(rows * lds, -3, 3), *dst = rnd(rows * ldd, -3, 3);
    float *dsrc = gt_dev(src, rows * lds), *ddst = gt_dev(dst, rows * ldd);
    CHECK(cpu->copy_2d(dst + 5, ldd, src + 11, lds, rows, cols) == TR_OK);
    CHECK(gpu->copy_2d(ddst + 5, ldd, dsrc + 11, lds, rows, cols) == TR_OK);
    CHECK_DEV("copy_2d", ddst, dst, rows * ldd, 0.0);
    CHECK(cpu->fill_2d(dst + 40, ldd, rows, ldd - 40, -1e30f) == TR_OK);
    CHECK(gpu->fill_2d(ddst + 40, ldd, rows, ldd - 40, -1e30f) == TR_OK);
    CHECK_DEV("fill_2d", ddst, dst, rows * ldd, 0.0);
    CHECK(gpu->copy_2d(ddst, ldd, ddst + 1, ldd, 2, 4) == TR_ERR_INVALID); /* overlapping */

    const int n = 4099;
    float *losses = rnd(n, 0, 12);
    int32_t *targets = malloc(n * sizeof *targets);
    for (int i = 0; i < n; i++) targets[i] = gt_uniform(0, 1) < 0.2f ? -1 : i;
    int32_t *dt = gt_dev_bytes(targets, n * sizeof *targets);
    float *dl = gt_dev(losses, n), *dmean = gt_dev_poison(1), mean = 0.0f;
    CHECK(cpu->loss_mean(&mean, losses, targets, n) == TR_OK);
    CHECK(gpu->loss_mean(dmean, dl, dt, n) == TR_OK);
    CHECK_DEV("loss_mean", dmean, &mean, 1, 0.0);
    free(src), free(dst), free(losses), free(targets);
    gt_free(dsrc), gt_free(ddst), gt_free(dt), gt_free(dl), gt_free(dmean);
}

static void setup(void) {
    cpu = tr_ops_cpu();
    gpu = tr_ops_cuda();
    CHECK_STR_EQ(gpu->name, "cuda");
}

TR_GPU_TEST_MAIN(TR_TEST(setup), TR_TEST(test_gemm), TR_TEST(test_gemm_bf16),
                 TR_TEST(test_gemm_lowp), TR_TEST(test_cast_lowp), TR_TEST(test_gemm_lowp_ex),
                 TR_TEST(test_casts), TR_TEST(test_flat), TR_TEST(test_layout),
                 TR_TEST(test_embedding), TR_TEST(test_norms), TR_TEST(test_rope),
                 TR_TEST(test_attention), TR_TEST(test_attention_bf16), TR_TEST(test_attention_tc),
                 TR_TEST(test_activations), TR_TEST(test_cross_entropy), TR_TEST(test_optimizers),
                 TR_TEST(test_arenas),
                 /* realistic shapes and index math past 2^31 elements (docs/cuda.md review;
                    tests/gpu/test_cuda_ops_large.c) */
                 TR_TEST(test_ce_vocab_128k), TR_TEST(test_ce_past_2g),
                 TR_TEST(test_norms_dim_8192), TR_TEST(test_norm_past_2g),
                 TR_TEST(test_flat_past_2g), TR_TEST(test_rope_head_dim_128),
                 TR_TEST(test_in_place))
