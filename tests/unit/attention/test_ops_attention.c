/* Blockwise flash-style attention against a naive O(T^2) double-precision reference, across
 * block sizes, causal and full masks, and GQA against MHA with K/V repeated per head. */
#include <string.h>

#include "kernels/cpu/simd/simd.h"
#include "tests/unit/kernels/test_ops_util.h"

#define ops (tr_ops_cpu())

typedef struct attn_io {
    tr_attn_desc d;
    int64_t nq, nk, nl;
    float *q, *k, *v, *dout;
} attn_io;

static attn_io make_io(int B, int T, int H, int G, int D, int causal, uint64_t seed) {
    rng_seed(seed);
    attn_io io = {.d = {.batch = B,
                        .seq = T,
                        .heads = H,
                        .groups = G,
                        .head_dim = D,
                        .scale = 1.0f / sqrtf((float)D),
                        .causal = causal}};
    io.nq = (int64_t)B * T * H * D;
    io.nk = (int64_t)B * T * G * D;
    io.nl = (int64_t)B * H * T;
    io.q = rand_buf(io.nq, -2, 2);
    io.k = rand_buf(io.nk, -2, 2);
    io.v = rand_buf(io.nk, -1, 1);
    io.dout = rand_buf(io.nq, -1, 1);
    return io;
}

static void free_io(attn_io *io) {
    free(io->q), free(io->k), free(io->v), free(io->dout);
}

/* Textbook attention with the full score matrix, in double. */
static void naive(const attn_io *io, double *o, double *lse, double *dq, double *dk, double *dv) {
    const tr_attn_desc *d = &io->d;
    int T = d->seq, D = d->head_dim, H = d->heads, G = d->groups, hpg = H / G;
    double *P = malloc(sizeof(double) * T * T), *dP = malloc(sizeof(double) * T * T);
    memset(dk, 0, sizeof(double) * io->nk);
    memset(dv, 0, sizeof(double) * io->nk);
#define QI(b, t, h) (((int64_t)(b)*T + (t)) * H * D + (int64_t)(h)*D)
#define KI(b, t, g) (((int64_t)(b)*T + (t)) * G * D + (int64_t)(g)*D)
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < H; h++) {
            int g = h / hpg;
            for (int i = 0; i < T; i++) {
                double mx = -INFINITY;
                for (int j = 0; j < T; j++) {
                    double s = -INFINITY;
                    if (!d->causal || j <= i) {
                        s = 0;
                        for (int e = 0; e < D; e++)
                            s += (double)io->q[QI(b, i, h) + e] * io->k[KI(b, j, g) + e];
                        s *= d->scale;
                    }
                    P[i * T + j] = s;
                    mx = s > mx ? s : mx;
                }
                double sum = 0;
                for (int j = 0; j < T; j++) sum += P[i * T + j] = exp(P[i * T + j] - mx);
                for (int j = 0; j < T; j++) P[i * T + j] /= sum;
                lse[((int64_t)b * H + h) * T + i] = mx + log(sum);
                for (int e = 0; e < D; e++) {
                    double acc = 0;
                    for (int j = 0; j < T; j++) acc += P[i * T + j] * io->v[KI(b, j, g) + e];
                    o[QI(b, i, h) + e] = acc;
                }
            }
            for (int i = 0; i < T; i++) {
                double rowdot = 0;
                for (int j = 0; j < T; j++) {
                    double s = 0;
                    for (int e = 0; e < D; e++)
                        s += (double)io->dout[QI(b, i, h) + e] * io->v[KI(b, j, g) + e];
                    dP[i * T + j] = s;
                    rowdot += s * P[i * T + j];
                }
                for (int j = 0; j < T; j++) {
                    double ds = P[i * T + j] * (dP[i * T + j] - rowdot) * d->scale;
                    for (int e = 0; e < D; e++) {
                        dv[KI(b, j, g) + e] += P[i * T + j] * io->dout[QI(b, i, h) + e];
                        dk[KI(b, j, g) + e] += ds * io->q[QI(b, i, h) + e];
                    }
                }
                for (int e = 0; e < D; e++) {
                    double acc = 0;
                    for (int j = 0; j < T; j++)
                        acc += P[i * T + j] * (dP[i * T + j] - rowdot) * d->scale *
                               io->k[KI(b, j, g) + e];
                    dq[QI(b, i, h) + e] = acc;
                }
            }
        }
#undef QI
#undef KI
    free(P), free(dP);
}

typedef struct attn_out {
    float *o, *lse, *dq, *dk, *dv;
} attn_out;

static attn_out run(const attn_io *io, int bq, int bk) {
    attn_out r = {zero_buf(io->nq), zero_buf(io->nl), zero_buf(io->nq), zero_buf(io->nk),
                  zero_buf(io->nk)};
    tr_attn_desc d = io->d;
    d.block_q = bq;
    d.block_k = bk;
    CHECK(ops->attention_fwd(r.o, r.lse, io->q, io->k, io->v, &d) == TR_OK);
    CHECK(ops->attention_bwd(r.dq, r.dk, r.dv, io->dout, io->q, io->k, io->v, r.o, r.lse, &d) ==
          TR_OK);
    return r;
}

static void free_out(attn_out *r) {
    free(r->o), free(r->lse), free(r->dq), free(r->dk), free(r->dv);
}

/* Errors are measured against each tensor's largest entry (floor 1e-2). fp32 scores (|s| up to
 * ~16 here) and the polynomial exp give ~1e-6 of that, up to ~1e-5 for the T=1 case whose exact
 * dq, dk are 0 and whose computed ones are pure cancellation noise (more so without FMA
 * contraction, as in sanitizer builds); indexing or masking bugs show up as O(1e-2..1). */
#define NAIVE_TOL 5e-5
static void vs_naive(int B, int T, int H, int G, int D, int causal, int bq, int bk) {
    attn_io io = make_io(B, T, H, G, D, causal, 100 + T + bq);
    double *o = malloc(sizeof(double) * io.nq), *lse = malloc(sizeof(double) * io.nl);
    double *dq = malloc(sizeof(double) * io.nq), *dk = malloc(sizeof(double) * io.nk),
           *dv = malloc(sizeof(double) * io.nk);
    naive(&io, o, lse, dq, dk, dv);
    attn_out r = run(&io, bq, bk);
    double eo = max_scaled_err_d(r.o, o, io.nq), el = max_scaled_err_d(r.lse, lse, io.nl);
    double eq = max_scaled_err_d(r.dq, dq, io.nq), ek = max_scaled_err_d(r.dk, dk, io.nk),
           ev = max_scaled_err_d(r.dv, dv, io.nk);
    if (eo > NAIVE_TOL || el > NAIVE_TOL || eq > NAIVE_TOL || ek > NAIVE_TOL || ev > NAIVE_TOL)
        fprintf(stderr,
                "  T=%d H=%d G=%d D=%d causal=%d block %dx%d: o %.2g lse %.2g dq %.2g dk %.2g dv "
                "%.2g\n",
                T, H, G, D, causal, bq, bk, eo, el, eq, ek, ev);
    CHECK(eo <= NAIVE_TOL && el <= NAIVE_TOL && eq <= NAIVE_TOL && ek <= NAIVE_TOL &&
          ev <= NAIVE_TOL);
    free(o), free(lse), free(dq), free(dk), free(dv);
    free_out(&r);
    free_io(&io);
}

static void test_matches_naive(void) {
    vs_naive(2, 37, 6, 2, 16, 1, 0, 0);
    vs_naive(2, 37, 6, 2, 16, 0, 0, 0);
    vs_naive(1, 130, 4, 1, 64, 1, 0, 0);
    vs_naive(1, 70, 8, 8, 32, 1, 16, 32);
    vs_naive(3, 1, 2, 1, 8, 1, 0, 0);
}

/* Different tilings only reorder the online-softmax sums, so they agree to rounding. */
static void test_block_sizes_agree(void) {
    static const int sizes[][2] = {{1, 1}, {4, 7}, {16, 16}, {5, 64}, {64, 3}, {100, 100}};
    for (int causal = 0; causal < 2; causal++) {
        attn_io io = make_io(2, 45, 4, 2, 24, causal, 200 + causal);
        attn_out ref = run(&io, 45, 45); /* one tile: the unblocked computation */
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            attn_out r = run(&io, sizes[s][0], sizes[s][1]);
            CHECK(max_scaled_err(r.o, ref.o, io.nq) < 5e-6);
            CHECK(max_scaled_err(r.lse, ref.lse, io.nl) < 5e-6);
            CHECK(max_scaled_err(r.dq, ref.dq, io.nq) < 5e-6);
            CHECK(max_scaled_err(r.dk, ref.dk, io.nk) < 5e-6);
            CHECK(max_scaled_err(r.dv, ref.dv, io.nk) < 5e-6);
            free_out(&r);
        }
        free_out(&ref);
        free_io(&io);
    }
}

/* GQA with G groups == MHA with each group's K/V copied to its H/G heads; the GQA dK/dV are the
 * MHA ones summed over each group's heads. */
static void test_gqa_equals_repeated_mha(void) {
    int B = 2, T = 29, H = 6, G = 2, D = 8, hpg = H / G;
    attn_io gq = make_io(B, T, H, G, D, 1, 300);
    attn_io mh = gq;
    mh.d.groups = H;
    mh.nk = gq.nq;
    mh.k = malloc(sizeof(float) * mh.nk);
    mh.v = malloc(sizeof(float) * mh.nk);
    for (int64_t bt = 0; bt < (int64_t)B * T; bt++)
        for (int h = 0; h < H; h++) {
            memcpy(mh.k + (bt * H + h) * D, gq.k + (bt * G + h / hpg) * D, sizeof(float) * D);
            memcpy(mh.v + (bt * H + h) * D, gq.v + (bt * G + h / hpg) * D, sizeof(float) * D);
        }
    attn_out a = run(&gq, 8, 8), b = run(&mh, 8, 8);
    CHECK(max_scaled_err(a.o, b.o, gq.nq) < 1e-5);
    CHECK(max_scaled_err(a.dq, b.dq, gq.nq) < 1e-5);
    float *sk = zero_buf(gq.nk), *sv = zero_buf(gq.nk);
    for (int64_t bt = 0; bt < (int64_t)B * T; bt++)
        for (int h = 0; h < H; h++)
            for (int e = 0; e < D; e++) {
                sk[(bt * G + h / hpg) * D + e] += b.dk[(bt * H + h) * D + e];
                sv[(bt * G + h / hpg) * D + e] += b.dv[(bt * H + h) * D + e];
            }
    CHECK(max_scaled_err(a.dk, sk, gq.nk) < 1e-5);
    CHECK(max_scaled_err(a.dv, sv, gq.nk) < 1e-5);
    free(sk), free(sv), free(mh.k), free(mh.v);
    free_out(&a), free_out(&b);
    free_io(&gq);
}

/* Every ISA variant this CPU can run must give the same answers (the default run above used the
 * widest one). */
static void test_all_isa_variants(void) {
    static const char *isas[] = {"generic", "avx2", "avx512"};
    const tr_cpu_simd *orig = tr_cpu_simd_active();
    int ran = 0;
    for (int i = 0; i < 3; i++) {
        if (tr_cpu_simd_select(isas[i]) != TR_OK) continue;
        ran++;
        vs_naive(2, 37, 6, 2, 16, 1, 0, 0);
        vs_naive(1, 45, 4, 1, 24, 0, 5, 64);
        vs_naive(1, 70, 8, 8, 32, 1, 16, 32);
    }
    CHECK(ran >= 1);
    CHECK(tr_cpu_simd_select(orig->isa) == TR_OK);
    CHECK(tr_cpu_simd_select("sse9") == TR_ERR_NOTFOUND);
}

/* desc.lowp lets a backend round operands; the CPU computes in fp32 for every value, so its
 * results are bitwise those of lowp 0. */
static void test_lowp_is_exact_on_cpu(void) {
    attn_io io = make_io(2, 37, 4, 2, 16, 1, 7);
    attn_out ref = run(&io, 0, 0);
    for (int lp = TR_LOWP_BF16; lp <= TR_LOWP_F16; lp++) {
        io.d.lowp = lp;
        attn_out r = run(&io, 0, 0);
        CHECK(memcmp(r.o, ref.o, sizeof(float) * (size_t)io.nq) == 0);
        CHECK(memcmp(r.lse, ref.lse, sizeof(float) * (size_t)io.nl) == 0);
        CHECK(memcmp(r.dq, ref.dq, sizeof(float) * (size_t)io.nq) == 0);
        CHECK(memcmp(r.dk, ref.dk, sizeof(float) * (size_t)io.nk) == 0);
        CHECK(memcmp(r.dv, ref.dv, sizeof(float) * (size_t)io.nk) == 0);
        free_out(&r);
    }
    free_out(&ref);
    free_io(&io);
}

static void test_invalid_args(void) {
    float x = 0;
    tr_attn_desc d = {.batch = 1, .seq = 4, .heads = 3, .groups = 2, .head_dim = 4, .scale = 1};
    CHECK(ops->attention_fwd(&x, &x, &x, &x, &x, &d) == TR_ERR_INVALID); /* 3 % 2 != 0 */
    d.groups = 3;
    d.scale = 0;
    CHECK(ops->attention_fwd(&x, &x, &x, &x, &x, &d) == TR_ERR_INVALID);
    CHECK(ops->attention_fwd(&x, &x, &x, &x, &x, NULL) == TR_ERR_INVALID);
    d.scale = 1;
    d.lowp = 3; /* not a tr_lowp */
    CHECK(ops->attention_fwd(&x, &x, &x, &x, &x, &d) == TR_ERR_INVALID);
    d.lowp = TR_LOWP_BF16;
    /* doc_start_trusted allows skipping the check; the CPU still validates (it costs nothing) */
    float buf[4 * 3 * 4] = {0}, lse[3 * 4];
    int32_t bad_doc[4] = {0, 0, 1, 1};
    d.causal = 1, d.doc_start = bad_doc, d.doc_start_trusted = 1;
    CHECK(ops->attention_fwd(buf, lse, buf, buf, buf, &d) == TR_ERR_INVALID);
}

TR_TEST_MAIN(TR_TEST(test_matches_naive), TR_TEST(test_block_sizes_agree),
             TR_TEST(test_gqa_equals_repeated_mha), TR_TEST(test_all_isa_variants),
             TR_TEST(test_lowp_is_exact_on_cpu), TR_TEST(test_invalid_args))
