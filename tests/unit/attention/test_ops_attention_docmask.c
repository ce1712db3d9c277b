/* Document-masked causal attention (tr_attn_desc.doc_start, packed sequences): the packed op must
 * give, for every document, what the plain causal op gives on that document alone; gradients
 * must match central differences; a single document must be exactly the unmasked op; invalid
 * doc_start arrays are rejected without touching the outputs. */
#include <string.h>

#include "kernels/cpu/simd/simd.h"
#include "tests/unit/kernels/test_ops_util.h"

#define ops      (tr_ops_cpu())
#define MAX_DOCS 128

/* A packing of one batch row: document lengths, 0-terminated. */
typedef struct packing {
    int len[MAX_DOCS];
} packing;

typedef struct packed_io {
    tr_attn_desc d;
    int64_t nq, nk, nl;
    float *q, *k, *v, *dout;
    int32_t *ds;
} packed_io;

typedef struct attn_out {
    float *o, *lse, *dq, *dk, *dv;
} attn_out;

static int packing_seq(const packing *p) {
    int t = 0;
    for (int i = 0; p->len[i]; i++) t += p->len[i];
    return t;
}

static packed_io make_packed(int B, const packing *rows, int H, int G, int D, uint64_t seed) {
    int T = packing_seq(&rows[0]);
    rng_seed(seed);
    packed_io io = {.d = {.batch = B,
                          .seq = T,
                          .heads = H,
                          .groups = G,
                          .head_dim = D,
                          .scale = 1.0f / sqrtf((float)D),
                          .causal = 1}};
    io.nq = (int64_t)B * T * H * D;
    io.nk = (int64_t)B * T * G * D;
    io.nl = (int64_t)B * H * T;
    io.q = rand_buf(io.nq, -2, 2);
    io.k = rand_buf(io.nk, -2, 2);
    io.v = rand_buf(io.nk, -1, 1);
    io.dout = rand_buf(io.nq, -1, 1);
    io.ds = malloc(sizeof(int32_t) * (size_t)B * T);
    for (int b = 0; b < B; b++) {
        CHECK_INT_EQ(packing_seq(&rows[b]), T); /* the case table itself must be consistent */
        int t = 0;
        for (int i = 0; rows[b].len[i]; i++)
            for (int j = 0; j < rows[b].len[i]; j++, t++) io.ds[(int64_t)b * T + t] = t - j;
    }
    io.d.doc_start = io.ds;
    return io;
}

static void free_io(packed_io *io) {
    free(io->q), free(io->k), free(io->v), free(io->dout), free(io->ds);
}

static attn_out alloc_out(int64_t nq, int64_t nk, int64_t nl) {
    return (attn_out){zero_buf(nq), zero_buf(nl), zero_buf(nq), zero_buf(nk), zero_buf(nk)};
}

static void free_out(attn_out *r) {
    free(r->o), free(r->lse), free(r->dq), free(r->dk), free(r->dv);
}

static attn_out run_packed(const packed_io *io, const int32_t *ds, int bq, int bk) {
    attn_out r = alloc_out(io->nq, io->nk, io->nl);
    tr_attn_desc d = io->d;
    d.doc_start = ds;
    d.block_q = bq;
    d.block_k = bk;
    CHECK(ops->attention_fwd(r.o, r.lse, io->q, io->k, io->v, &d) == TR_OK);
    CHECK(ops->attention_bwd(r.dq, r.dk, r.dv, io->dout, io->q, io->k, io->v, r.o, r.lse, &d) ==
          TR_OK);
    return r;
}

/* The reference: every document run on its own through the unmasked causal op. Tokens of a row
 * are contiguous in [B, T, ...], so a document's q/k/v/dout/out/dq/dk/dv are plain sub-ranges;
 * only lse [B, H, T] needs a gather. */
static attn_out run_separately(const packed_io *io, const packing *rows, int bq, int bk) {
    const tr_attn_desc *pd = &io->d;
    int T = pd->seq, H = pd->heads, G = pd->groups, D = pd->head_dim;
    attn_out r = alloc_out(io->nq, io->nk, io->nl);
    float *lse = malloc(sizeof(float) * (size_t)H * T);
    for (int b = 0; b < pd->batch; b++) {
        int s = 0;
        for (int i = 0; rows[b].len[i]; s += rows[b].len[i], i++) {
            int L = rows[b].len[i];
            tr_attn_desc d = {.batch = 1,
                              .seq = L,
                              .heads = H,
                              .groups = G,
                              .head_dim = D,
                              .scale = pd->scale,
                              .causal = 1,
                              .block_q = bq,
                              .block_k = bk};
            int64_t qo = ((int64_t)b * T + s) * H * D, ko = ((int64_t)b * T + s) * G * D;
            CHECK(ops->attention_fwd(r.o + qo, lse, io->q + qo, io->k + ko, io->v + ko, &d) ==
                  TR_OK);
            CHECK(ops->attention_bwd(r.dq + qo, r.dk + ko, r.dv + ko, io->dout + qo, io->q + qo,
                                     io->k + ko, io->v + ko, r.o + qo, lse, &d) == TR_OK);
            for (int h = 0; h < H; h++)
                memcpy(r.lse + ((int64_t)b * H + h) * T + s, lse + (int64_t)h * L,
                       sizeof(float) * (size_t)L);
        }
    }
    free(lse);
    return r;
}

/* Only the summation order of the online softmax and of the dK/dV/dQ tile sums differs between
 * the packed and the separate runs (tiles are cut at different places), so they agree to a few
 * fp32 roundings of each tensor's scale; a mask leak or a dropped key is O(1e-2..1). */
#define SEPARATE_TOL 1e-6

static int compare_separate(const char *what, const packed_io *io, const packing *rows, int bq,
                            int bk) {
    attn_out a = run_packed(io, io->ds, bq, bk), e = run_separately(io, rows, bq, bk);
    double eo = max_scaled_err(a.o, e.o, io->nq), el = max_scaled_err(a.lse, e.lse, io->nl);
    double eq = max_scaled_err(a.dq, e.dq, io->nq), ek = max_scaled_err(a.dk, e.dk, io->nk),
           ev = max_scaled_err(a.dv, e.dv, io->nk);
    int ok = eo <= SEPARATE_TOL && el <= SEPARATE_TOL && eq <= SEPARATE_TOL && ek <= SEPARATE_TOL &&
             ev <= SEPARATE_TOL;
    if (!ok)
        fprintf(stderr, "  %s H=%d G=%d block %dx%d: o %.2g lse %.2g dq %.2g dk %.2g dv %.2g\n",
                what, io->d.heads, io->d.groups, bq, bk, eo, el, eq, ek, ev);
    free_out(&a), free_out(&e);
    return ok;
}

/* Two rows per case (different packings in one batch exercise the per-row doc_start offset). */
typedef struct pack_case {
    const char *name;
    packing rows[2];
} pack_case;

static const pack_case k_cases[] = {
    {"one doc | singles then a long doc", {{{37}}, {{1, 1, 1, 5, 29}}}},
    {"docs crossing blocks", {{{13, 50, 7, 1, 9}}, {{1, 79}}}},
    {"all single-token docs",
     {{{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}}, {{19, 1}}}},
    {"block-aligned and off-by-one", {{{64, 64}}, {{63, 2, 63}}}},
    {"three near-equal docs", {{{33, 33, 34}}, {{2, 97, 1}}}},
};
#define N_CASES ((int)(sizeof k_cases / sizeof k_cases[0]))

static const int k_blocks[][2] = {{1, 1},  {2, 3},  {4, 7},   {8, 8},   {16, 16},
                                  {5, 64}, {64, 3}, {17, 32}, {64, 64}, {0, 0}};
#define N_BLOCKS ((int)(sizeof k_blocks / sizeof k_blocks[0]))

static void test_equals_separate_documents(void) {
    static const int heads_groups[][2] = {{6, 2}, {4, 1}, {3, 3}};
    for (int c = 0; c < N_CASES; c++)
        for (int hg = 0; hg < 3; hg++) {
            packed_io io = make_packed(2, k_cases[c].rows, heads_groups[hg][0], heads_groups[hg][1],
                                       16, 500 + (uint64_t)c * 7 + hg);
            for (int s = 0; s < N_BLOCKS; s++)
                CHECK(compare_separate(k_cases[c].name, &io, k_cases[c].rows, k_blocks[s][0],
                                       k_blocks[s][1]));
            free_io(&io);
        }
}

/* One document per row is the plain causal op, tile for tile: identical bits. */
static void test_single_document_is_unmasked(void) {
    packing one[2] = {{{45}}, {{45}}};
    packed_io io = make_packed(2, one, 4, 2, 24, 600);
    for (int s = 0; s < N_BLOCKS; s++) {
        attn_out a = run_packed(&io, io.ds, k_blocks[s][0], k_blocks[s][1]);
        attn_out b = run_packed(&io, NULL, k_blocks[s][0], k_blocks[s][1]);
        CHECK(!memcmp(a.o, b.o, sizeof(float) * (size_t)io.nq));
        CHECK(!memcmp(a.lse, b.lse, sizeof(float) * (size_t)io.nl));
        CHECK(!memcmp(a.dq, b.dq, sizeof(float) * (size_t)io.nq));
        CHECK(!memcmp(a.dk, b.dk, sizeof(float) * (size_t)io.nk));
        CHECK(!memcmp(a.dv, b.dv, sizeof(float) * (size_t)io.nk));
        free_out(&a), free_out(&b);
    }
    free_io(&io);
}

/* With documents on tile boundaries, no tile mixes two documents: forward and dQ skip the key
 * blocks before a query block's document, dK/dV skip the query blocks after a key block's
 * document. So NaN in one document's inputs leaves the other bit-identical to a clean run. */
static int same(const float *a, const float *b, int64_t n) {
    return !memcmp(a, b, sizeof(float) * (size_t)n);
}

static void test_skipped_blocks_are_not_read(void) {
    enum { T = 64, H = 4, G = 2, D = 8, S = 32 }; /* documents [0, 32) and [32, 64) */
    packing rows[1] = {{{S, T - S}}};
    packed_io io = make_packed(1, rows, H, G, D, 700);
    attn_out clean = run_packed(&io, io.ds, 16, 16);
    int64_t q1 = (int64_t)S * H * D, k1 = (int64_t)S * G * D;

    /* K, V of document 0 poisoned: document 1's out, lse, dq, dk, dv unchanged */
    float *k = io.k, *v = io.v;
    io.k = malloc(sizeof(float) * (size_t)io.nk), io.v = malloc(sizeof(float) * (size_t)io.nk);
    memcpy(io.k, k, sizeof(float) * (size_t)io.nk), memcpy(io.v, v, sizeof(float) * (size_t)io.nk);
    for (int64_t i = 0; i < k1; i++) io.k[i] = io.v[i] = NAN;
    attn_out r = run_packed(&io, io.ds, 16, 16);
    CHECK(isnan(r.o[0])); /* the poison reached document 0, so the checks have teeth */
    CHECK(same(r.o + q1, clean.o + q1, io.nq - q1) && same(r.dq + q1, clean.dq + q1, io.nq - q1));
    CHECK(same(r.dk + k1, clean.dk + k1, io.nk - k1) && same(r.dv + k1, clean.dv + k1, io.nk - k1));
    for (int h = 0; h < H; h++) CHECK(same(r.lse + h * T + S, clean.lse + h * T + S, T - S));
    free_out(&r);
    free(io.k), free(io.v);
    io.k = k, io.v = v;

    /* Q and dO of document 1 poisoned: document 0's out, lse, dq, dk, dv unchanged */
    for (int64_t i = q1; i < io.nq; i++) io.q[i] = io.dout[i] = NAN;
    r = run_packed(&io, io.ds, 16, 16);
    CHECK(isnan(r.dk[k1]));
    CHECK(same(r.o, clean.o, q1) && same(r.dq, clean.dq, q1));
    CHECK(same(r.dk, clean.dk, k1) && same(r.dv, clean.dv, k1));
    for (int h = 0; h < H; h++) CHECK(same(r.lse + h * T, clean.lse + h * T, S));
    free_out(&r);
    free_out(&clean);
    free_io(&io);
}

typedef struct fd_ctx {
    packed_io *io;
    float *w, *o, *lse;
} fd_ctx;

static double fd_loss(void *vc) {
    fd_ctx *c = vc;
    tr_attn_desc d = c->io->d;
    d.block_q = d.block_k = 4;
    CHECK(ops->attention_fwd(c->o, c->lse, c->io->q, c->io->k, c->io->v, &d) == TR_OK);
    return dot_w(c->o, c->w, c->io->nq);
}

/* Central differences of sum(out * w) over every element of q, k and v. */
static void test_gradients_match_finite_differences(void) {
    packing rows[2] = {{{5, 1, 6}}, {{1, 3, 1, 7}}};
    packed_io io = make_packed(2, rows, 2, 1, 4, 800);
    attn_out r = run_packed(&io, io.ds, 4, 4);
    fd_ctx c = {&io, io.dout, zero_buf(io.nq), zero_buf(io.nl)};
    CHECK_INT_EQ(grad_check("dq", fd_loss, &c, io.q, r.dq, io.nq, (int)io.nq), 0);
    CHECK_INT_EQ(grad_check("dk", fd_loss, &c, io.k, r.dk, io.nk, (int)io.nk), 0);
    CHECK_INT_EQ(grad_check("dv", fd_loss, &c, io.v, r.dv, io.nk, (int)io.nk), 0);
    free(c.o), free(c.lse);
    free_out(&r);
    free_io(&io);
}

static void test_all_isa_variants(void) {
    static const char *isas[] = {"generic", "avx2", "avx512"};
    const tr_cpu_simd *orig = tr_cpu_simd_active();
    int ran = 0;
    for (int i = 0; i < 3; i++) {
        if (tr_cpu_simd_select(isas[i]) != TR_OK) continue;
        ran++;
        for (int c = 1; c < N_CASES; c += 2) {
            packed_io io = make_packed(2, k_cases[c].rows, 6, 2, 32, 900 + (uint64_t)c);
            CHECK(compare_separate(isas[i], &io, k_cases[c].rows, 16, 16));
            CHECK(compare_separate(isas[i], &io, k_cases[c].rows, 5, 64));
            CHECK(compare_separate(isas[i], &io, k_cases[c].rows, 0, 0));
            free_io(&io);
        }
    }
    CHECK(ran >= 1);
    CHECK(tr_cpu_simd_select(orig->isa) == TR_OK);
}

/* Runs forward and backward with doc_start `ds` (batch 2, seq 4); TR_OK or the first error. The
 * output buffers must be untouched whenever the call is rejected. */
static tr_status try_doc_start(const int32_t *ds, int causal) {
    enum { B = 2, T = 4, H = 2, D = 4, N = B * T * H * D };
    float q[N], o[N], lse[B * H * T], dq[N], dk[N], dv[N];
    for (int i = 0; i < N; i++) q[i] = (float)(i % 7) * 0.25f, o[i] = dq[i] = dk[i] = -7.0f;
    tr_attn_desc d = {.batch = B,
                      .seq = T,
                      .heads = H,
                      .groups = H,
                      .head_dim = D,
                      .scale = 0.5f,
                      .causal = causal,
                      .doc_start = ds};
    tr_status fs = ops->attention_fwd(o, lse, q, q, q, &d);
    tr_status bs = ops->attention_bwd(dq, dk, dv, q, q, q, q, o, lse, &d);
    if (fs != bs) return TR_ERR_INTERNAL; /* forward and backward must agree on validity */
    if (fs != TR_OK)
        for (int i = 0; i < N; i++)
            if (o[i] != -7.0f || dq[i] != -7.0f || dk[i] != -7.0f) return TR_ERR_INTERNAL;
    return fs;
}

static void test_invalid_doc_start_rejected(void) {
    static const int32_t ok_one_doc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    static const int32_t ok_singles[8] = {0, 1, 2, 3, 0, 1, 2, 3};
    static const int32_t ok_mixed[8] = {0, 0, 2, 2, 0, 1, 1, 3};
    CHECK(try_doc_start(ok_one_doc, 1) == TR_OK);
    CHECK(try_doc_start(ok_singles, 1) == TR_OK);
    CHECK(try_doc_start(ok_mixed, 1) == TR_OK);

    CHECK(try_doc_start(ok_mixed, 0) == TR_ERR_INVALID); /* documents need the causal mask */
    static const int32_t bad[][8] = {
        {1, 1, 1, 1, 0, 0, 0, 0},  /* row does not start at 0 */
        {0, 0, 3, 3, 0, 0, 0, 0},  /* start after the token (3 > 2) */
        {0, -1, 0, 0, 0, 0, 0, 0}, /* negative */
        {0, 1, 2, 1, 0, 0, 0, 0},  /* decreasing */
        {0, 0, 1, 1, 0, 0, 0, 0},  /* document 1 claims to start inside document 0 */
        {0, 0, 2, 2, 0, 2, 2, 2},  /* valid row 0, row 1 starts at 2 */
        {0, 0, 2, 2, 0, 1, 1, 2},  /* row 1: a start that is neither t nor the previous one */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tr_status st = try_doc_start(bad[i], 1);
        if (st != TR_ERR_INVALID) fprintf(stderr, "  bad doc_start case %zu accepted\n", i);
        CHECK(st == TR_ERR_INVALID);
    }
}

TR_TEST_MAIN(TR_TEST(test_equals_separate_documents), TR_TEST(test_single_document_is_unmasked),
             TR_TEST(test_skipped_blocks_are_not_read),
             TR_TEST(test_gradients_match_finite_differences), TR_TEST(test_all_isa_variants),
             TR_TEST(test_invalid_doc_start_rejected))
