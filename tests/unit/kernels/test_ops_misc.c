/* Optimizers, dropout RNG, RoPE frequency tables, vocab-sharded embeddings and the flat-buffer
 * helpers and the row/column reductions, each checked against values derived independently in
 * the test. */
#include <string.h>

#include "kernels/common/philox.h"
#include "kernels/cpu/simd/simd.h"
#include "tests/unit/kernels/test_ops_util.h"

#define ops (tr_ops_cpu())

/* AdamW, two steps on two parameters, written out from the published update rule:
 *   p <- p - lr*wd*p;  m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2
 *   p <- p - lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 * lr = 0.1, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1, p0 = (1, -2), g1 = (0.5, -1), g2 = (1, 2).
 * Step 1: decayed p = (0.99, -1.98); m = (0.05, -0.1); v = (0.0025, 0.01);
 *   mhat = g1, vhat = g1^2, so the step is lr*sign(g1)*(1 - ~2e-8): p1 = (0.89, -1.88).
 * Step 2: decayed p = (0.8811, -1.8612); m = (0.145, 0.11); v = (0.012475, 0.0499);
 *   mhat = m/0.19 = (0.763157895, 0.578947368); vhat = v/0.0199 = (0.626884422, 2.507537688);
 *   sqrt(vhat) = (0.791760332, 1.583520663); ratio = (0.963875, 0.365608);
 *   p2 = (0.8811 - 0.0963875, -1.8612 - 0.0365608) = (0.7847125, -1.8977608). */
static void test_adamw_two_steps(void) {
    float p[2] = {1.0f, -2.0f}, m[2] = {0, 0}, v[2] = {0, 0};
    float g1[2] = {0.5f, -1.0f}, g2[2] = {1.0f, 2.0f};
    tr_adamw_params hp = {
        .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.1f, .step = 1};
    CHECK(ops->adamw(p, g1, m, v, 2, &hp) == TR_OK);
    CHECK_CLOSE(p[0], 0.89, 1e-6, 1e-7);
    CHECK_CLOSE(p[1], -1.88, 1e-6, 1e-7);
    hp.step = 2;
    CHECK(ops->adamw(p, g2, m, v, 2, &hp) == TR_OK);
    CHECK_CLOSE(m[0], 0.145, 1e-6, 0);
    CHECK_CLOSE(v[1], 0.0499, 1e-6, 0);
    CHECK_CLOSE(p[0], 0.7847125, 2e-6, 0);
    CHECK_CLOSE(p[1], -1.8977608, 2e-6, 0);
    hp.step = 0;
    CHECK(ops->adamw(p, g2, m, v, 2, &hp) == TR_ERR_INVALID);
}

/* SGD, momentum 0.9, wd 0.01, lr 0.1, p0 = 2, g = 1 then 3:
 *   step 1: d = 1 + 0.02 = 1.02; buf = 1.02; p = 2 - 0.102 = 1.898
 *   step 2: d = 3 + 0.01898 = 3.01898; buf = 0.918 + 3.01898 = 3.93698; p = 1.898 - 0.393698
 *   nesterov step 1: update d + 0.9*buf = 1.938; p = 2 - 0.1938 = 1.8062 */
static void test_sgd_momentum(void) {
    float p = 2.0f, buf = 0.0f, g = 1.0f;
    tr_sgd_params hp = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
    CHECK(ops->sgd(&p, &g, &buf, 1, &hp) == TR_OK);
    CHECK_CLOSE(p, 1.898, 1e-6, 0);
    g = 3.0f;
    CHECK(ops->sgd(&p, &g, &buf, 1, &hp) == TR_OK);
    CHECK_CLOSE(buf, 3.93698, 1e-6, 0);
    CHECK_CLOSE(p, 1.898 - 0.393698, 1e-6, 0);
    p = 2.0f, buf = 0.0f, g = 1.0f, hp.nesterov = 1;
    CHECK(ops->sgd(&p, &g, &buf, 1, &hp) == TR_OK);
    CHECK_CLOSE(p, 1.8062, 1e-6, 0);
}

/* Known-answer vectors of Philox-4x32-10 from the Random123 distribution (kat_vectors). */
static void test_philox_known_answers(void) {
    tr_philox4 r = tr_philox4x32_10(0, 0);
    CHECK(r.v[0] == 0x6627e8d5u && r.v[1] == 0xe169c58du && r.v[2] == 0xbc57ac4cu &&
          r.v[3] == 0x9b00dbd8u);
}

static void test_dropout_mask(void) {
    enum { N = 200000 };
    float *x = malloc(sizeof(float) * N), *y1 = malloc(sizeof(float) * N),
          *y2 = malloc(sizeof(float) * N), *y3 = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) x[i] = 1.0f;
    const float p = 0.25f;
    CHECK(ops->dropout_fwd(y1, x, N, p, 42, 1000) == TR_OK);
    CHECK(ops->dropout_fwd(y2, x, N, p, 42, 1000) == TR_OK);
    CHECK(memcmp(y1, y2, sizeof(float) * N) == 0);
    /* A shard starting at element 777 of the same tensor sees the same mask slice. */
    CHECK(ops->dropout_fwd(y3, x, N - 777, p, 42, 1000 + 777) == TR_OK);
    CHECK(memcmp(y1 + 777, y3, sizeof(float) * (N - 777)) == 0);
    int kept = 0, bad = 0, differs = 0;
    for (int i = 0; i < N; i++) {
        kept += y1[i] != 0.0f;
        bad += y1[i] != 0.0f && y1[i] != 1.0f / (1.0f - p);
    }
    CHECK(bad == 0);
    /* keep count ~ Binomial(N, 0.75): sd = sqrt(N*0.75*0.25) ~ 194; allow 5 sd. */
    CHECK(fabs(kept - 0.75 * N) < 5 * 194.0);
    CHECK(ops->dropout_fwd(y2, x, N, p, 43, 1000) == TR_OK);
    for (int i = 0; i < N; i++) differs += (y1[i] == 0.0f) != (y2[i] == 0.0f);
    CHECK(differs > N / 4); /* a different seed gives an unrelated mask */
    /* backward with dy = 1 regenerates exactly the forward mask */
    CHECK(ops->dropout_bwd(y2, x, N, p, 42, 1000) == TR_OK);
    CHECK(memcmp(y1, y2, sizeof(float) * N) == 0);
    CHECK(ops->dropout_fwd(y2, x, N, 1.0f, 42, 0) == TR_ERR_INVALID);
    free(x), free(y1), free(y2), free(y3);
}

/* transformers' _compute_llama3_parameters, written the way the Python does it (mask by
 * wavelength, then blend the medium band), not shared with the library. */
static void hf_llama3_inv_freq(double *out, int dim, double base, double factor, double lo,
                               double hi, double old_ctx) {
    for (int i = 0; i < dim / 2; i++) {
        double inv = 1.0 / pow(base, (double)(2 * i) / dim);
        double low_wavelen = old_ctx / lo, high_wavelen = old_ctx / hi;
        double wavelen = 2 * M_PI / inv;
        double llama = wavelen > low_wavelen ? inv / factor : inv;
        double smooth = (old_ctx / wavelen - lo) / (hi - lo);
        double smoothed = (1 - smooth) * llama / factor + smooth * llama;
        int medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        out[i] = medium ? smoothed : llama;
    }
}

static void test_rope_llama3_frequencies(void) {
    enum { DIM = 128, T = 4 };
    tr_rope_params p = {.rot_dim = DIM,
                        .base = 500000.0,
                        .llama3 = 1,
                        .factor = 8.0,
                        .low_freq_factor = 1.0,
                        .high_freq_factor = 4.0,
                        .original_max_position = 8192.0};
    double ref[DIM / 2];
    hf_llama3_inv_freq(ref, DIM, 500000.0, 8.0, 1.0, 4.0, 8192.0);
    float cs[T * DIM / 2], sn[T * DIM / 2];
    CHECK(ops->rope_table(cs, sn, &p, T, 1000) == TR_OK); /* positions 1000..1003 */
    int low = 0, mid = 0, high = 0;
    for (int i = 0; i < DIM / 2; i++) {
        double wl = 2 * M_PI * pow(500000.0, 2.0 * i / DIM);
        low += wl > 8192.0, high += wl < 2048.0, mid += wl >= 2048.0 && wl <= 8192.0;
        for (int t = 0; t < T; t++) {
            double ang = (1000 + t) * ref[i];
            CHECK_CLOSE(cs[t * DIM / 2 + i], cos(ang), 0, 2e-6);
            CHECK_CLOSE(sn[t * DIM / 2 + i], sin(ang), 0, 2e-6);
        }
    }
    CHECK(low > 0 && mid > 0 && high > 0); /* all three bands exercised */
    /* partial rotary with default (unscaled) frequencies and a position offset */
    tr_rope_params q = {.rot_dim = 16, .base = 10000.0};
    float c2[16 / 2], s2[16 / 2];
    CHECK(ops->rope_table(c2, s2, &q, 1, 5) == TR_OK);
    for (int i = 0; i < 8; i++) CHECK_CLOSE(c2[i], cos(5.0 / pow(10000.0, i / 8.0)), 0, 1e-6);
    q.rot_dim = 15;
    CHECK(ops->rope_table(c2, s2, &q, 1, 0) == TR_ERR_INVALID);
}

/* Summing the vocab-sharded lookups over all shards gives the unsharded lookup. */
static void test_embedding_vocab_shards(void) {
    enum { VOC = 10, DIM = 3, N = 8 };
    rng_seed(5);
    float *table = rand_buf(VOC * DIM, -1, 1), full[N * DIM], sum[N * DIM] = {0}, part[N * DIM];
    int32_t ids[N] = {0, 9, 3, 3, 5, 7, 1, 8};
    CHECK(ops->embedding_fwd(full, ids, table, N, DIM, 0, VOC) == TR_OK);
    int cuts[4] = {0, 3, 7, 10};
    for (int s = 0; s < 3; s++) {
        CHECK(ops->embedding_fwd(part, ids, table + cuts[s] * DIM, N, DIM, cuts[s], cuts[s + 1]) ==
              TR_OK);
        for (int i = 0; i < N * DIM; i++) sum[i] += part[i];
    }
    CHECK(memcmp(full, sum, sizeof sum) == 0);
    float dt[VOC * DIM] = {0}, dout[N * DIM];
    for (int i = 0; i < N * DIM; i++) dout[i] = 1.0f;
    CHECK(ops->embedding_bwd(dt, ids, dout, N, DIM, 0, VOC) == TR_OK);
    CHECK(dt[3 * DIM] == 2.0f && dt[2 * DIM] == 0.0f && dt[9 * DIM + 2] == 1.0f);
    free(table);
}

static void test_flat_helpers(void) {
    enum { N = 100003 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    double ref = 0;
    for (int i = 0; i < N; i++) {
        x[i] = (float)((i % 7) - 3) * 0.5f;
        ref += (double)x[i] * x[i];
    }
    float ss = 0;
    CHECK(ops->sum_squares(&ss, x, N) == TR_OK);
    CHECK_CLOSE(ss, ref, 1e-6, 0);
    CHECK(ops->fill(y, N, 2.0f) == TR_OK);
    CHECK(ops->add(y, x, N) == TR_OK);
    CHECK(ops->scale(y, N, 0.5f) == TR_OK);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += y[i] != (2.0f + x[i]) * 0.5f;
    CHECK(bad == 0);
    CHECK(ops->sum_squares(NULL, x, N) == TR_ERR_INVALID);
    free(x), free(y);
}

/* The row and column reductions (DoRA's norms and magnitude gradients) against loops in the
 * test, on shapes that split over threads, with NULL and negative sizes refused. */
static void test_row_col_helpers(void) {
    enum { R = 37, C = 129 };
    float *a = malloc(sizeof(float) * R * C), *b = malloc(sizeof(float) * R * C);
    float sq[R], s[C], dot[C], scale[C], inv[C], mag[C];
    for (int i = 0; i < R * C; i++) {
        a[i] = (float)((i * 37) % 23 - 11) * 0.125f;
        b[i] = (float)((i * 11) % 17 - 8) * 0.25f;
    }
    for (int c = 0; c < C; c++) {
        s[c] = 0.5f + 0.01f * (float)c;
        dot[c] = 1.0f;
        mag[c] = 2.0f + (float)c;
    }
    CHECK(ops->row_sum_squares(sq, a, R, C) == TR_OK);
    int bad = 0;
    for (int r = 0; r < R; r++) {
        double want = 0;
        for (int c = 0; c < C; c++) want += (double)a[r * C + c] * a[r * C + c];
        bad += sq[r] != (float)want;
    }
    CHECK_INT_EQ(bad, 0);
    CHECK(ops->col_dot(dot, a, b, s, R, C) == TR_OK);
    for (int c = 0; c < C; c++) {
        double want = 0;
        for (int r = 0; r < R; r++) want += (double)a[r * C + c] * b[r * C + c];
        bad += dot[c] != 1.0f + s[c] * (float)want;
    }
    CHECK_INT_EQ(bad, 0);
    CHECK(ops->norm_scale(scale, inv, mag, sq, R) == TR_OK);
    for (int r = 0; r < R; r++) {
        CHECK_CLOSE(inv[r], 1.0 / sqrt((double)sq[r]), 1e-6, 0);
        CHECK_CLOSE(scale[r], mag[r] / sqrt((double)sq[r]), 1e-6, 0);
    }
    memcpy(b, a, sizeof(float) * R * C);
    CHECK(ops->col_scale(b, s, R, C) == TR_OK);
    for (int i = 0; i < R * C; i++) bad += b[i] != a[i] * s[i % C];
    CHECK_INT_EQ(bad, 0);
    CHECK(ops->row_sum_squares(NULL, a, R, C) == TR_ERR_INVALID);
    CHECK(ops->col_dot(dot, a, b, s, -1, C) == TR_ERR_INVALID);
    CHECK(ops->col_scale(b, NULL, R, C) == TR_ERR_INVALID);
    free(a), free(b);
}

/* The vector primitives of every variant against libm in double, over lengths that exercise the
 * full-vector, one-vector and scalar-tail paths. The polynomial exp must stay within a few fp32
 * ulps of exp (2e-7 relative) down to the -87 clamp. */
static void test_simd_primitives(void) {
    static const char *isas[] = {"generic", "avx2", "avx512"};
    enum { N = 77 };
    float x[N], y[N];
    rng_seed(9);
    for (int v = 0; v < 3; v++) {
        const tr_cpu_simd *s = tr_cpu_simd_variant(isas[v]);
        if (!s) continue;
        for (int i = 0; i < N; i++) x[i] = rng_uniform(-30, 0);
        x[5] = 0.0f, x[6] = -86.0f, x[40] = -1e-7f; /* stay above the -87 clamp */
        memcpy(y, x, sizeof y);
        s->exp_row(y, N, 70, 1.0f, 0.0f);
        for (int i = 0; i < 70; i++) CHECK_CLOSE(y[i], exp((double)x[i]), 2e-7, 0);
        for (int i = 70; i < N; i++) CHECK(y[i] == 0.0f);
        double ref = 0;
        for (int i = 0; i < 53; i++) ref += exp((double)(x[i] - 0.25f));
        CHECK_CLOSE(s->sum_exp(x, 53, 0.25f), ref, 1e-6, 0); /* arguments x - m <= 0 */
        for (int n = 0; n <= N; n += 11) {
            float m = -INFINITY;
            for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
            CHECK(s->row_max(x, n) == m);
        }
        memcpy(y, x, sizeof y);
        s->scaled_exp(y, 35, 0.5f, 0.5f);
        for (int i = 0; i < 35; i++) CHECK_CLOSE(y[i], 0.5 * exp((double)(x[i] - 0.5f)), 2e-7, 0);
        /* C(5x37) += A(5x3) B(3x37) and the A^T form */
        float A[15], B[3 * 37], C[5 * 37] = {0}, Ct[5 * 37] = {0}, At[15];
        for (int i = 0; i < 15; i++) A[i] = rng_uniform(-1, 1);
        for (int i = 0; i < 3 * 37; i++) B[i] = rng_uniform(-1, 1);
        for (int i = 0; i < 5; i++)
            for (int k = 0; k < 3; k++) At[k * 5 + i] = A[i * 3 + k];
        s->tile_mm(5, 37, 3, A, 3, 1, B, 37, C, 37);
        s->tile_mm(5, 37, 3, At, 1, 5, B, 37, Ct, 37);
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 37; j++) {
                double r = 0;
                for (int k = 0; k < 3; k++) r += (double)A[i * 3 + k] * B[k * 37 + j];
                CHECK_CLOSE(C[i * 37 + j], r, 1e-6, 1e-6);
                CHECK_CLOSE(Ct[i * 37 + j], r, 1e-6, 1e-6);
            }
    }
}

TR_TEST_MAIN(TR_TEST(test_simd_primitives), TR_TEST(test_adamw_two_steps),
             TR_TEST(test_sgd_momentum), TR_TEST(test_philox_known_answers),
             TR_TEST(test_dropout_mask), TR_TEST(test_rope_llama3_frequencies),
             TR_TEST(test_embedding_vocab_shards), TR_TEST(test_flat_helpers),
             TR_TEST(test_row_col_helpers))
