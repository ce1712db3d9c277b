/* Dropout on the attention probabilities (tr_attn_desc.dropout), CPU op:
 *  - against a naive O(T^2) attention in double whose mask comes from this file's own
 *    Philox-4x32-10 and the counter layout documented in kernels/common/attn_dropout.h (forward,
 *    lse and all three gradients; causal, full, GQA, documents, a TP shard's head offset, tiles);
 *  - finite differences of sum(out * w) with the mask fixed (same seed and coordinates in every
 *    evaluation), against the op's backward;
 *  - statistics: with one-hot values the output is the dropped probability matrix itself, so the
 *    kept fraction is counted (1 - p) and masks of other heads, rows, layers, rounds, seeds and
 *    neighbouring positions are compared (independent: they agree on p^2 + (1-p)^2 of entries);
 *  - a TP rank's heads (head_offset) give the full op's results bitwise; dropout 0 ignores the
 *    other fields (bitwise the plain op); invalid arguments are refused. */
#include <string.h>

#include "kernels/common/philox.h"
#include "tests/unit/kernels/test_ops_util.h"

#define ops (tr_ops_cpu())

/* ---- the mask, written from the published algorithm (Salmon et al., SC'11) ---------------- */

static void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

static void ref_philox(uint32_t x[4], uint64_t key) {
    uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(0xD2511F53u, x[0], &hi0, &lo0);
        mulhilo(0xCD9E8D57u, x[2], &hi1, &lo1);
        uint32_t y[4] = {hi1 ^ x[1] ^ k[0], lo1, hi0 ^ x[3] ^ k[1], lo0};
        memcpy(x, y, sizeof y);
        k[0] += 0x9E3779B9u, k[1] += 0xBB67AE85u;
    }
}

/* Counter (key / 2, query / 2, 1 << 31 | layer << 16 | global head, batch row), key seed ^ (round
 * * 0x9E3779B97F4A7C15), word (query % 2) * 2 + key % 2, kept when its top 24 bits / 2^24 >= p. */
static int ref_kept(const tr_attn_desc *d, int b, int h, int q, int k) {
    uint32_t x[4] = {(uint32_t)k / 2, (uint32_t)q / 2,
                     0x80000000u | (uint32_t)d->dropout_layer << 16 |
                         (uint32_t)(d->head_offset + h),
                     (uint32_t)b};
    ref_philox(x, d->dropout_seed ^ (d->dropout_round * 0x9E3779B97F4A7C15ull));
    return (double)(x[(q % 2) * 2 + k % 2] >> 8) / 16777216.0 >= (double)d->dropout;
}

/* Random123's known answers for a full counter, for both Philox implementations. */
static void test_philox_full_counter_known_answers(void) {
    static const uint32_t in[2][6] = {
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}};
    static const uint32_t out[2][4] = {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u},
                                       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}};
    for (int t = 0; t < 2; t++) {
        uint64_t key = (uint64_t)in[t][5] << 32 | in[t][4];
        tr_philox4 r = tr_philox4x32_10_ctr(in[t][0], in[t][1], in[t][2], in[t][3], key);
        uint32_t x[4] = {in[t][0], in[t][1], in[t][2], in[t][3]};
        ref_philox(x, key);
        for (int w = 0; w < 4; w++) {
            CHECK(r.v[w] == out[t][w]);
            CHECK(x[w] == out[t][w]);
        }
    }
}

/* ---- inputs ------------------------------------------------------------------------------- */

typedef struct drop_io {
    tr_attn_desc d;
    int64_t nq, nk, nl;
    float *q, *k, *v, *dout;
    int32_t *doc;
} drop_io;

static drop_io make_io(int B, int T, int H, int G, int D, int causal, float p, uint64_t seed) {
    rng_seed(seed);
    drop_io io = {.d = {.batch = B,
                        .seq = T,
                        .heads = H,
                        .groups = G,
                        .head_dim = D,
                        .scale = 1.0f / sqrtf((float)D),
                        .causal = causal,
                        .dropout = p,
                        .dropout_seed = 0x5eed0000u + seed,
                        .dropout_round = 3,
                        .dropout_layer = 1}};
    io.nq = (int64_t)B * T * H * D;
    io.nk = (int64_t)B * T * G * D;
    io.nl = (int64_t)B * H * T;
    io.q = rand_buf(io.nq, -2, 2);
    io.k = rand_buf(io.nk, -2, 2);
    io.v = rand_buf(io.nk, -1, 1);
    io.dout = rand_buf(io.nq, -1, 1);
    return io;
}

/* Packed documents of doc_len tokens in every row. */
static void set_docs(drop_io *io, int doc_len) {
    int B = io->d.batch, T = io->d.seq;
    io->doc = malloc(sizeof(int32_t) * (size_t)B * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) io->doc[b * T + t] = t / doc_len * doc_len;
    io->d.doc_start = io->doc;
}

static void free_io(drop_io *io) {
    free(io->q), free(io->k), free(io->v), free(io->dout), free(io->doc);
}

typedef struct drop_out {
    float *o, *lse, *dq, *dk, *dv;
} drop_out;

static drop_out run(const drop_io *io, const tr_attn_desc *d) {
    drop_out r = {zero_buf(io->nq), zero_buf(io->nl), zero_buf(io->nq), zero_buf(io->nk),
                  zero_buf(io->nk)};
    CHECK(ops->attention_fwd(r.o, r.lse, io->q, io->k, io->v, d) == TR_OK);
    CHECK(ops->attention_bwd(r.dq, r.dk, r.dv, io->dout, io->q, io->k, io->v, r.o, r.lse, d) ==
          TR_OK);
    return r;
}

static void free_out(drop_out *r) {
    free(r->o), free(r->lse), free(r->dq), free(r->dk), free(r->dv);
}

/* ---- the naive reference ------------------------------------------------------------------ */

static int visible(const tr_attn_desc *d, int b, int i, int j) {
    if (d->causal && j > i) return 0;
    return !d->doc_start || j >= d->doc_start[b * d->seq + i];
}

/* P = softmax(S), Pd = P M / (1 - p), O = Pd V; dV = Pd^T dO; dP = (dO V^T) M / (1 - p);
 * dS = P (dP - rowsum(P dP)) scale; dQ = dS K; dK = dS^T Q. All in double, the score matrix
 * whole; rowsum(P dP) is computed as written, not as rowsum(dO * O) as the op does. */
static void naive(const drop_io *io, double *o, double *lse, double *dq, double *dk, double *dv) {
    const tr_attn_desc *d = &io->d;
    int T = d->seq, D = d->head_dim, H = d->heads, G = d->groups, hpg = H / G;
    double ks = 1.0 / (1.0 - (double)d->dropout);
    double *P = malloc(sizeof(double) * T * T), *M = malloc(sizeof(double) * T * T);
    double *dP = malloc(sizeof(double) * T * T);
    memset(dk, 0, sizeof(double) * io->nk);
    memset(dv, 0, sizeof(double) * io->nk);
#define QI(b, t, h) (((int64_t)(b)*T + (t)) * H * D + (int64_t)(h)*D)
#define KI(b, t, g) (((int64_t)(b)*T + (t)) * G * D + (int64_t)(g)*D)
    for (int b = 0; b < d->batch; b++)
        for (int h = 0; h < H; h++) {
            int g = h / hpg;
            for (int i = 0; i < T; i++) {
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < T; j++) {
                    double s = -INFINITY;
                    if (visible(d, b, i, j)) {
                        s = 0;
                        for (int e = 0; e < D; e++)
                            s += (double)io->q[QI(b, i, h) + e] * io->k[KI(b, j, g) + e];
                        s *= d->scale;
                    }
                    P[i * T + j] = s;
                    mx = s > mx ? s : mx;
                    M[i * T + j] = ref_kept(d, b, h, i, j) ? ks : 0.0;
                }
                for (int j = 0; j < T; j++) sum += P[i * T + j] = exp(P[i * T + j] - mx);
                for (int j = 0; j < T; j++) P[i * T + j] /= sum;
                lse[((int64_t)b * H + h) * T + i] = mx + log(sum);
                for (int e = 0; e < D; e++) {
                    double acc = 0;
                    for (int j = 0; j < T; j++)
                        acc += P[i * T + j] * M[i * T + j] * io->v[KI(b, j, g) + e];
                    o[QI(b, i, h) + e] = acc;
                }
            }
            for (int i = 0; i < T; i++) {
                double rowsum = 0;
                for (int j = 0; j < T; j++) {
                    double s = 0;
                    for (int e = 0; e < D; e++)
                        s += (double)io->dout[QI(b, i, h) + e] * io->v[KI(b, j, g) + e];
                    dP[i * T + j] = s * M[i * T + j];
                    rowsum += P[i * T + j] * dP[i * T + j];
                }
                for (int e = 0; e < D; e++) dq[QI(b, i, h) + e] = 0;
                for (int j = 0; j < T; j++) {
                    double pd = P[i * T + j] * M[i * T + j];
                    double ds = P[i * T + j] * (dP[i * T + j] - rowsum) * d->scale;
                    for (int e = 0; e < D; e++) {
                        dv[KI(b, j, g) + e] += pd * io->dout[QI(b, i, h) + e];
                        dk[KI(b, j, g) + e] += ds * io->q[QI(b, i, h) + e];
                        dq[QI(b, i, h) + e] += ds * io->k[KI(b, j, g) + e];
                    }
                }
            }
        }
#undef QI
#undef KI
    free(P), free(M), free(dP);
}

/* The tolerance of test_ops_attention.c (errors against each tensor's largest entry); a wrong
 * mask entry moves an output by O(1e-2..1). */
#define NAIVE_TOL 5e-5
static void vs_naive(drop_io *io, int bq, int bk, const char *what) {
    double *o = malloc(sizeof(double) * io->nq), *lse = malloc(sizeof(double) * io->nl);
    double *dq = malloc(sizeof(double) * io->nq), *dk = malloc(sizeof(double) * io->nk),
           *dv = malloc(sizeof(double) * io->nk);
    naive(io, o, lse, dq, dk, dv);
    tr_attn_desc d = io->d;
    d.block_q = bq, d.block_k = bk;
    drop_out r = run(io, &d);
    double e[5] = {max_scaled_err_d(r.o, o, io->nq), max_scaled_err_d(r.lse, lse, io->nl),
                   max_scaled_err_d(r.dq, dq, io->nq), max_scaled_err_d(r.dk, dk, io->nk),
                   max_scaled_err_d(r.dv, dv, io->nk)};
    double worst = 0;
    for (int i = 0; i < 5; i++) worst = e[i] > worst ? e[i] : worst;
    printf("  naive %-22s block %3dx%-3d: o %.2g lse %.2g dq %.2g dk %.2g dv %.2g\n", what, bq, bk,
           e[0], e[1], e[2], e[3], e[4]);
    CHECK(worst <= NAIVE_TOL);
    free(o), free(lse), free(dq), free(dk), free(dv);
    free_out(&r);
}

static void test_matches_naive_with_own_mask(void) {
    drop_io a = make_io(2, 37, 6, 2, 16, 1, 0.1f, 11);
    vs_naive(&a, 0, 0, "causal GQA p=0.1");
    vs_naive(&a, 4, 7, "causal GQA p=0.1");
    free_io(&a);
    drop_io b = make_io(2, 37, 4, 2, 16, 0, 0.3f, 12);
    vs_naive(&b, 0, 0, "full GQA p=0.3");
    vs_naive(&b, 9, 5, "full GQA p=0.3");
    free_io(&b);
    drop_io c = make_io(1, 130, 4, 4, 32, 1, 0.5f, 13);
    vs_naive(&c, 0, 0, "causal MHA p=0.5");
    vs_naive(&c, 16, 32, "causal MHA p=0.5");
    free_io(&c);
    drop_io e = make_io(2, 50, 4, 1, 8, 1, 0.2f, 14);
    set_docs(&e, 13);
    vs_naive(&e, 0, 0, "documents MQA p=0.2");
    vs_naive(&e, 8, 8, "documents MQA p=0.2");
    free_io(&e);
    /* a TP rank's view: heads 3..5 of 9 */
    drop_io f = make_io(1, 29, 3, 1, 8, 1, 0.25f, 15);
    f.d.head_offset = 3, f.d.heads_total = 9, f.d.dropout_layer = 7, f.d.dropout_round = 1234567;
    vs_naive(&f, 0, 0, "head offset 3 of 9");
    free_io(&f);
}

/* ---- finite differences ------------------------------------------------------------------- */

typedef struct fd_ctx {
    drop_io *io;
    float *w, *o, *lse;
} fd_ctx;

static double fd_loss(void *vc) {
    fd_ctx *c = vc;
    CHECK(ops->attention_fwd(c->o, c->lse, c->io->q, c->io->k, c->io->v, &c->io->d) == TR_OK);
    return dot_w(c->o, c->w, c->io->nq);
}

/* The mask is a function of positions only, so with it fixed the loss is smooth in q, k, v. */
static void grad_case(int B, int T, int H, int G, int D, int causal, float p, int bq, int bk) {
    drop_io io = make_io(B, T, H, G, D, causal, p, 40 + T);
    io.d.block_q = bq, io.d.block_k = bk;
    float *w = io.dout; /* dL/dout of L = sum(out * w) */
    drop_out r = run(&io, &io.d);
    fd_ctx c = {&io, w, zero_buf(io.nq), zero_buf(io.nl)};
    int bad = grad_check("dq", fd_loss, &c, io.q, r.dq, io.nq, 60) +
              grad_check("dk", fd_loss, &c, io.k, r.dk, io.nk, 60) +
              grad_check("dv", fd_loss, &c, io.v, r.dv, io.nk, 60);
    CHECK_INT_EQ(bad, 0);
    free(c.o), free(c.lse);
    free_out(&r);
    free_io(&io);
}

static void test_gradients_by_finite_differences(void) {
    grad_case(1, 11, 2, 2, 4, 1, 0.3f, 4, 4); /* causal MHA, tiles */
    grad_case(2, 9, 4, 2, 6, 1, 0.25f, 0, 0); /* causal GQA */
    grad_case(1, 10, 4, 1, 4, 0, 0.5f, 3, 4); /* full MQA */
}

/* ---- statistics --------------------------------------------------------------------------- */

/* V = identity (D = T, one group): out[b, i, h, :] is row i of P M / (1 - p) exactly, so a zero
 * is a dropped entry (P itself is never 0 for these small scores). */
typedef struct pmat {
    int B, T, H;
    float *o, *lse;
} pmat;

static pmat probs(const tr_attn_desc *base, const float *q, const float *k, const float *v) {
    pmat m = {base->batch, base->seq, base->heads, NULL, NULL};
    int64_t n = (int64_t)m.B * m.T * m.H * m.T;
    m.o = zero_buf(n), m.lse = zero_buf((int64_t)m.B * m.H * m.T);
    CHECK(ops->attention_fwd(m.o, m.lse, q, k, v, base) == TR_OK);
    return m;
}

static int dropped(const pmat *m, int b, int h, int i, int j) {
    return m->o[(((int64_t)b * m->T + i) * m->H + h) * m->T + j] == 0.0f;
}

/* The fraction of entries on which two masks agree (both kept or both dropped). */
static double agreement(const pmat *a, int ba, int ha, const pmat *b, int bb, int hb, int di,
                        int dj) {
    int64_t same = 0, n = 0;
    for (int i = 0; i + di < a->T; i++)
        for (int j = 0; j + dj < a->T; j++, n++)
            same += dropped(a, ba, ha, i, j) == dropped(b, bb, hb, i + di, j + dj);
    return (double)same / (double)n;
}

static void test_mask_statistics(void) {
    enum { B = 2, T = 192, H = 4 };
    rng_seed(77);
    float *q = rand_buf((int64_t)B * T * H * T, -0.5f, 0.5f);
    float *k = rand_buf((int64_t)B * T * T, -0.5f, 0.5f);
    float *v = zero_buf((int64_t)B * T * T);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T; j++) v[((int64_t)b * T + j) * T + j] = 1.0f;
    tr_attn_desc d = {.batch = B,
                      .seq = T,
                      .heads = H,
                      .groups = 1,
                      .head_dim = T,
                      .scale = 1.0f / sqrtf((float)T),
                      .dropout_seed = 99,
                      .dropout_round = 5,
                      .dropout_layer = 2,
                      .head_offset = 4,
                      .heads_total = 8};
    pmat ref = probs(&d, q, k, v);
    const float ps[] = {0.1f, 0.5f};
    for (int pi = 0; pi < 2; pi++) {
        float p = ps[pi];
        d.dropout = p;
        pmat m = probs(&d, q, k, v);
        int64_t n = (int64_t)B * H * T * T, kept = 0, wrong_mask = 0, wrong_value = 0;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < T; i++)
                    for (int j = 0; j < T; j++) {
                        int64_t at = (((int64_t)b * T + i) * H + h) * T + j;
                        int keep = !dropped(&m, b, h, i, j);
                        kept += keep;
                        wrong_mask += keep != ref_kept(&d, b, h, i, j);
                        double want = keep ? ref.o[at] / (1.0 - p) : 0.0;
                        wrong_value += fabs(m.o[at] - want) > 1e-6 * fabs(want);
                    }
        double frac = (double)kept / (double)n, sigma = sqrt(p * (1.0 - p) / (double)n);
        printf("  p=%.2f: kept %.5f of %lld entries (1-p = %.2f, sigma %.1e)\n", p, frac,
               (long long)n, 1.0 - p, sigma);
        CHECK(fabs(frac - (1.0 - p)) < 5 * sigma);
        CHECK_INT_EQ(wrong_mask, 0);
        CHECK_INT_EQ(wrong_value, 0);
        /* lse is the undropped softmax's, bitwise */
        CHECK(memcmp(m.lse, ref.lse, sizeof(float) * (size_t)B * H * T) == 0);
        free(m.o), free(m.lse);
    }
    /* Independence at p = 0.5: two independent masks agree on half the entries (sigma over
     * T^2 entries ~1.3e-3), one mask with itself on all. */
    d.dropout = 0.5f;
    pmat base = probs(&d, q, k, v);
    double want = 0.5, tol = 0.01;
    CHECK(agreement(&base, 0, 0, &base, 0, 0, 0, 0) == 1.0);
    double a_head = agreement(&base, 0, 0, &base, 0, 1, 0, 0);
    double a_row = agreement(&base, 0, 2, &base, 1, 2, 0, 0);
    double a_q = agreement(&base, 0, 0, &base, 0, 0, 1, 0); /* query i against i + 1 */
    double a_k = agreement(&base, 1, 3, &base, 1, 3, 0, 1); /* key j against j + 1 */
    double a_q2 = agreement(&base, 0, 1, &base, 0, 1, 2, 0);
    tr_attn_desc o = d;
    o.dropout_layer = 3;
    pmat layer = probs(&o, q, k, v);
    o = d, o.dropout_round = 6;
    pmat round = probs(&o, q, k, v);
    o = d, o.dropout_seed = 100;
    pmat seed = probs(&o, q, k, v);
    o = d, o.head_offset = 0; /* heads 0..3 instead of 4..7 */
    pmat heads = probs(&o, q, k, v);
    double a_layer = agreement(&base, 0, 0, &layer, 0, 0, 0, 0);
    double a_round = agreement(&base, 1, 1, &round, 1, 1, 0, 0);
    double a_seed = agreement(&base, 0, 2, &seed, 0, 2, 0, 0);
    double a_goff = agreement(&base, 0, 0, &heads, 0, 0, 0, 0);
    printf("  agreement at p=0.5 (independent: 0.5): head %.4f row %.4f query+1 %.4f key+1 %.4f "
           "query+2 %.4f layer %.4f round %.4f seed %.4f head offset %.4f\n",
           a_head, a_row, a_q, a_k, a_q2, a_layer, a_round, a_seed, a_goff);
    double all[] = {a_head, a_row, a_q, a_k, a_q2, a_layer, a_round, a_seed, a_goff};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CHECK(fabs(all[i] - want) < tol);
    pmat *ms[] = {&base, &layer, &round, &seed, &heads};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) free(ms[i]->o), free(ms[i]->lse);
    free(ref.o), free(ref.lse), free(q), free(k), free(v);
}

/* ---- layouts and the off switch ----------------------------------------------------------- */

static float *slice(const float *x, int rows, int width, int from, int n) {
    float *r = malloc(sizeof(float) * (size_t)rows * n);
    for (int t = 0; t < rows; t++)
        memcpy(r + (int64_t)t * n, x + (int64_t)t * width + from, sizeof(float) * (size_t)n);
    return r;
}

/* TP rank 1 of 2 holds query group 1 and its heads 2, 3 (of 4): with head_offset 2 it draws the
 * full op's masks for them, so out, lse and every gradient are bitwise the full op's slice. */
static void test_tp_shard_bitwise(void) {
    int B = 2, T = 40, H = 4, G = 2, D = 8;
    drop_io full = make_io(B, T, H, G, D, 1, 0.2f, 21);
    drop_out rf = run(&full, &full.d);
    int rows = B * T;
    drop_io sh = full;
    sh.d.heads = 2, sh.d.groups = 1, sh.d.head_offset = 2, sh.d.heads_total = 4;
    sh.nq = full.nq / 2, sh.nk = full.nk / 2, sh.nl = full.nl / 2;
    sh.q = slice(full.q, rows, H * D, 2 * D, 2 * D);
    sh.dout = slice(full.dout, rows, H * D, 2 * D, 2 * D);
    sh.k = slice(full.k, rows, G * D, D, D);
    sh.v = slice(full.v, rows, G * D, D, D);
    drop_out rs = run(&sh, &sh.d);
    float *o = slice(rf.o, rows, H * D, 2 * D, 2 * D),
          *dq = slice(rf.dq, rows, H * D, 2 * D, 2 * D);
    float *dk = slice(rf.dk, rows, G * D, D, D), *dv = slice(rf.dv, rows, G * D, D, D);
    CHECK(memcmp(rs.o, o, sizeof(float) * (size_t)sh.nq) == 0);
    CHECK(memcmp(rs.dq, dq, sizeof(float) * (size_t)sh.nq) == 0);
    CHECK(memcmp(rs.dk, dk, sizeof(float) * (size_t)sh.nk) == 0);
    CHECK(memcmp(rs.dv, dv, sizeof(float) * (size_t)sh.nk) == 0);
    for (int b = 0; b < B; b++) /* lse [B, H, T]: heads 2, 3 of each row */
        CHECK(memcmp(rs.lse + (int64_t)b * 2 * T, rf.lse + ((int64_t)b * H + 2) * T,
                     sizeof(float) * 2 * (size_t)T) == 0);
    /* and without the offset the shard would draw heads 0, 1's masks: different results */
    sh.d.head_offset = 0;
    drop_out wrong = run(&sh, &sh.d);
    CHECK(memcmp(wrong.o, o, sizeof(float) * (size_t)sh.nq) != 0);
    free(o), free(dq), free(dk), free(dv), free(sh.q), free(sh.dout), free(sh.k), free(sh.v);
    free_out(&rf), free_out(&rs), free_out(&wrong);
    free_io(&full);
}

/* dropout 0 (evaluation, or p = 0): bitwise the op without the dropout fields; the same
 * coordinates twice give the same bits. */
static void test_off_and_deterministic(void) {
    drop_io io = make_io(2, 45, 4, 2, 16, 1, 0.0f, 31);
    tr_attn_desc plain = io.d;
    plain.dropout_seed = 0, plain.dropout_round = 0, plain.dropout_layer = 0;
    drop_out a = run(&io, &io.d), b = run(&io, &plain);
    CHECK(memcmp(a.o, b.o, sizeof(float) * (size_t)io.nq) == 0);
    CHECK(memcmp(a.dq, b.dq, sizeof(float) * (size_t)io.nq) == 0);
    CHECK(memcmp(a.dk, b.dk, sizeof(float) * (size_t)io.nk) == 0);
    CHECK(memcmp(a.dv, b.dv, sizeof(float) * (size_t)io.nk) == 0);
    io.d.dropout = 0.1f;
    drop_out c = run(&io, &io.d), e = run(&io, &io.d);
    CHECK(memcmp(c.o, e.o, sizeof(float) * (size_t)io.nq) == 0);
    CHECK(memcmp(c.dk, e.dk, sizeof(float) * (size_t)io.nk) == 0);
    CHECK(memcmp(c.o, a.o, sizeof(float) * (size_t)io.nq) != 0);
    free_out(&a), free_out(&b), free_out(&c), free_out(&e);
    free_io(&io);
}

static void test_invalid_dropout_args(void) {
    float buf[2 * 4 * 4] = {0}, lse[2 * 4];
    tr_attn_desc ok = {.batch = 1,
                       .seq = 4,
                       .heads = 2,
                       .groups = 1,
                       .head_dim = 4,
                       .scale = 0.5f,
                       .causal = 1,
                       .dropout = 0.1f,
                       .head_offset = 2,
                       .heads_total = 4};
    CHECK(ops->attention_fwd(buf, lse, buf, buf, buf, &ok) == TR_OK);
    tr_attn_desc bad[8];
    for (int i = 0; i < 8; i++) bad[i] = ok;
    bad[0].dropout = 1.0f;
    bad[1].dropout = -0.1f;
    bad[2].dropout = NAN;
    bad[3].dropout_layer = -1;
    bad[4].dropout_layer = 32768;
    bad[5].head_offset = 3; /* heads 3, 4 of 4 */
    bad[6].heads_total = 65537, bad[6].head_offset = 0;
    bad[7].head_offset = -1;
    for (int i = 0; i < 8; i++) {
        CHECK(ops->attention_fwd(buf, lse, buf, buf, buf, &bad[i]) == TR_ERR_INVALID);
        CHECK(ops->attention_bwd(buf, buf, buf, buf, buf, buf, buf, buf, lse, &bad[i]) ==
              TR_ERR_INVALID);
    }
}

TR_TEST_MAIN(TR_TEST(test_philox_full_counter_known_answers),
             TR_TEST(test_matches_naive_with_own_mask),
             TR_TEST(test_gradients_by_finite_differences), TR_TEST(test_mask_statistics),
             TR_TEST(test_tp_shard_bitwise), TR_TEST(test_off_and_deterministic),
             TR_TEST(test_invalid_dropout_args))
