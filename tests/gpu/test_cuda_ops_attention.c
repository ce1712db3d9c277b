/* The attention half of test_cuda_ops (tests/gpu/cuda_ops_test.h): the SIMT flash attention
 * and the tensor-core kernels against the CPU op, forward and backward, bf16/fp16 storage,
 * GQA, causal and packed-document masks, attention dropout (the CPU op's mask). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_mixed.h"
#include "kernels/cuda/cuda_ops.h"
#include "tests/gpu/cuda_ops_test.h"

/* A descriptor; p > 0 adds attention dropout at fixed mask coordinates, those of a TP rank whose
 * first head is global head H (of 3 H). */
static tr_attn_desc desc_of(int B, int T, int H, int G, int D, int causal, int lowp, float p) {
    tr_attn_desc d = {.batch = B,
                      .seq = T,
                      .heads = H,
                      .groups = G,
                      .head_dim = D,
                      .scale = 1.0f / sqrtf((float)D),
                      .causal = causal,
                      .lowp = lowp};
    if (p > 0.0f) {
        d.dropout = p, d.dropout_seed = 0xA77E17D0ull + (uint64_t)T, d.dropout_round = 17;
        d.dropout_layer = 5, d.head_offset = H, d.heads_total = 3 * H;
    }
    return d;
}

/* doc_len > 0: packed documents of that length (the last one shorter) in every row. lowp != 0
 * takes the tensor-core path (the runtime's desc: lowp and a trusted doc_start), which must also
 * be deterministic: a second backward gives the same bits. p > 0: attention dropout, whose mask
 * the kernels must draw as the CPU does (a wrong entry moves outputs by O(P), far above these
 * tolerances). */
static void attention_drop_case(int lowp, int B, int T, int H, int G, int D, int causal,
                                int doc_len, float p) {
    tr_attn_desc d = desc_of(B, T, H, G, D, causal, lowp, p);
    /* lowp with another head_dim runs the fp32 SIMT kernels: fp32 limits then */
    int tc = lowp && (D == 16 || D == 32 || D == 64 || D == 128);
    double tol = !tc ? FP32 : lowp == TR_LOWP_BF16 ? TC_BF16 : TC_F16;
    double tol_bwd = tc ? tol : FP32_BWD;
    int32_t *ds = NULL, *dds = NULL;
    if (doc_len) {
        ds = malloc(sizeof(int32_t) * (size_t)B * T);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) ds[b * T + t] = t / doc_len * doc_len;
        dds = gt_dev_bytes(ds, sizeof(int32_t) * (size_t)B * T);
    }
    tr_attn_desc dd = d; /* the device's doc_start is device memory */
    d.doc_start = ds;
    dd.doc_start = dds;
    dd.doc_start_trusted = lowp != 0;
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * G * D, nl = (size_t)B * H * T;
    float *q = rnd(nq, -2, 2), *k = rnd(nk, -2, 2), *v = rnd(nk, -1, 1), *g = rnd(nq, -1, 1);
    float *o = malloc(nq * 4), *lse = malloc(nl * 4), *dq = malloc(nq * 4), *dk = malloc(nk * 4),
          *dv = malloc(nk * 4);
    CHECK(cpu->attention_fwd(o, lse, q, k, v, &d) == TR_OK);
    CHECK(cpu->attention_bwd(dq, dk, dv, g, q, k, v, o, lse, &d) == TR_OK);
    float *Q = gt_dev(q, nq), *K = gt_dev(k, nk), *V = gt_dev(v, nk), *Gd = gt_dev(g, nq);
    float *O = gt_dev_poison(nq), *L = gt_dev_poison(nl), *DQ = gt_dev_poison(nq),
          *DK = gt_dev_poison(nk), *DV = gt_dev_poison(nk);
    CHECK(gpu->attention_fwd(O, L, Q, K, V, &dd) == TR_OK);
    char name[112];
#define ATT_NAME(what)                                                                             \
    snprintf(name, sizeof name, "attn lowp%d B%d T%d H%d G%d D%d c%d doc%d p%.2f %s", lowp, B, T,  \
             H, G, D, causal, doc_len, p, what)
    ATT_NAME("out");
    CHECK_DEV(name, O, o, nq, tol);
    ATT_NAME("lse");
    CHECK_DEV(name, L, lse, nl, tol);
    /* backward from the CPU's out/lse so the comparison isolates the backward kernels */
    float *O2 = gt_dev(o, nq), *L2 = gt_dev(lse, nl);
    CHECK(gpu->attention_bwd(DQ, DK, DV, Gd, Q, K, V, O2, L2, &dd) == TR_OK);
    if (T == 1 && tc) {
        /* One key: P = 1 and dS = dP - di is exactly 0, so dq and dk are 0 up to the rounding of
         * dP (|dP| <= D, error ~u |dP|): a relative error means nothing, a bound on the noise
         * does (a wrong mask or tile would give O(1) values). */
        float *hq = gt_host(DQ, nq), *hk = gt_host(DK, nk);
        for (size_t i = 0; i < nq; i++) CHECK(fabsf(hq[i]) < 0.05f);
        for (size_t i = 0; i < nk; i++) CHECK(fabsf(hk[i]) < 0.05f);
        free(hq), free(hk);
    } else {
        ATT_NAME("dq");
        CHECK_DEV(name, DQ, dq, nq, tol_bwd);
        ATT_NAME("dk");
        CHECK_DEV(name, DK, dk, nk, tol_bwd);
    }
    ATT_NAME("dv");
    CHECK_DEV(name, DV, dv, nk, tol_bwd);
    if (tc) {
        float *hq = gt_host(DQ, nq), *hk = gt_host(DK, nk), *hv = gt_host(DV, nk);
        CHECK(gpu->attention_bwd(DQ, DK, DV, Gd, Q, K, V, O2, L2, &dd) == TR_OK);
        ATT_NAME("dq rerun");
        CHECK_DEV(name, DQ, hq, nq, 0.0);
        ATT_NAME("dk rerun");
        CHECK_DEV(name, DK, hk, nk, 0.0);
        ATT_NAME("dv rerun");
        CHECK_DEV(name, DV, hv, nk, 0.0);
        free(hq), free(hk), free(hv);
    }
#undef ATT_NAME
    free(q), free(k), free(v), free(g), free(o), free(lse), free(dq), free(dk), free(dv);
    gt_free(Q), gt_free(K), gt_free(V), gt_free(Gd), gt_free(O), gt_free(L), gt_free(DQ),
        gt_free(DK), gt_free(DV), gt_free(O2), gt_free(L2);
    free(ds), gt_free(dds);
}

static void attention_lowp_case(int lowp, int B, int T, int H, int G, int D, int causal,
                                int doc_len) {
    attention_drop_case(lowp, B, T, H, G, D, causal, doc_len, 0.0f);
}

static void attention_case(int B, int T, int H, int G, int D, int causal, int doc_len) {
    attention_lowp_case(0, B, T, H, G, D, causal, doc_len);
}

/* bf16 device copy of host floats, and the rounded values back on the host. */
static uint16_t *to_bf16(const float *h, size_t n, float *rounded) {
    float *d = gt_dev(h, n), *back = gt_dev_poison(n);
    uint16_t *b = gt_dev_bytes(NULL, n * 2);
    CHECK(tr_cuda_f32_to_bf16(b, d, (int64_t)n) == TR_OK);
    CHECK(tr_cuda_bf16_to_f32(back, b, (int64_t)n) == TR_OK);
    float *r = gt_host(back, n);
    memcpy(rounded, r, n * sizeof(float));
    free(r), gt_free(d), gt_free(back);
    return b;
}

/* bf16 outputs: unit roundoff 2^-8; the tensor-core path also rounds P and dS (TC_BF16). */
static void check_bf16(const char *name, const uint16_t *b, const float *want, size_t n,
                       double tol) {
    float *d = gt_dev_poison(n);
    CHECK(tr_cuda_bf16_to_f32(d, b, (int64_t)n) == TR_OK);
    CHECK_DEV(name, d, want, n, tol);
    gt_free(d);
}

/* The bf16 entry points against the fp32 CPU op on the same (bf16-representable) inputs. */
static void attention_bf16_case(int T, int H, int G, int D, int doc_len, int lowp, float p) {
    const int B = 2;
    tr_attn_desc d = desc_of(B, T, H, G, D, 1, lowp, p);
    double tol = lowp ? TC_BF16 : 1e-2, tol_lse = lowp ? TC_BF16 : FP32;
    size_t nq = (size_t)B * T * H * D, nk = (size_t)B * T * G * D, nl = (size_t)B * H * T;
    int32_t *ds = NULL, *dds = NULL;
    if (doc_len) {
        ds = malloc(sizeof(int32_t) * (size_t)B * T);
        for (int i = 0; i < B * T; i++) ds[i] = i % T / doc_len * doc_len;
        dds = gt_dev_bytes(ds, sizeof(int32_t) * (size_t)B * T);
    }
    tr_attn_desc dd = d;
    d.doc_start = ds, dd.doc_start = dds;
    float *q = rnd(nq, -2, 2), *k = rnd(nk, -2, 2), *v = rnd(nk, -1, 1), *g = rnd(nq, -1, 1);
    uint16_t *Q = to_bf16(q, nq, q), *K = to_bf16(k, nk, k), *V = to_bf16(v, nk, v),
             *Gd = to_bf16(g, nq, g);
    float *o = malloc(nq * 4), *lse = malloc(nl * 4), *dq = malloc(nq * 4), *dk = malloc(nk * 4),
          *dv = malloc(nk * 4);
    CHECK(cpu->attention_fwd(o, lse, q, k, v, &d) == TR_OK);
    uint16_t *O = gt_dev_bytes(NULL, nq * 2);
    float *L = gt_dev_poison(nl);
    CHECK(tr_cuda_attention_fwd_bf16(O, L, Q, K, V, &dd) == TR_OK);
    char name[96];
#define BF16_NAME(what)                                                                            \
    snprintf(name, sizeof name, "attn bf16 lowp%d T%d H%d G%d D%d doc%d p%.2f %s", lowp, T, H, G,  \
             D, doc_len, p, what)
    BF16_NAME("out");
    check_bf16(name, O, o, nq, tol);
    BF16_NAME("lse");
    CHECK_DEV(name, L, lse, nl, tol_lse);
    /* backward from the device's bf16 out (as floats on the CPU) and the CPU's lse, so only
     * the output rounding differs */
    float *orounded = malloc(nq * 4);
    uint16_t *O2 = to_bf16(o, nq, orounded);
    CHECK(cpu->attention_bwd(dq, dk, dv, g, q, k, v, orounded, lse, &d) == TR_OK);
    float *L2 = gt_dev(lse, nl);
    uint16_t *DQ = gt_dev_bytes(NULL, nq * 2), *DK = gt_dev_bytes(NULL, nk * 2),
             *DV = gt_dev_bytes(NULL, nk * 2);
    CHECK(tr_cuda_attention_bwd_bf16(DQ, DK, DV, Gd, Q, K, V, O2, L2, &dd) == TR_OK);
    BF16_NAME("dq");
    check_bf16(name, DQ, dq, nq, tol);
    BF16_NAME("dk");
    check_bf16(name, DK, dk, nk, tol);
    BF16_NAME("dv");
    check_bf16(name, DV, dv, nk, tol);
#undef BF16_NAME
    free(q), free(k), free(v), free(g), free(o), free(lse), free(dq), free(dk), free(dv),
        free(orounded), free(ds);
    gt_free(Q), gt_free(K), gt_free(V), gt_free(Gd), gt_free(O), gt_free(L), gt_free(O2),
        gt_free(L2), gt_free(DQ), gt_free(DK), gt_free(DV), gt_free(dds);
}

void test_attention_bf16(void) {
    attention_bf16_case(97, 8, 2, 64, 0, 0, 0.0f);
    attention_bf16_case(80, 4, 4, 128, 30, 0, 0.0f);
    attention_bf16_case(97, 8, 2, 64, 0, TR_LOWP_BF16, 0.0f); /* bf16 storage, tensor cores */
    attention_bf16_case(80, 4, 4, 128, 30, TR_LOWP_F16, 0.0f);
    attention_bf16_case(97, 8, 2, 64, 0, 0, 0.1f); /* attention dropout */
    attention_bf16_case(80, 4, 4, 128, 30, TR_LOWP_BF16, 0.1f);
}

/* The tensor-core kernels (head_dim 16, 32, 64, 128): MHA and GQA, causal or not, sequences that
 * are one row, just under a tile, and across tile edges, packed documents. */
void test_attention_tc(void) {
    static const int lowps[2] = {TR_LOWP_BF16, TR_LOWP_F16};
    for (int i = 0; i < 2; i++) {
        int lp = lowps[i];
        attention_lowp_case(lp, 2, 1, 4, 4, 64, 1, 0);    /* one query */
        attention_lowp_case(lp, 2, 63, 8, 2, 64, 1, 0);   /* under one tile, GQA */
        attention_lowp_case(lp, 2, 130, 8, 2, 64, 0, 0);  /* non-causal, three tiles */
        attention_lowp_case(lp, 2, 257, 32, 8, 64, 1, 0); /* the Llama 3.2 1B head layout */
        attention_lowp_case(lp, 2, 130, 4, 4, 16, 1, 0);  /* MHA, smallest head */
        attention_lowp_case(lp, 2, 100, 4, 2, 32, 0, 0);
        attention_lowp_case(lp, 2, 257, 8, 2, 128, 1, 0); /* 32-row secondary tiles */
        attention_lowp_case(lp, 1, 63, 4, 1, 128, 0, 0);
        attention_lowp_case(lp, 2, 257, 8, 2, 64, 1, 37); /* documents across tile edges */
        attention_lowp_case(lp, 2, 200, 4, 2, 128, 1, 70);
        attention_lowp_case(lp, 2, 130, 4, 4, 16, 1, 5); /* many short documents */
    }
    /* other head sizes under lowp fall back to the fp32 SIMT kernels (fp32 tolerance holds) */
    attention_lowp_case(TR_LOWP_BF16, 1, 45, 4, 4, 80, 0, 0);
    /* attention dropout on tensor cores: every head_dim, GQA, documents, non-causal */
    for (int i = 0; i < 2; i++) {
        int lp = lowps[i];
        attention_drop_case(lp, 2, 257, 32, 8, 64, 1, 0, 0.1f);
        attention_drop_case(lp, 2, 130, 4, 4, 16, 0, 0, 0.3f);
        attention_drop_case(lp, 2, 100, 4, 2, 32, 1, 37, 0.5f);
        attention_drop_case(lp, 2, 257, 8, 2, 128, 1, 0, 0.1f);
    }
}

void test_attention(void) {
    attention_case(2, 67, 4, 2, 64, 1, 0);   /* GQA, seq not a multiple of any tile */
    attention_case(1, 45, 4, 4, 80, 0, 0);   /* MHA, head_dim not a multiple of 32, no mask */
    attention_case(1, 130, 4, 1, 128, 1, 0); /* MQA, head_dim 128 */
    attention_case(1, 20, 2, 1, 256, 1, 0);  /* head_dim 256: opt-in shared memory */
    attention_case(2, 150, 4, 2, 64, 1, 37); /* packed documents across tile edges */
    /* attention dropout on the fp32 SIMT kernels */
    attention_drop_case(0, 2, 67, 4, 2, 64, 1, 0, 0.1f);
    attention_drop_case(0, 1, 45, 4, 4, 80, 0, 0, 0.5f);
    attention_drop_case(0, 2, 150, 4, 2, 64, 1, 37, 0.3f);
    tr_attn_desc bad = desc_of(1, 4, 2, 1, 300, 1, 0, 0.0f);
    bad.scale = 0.1f;
    float *p = gt_dev_poison(64);
    CHECK(gpu->attention_fwd(p, p, p, p, p, &bad) == TR_ERR_INVALID); /* head_dim > 256 */
    /* a malformed doc_start (row not starting at 0) is refused like the CPU does */
    int32_t ds[4] = {1, 1, 2, 3};
    int32_t *dds = gt_dev_bytes(ds, sizeof ds);
    tr_attn_desc docs = desc_of(1, 4, 2, 1, 8, 1, 0, 0.0f);
    docs.scale = 0.3f, docs.doc_start = dds;
    CHECK(gpu->attention_fwd(p, p, p, p, p, &docs) == TR_ERR_INVALID);
    gt_free(p), gt_free(dds);
}
