/* Micro-benchmark of the CPU op table: sgemm GFLOP/s on the GEMM shapes of a GPT-2-small sized
 * layer, and causal attention forward+backward, each reported next to a naive implementation
 * timed in the same run (so the ratio does not depend on the machine).
 *
 *   bench_ops_cpu [tokens=1024] [seq=1024] [gemm|attn|packed|gelu]
 *
 * `gelu` (also run by default) times GeLU forward and backward on GPT-2's [256, 3072] MLP
 * activation for each ISA variant against the scalar maths of kernels/common run through the
 * same thread pool (what the CPU op did before it was vectorised).
 *
 * `packed` (also run after `attn`) times document-masked attention over 8 documents of seq/8
 * tokens packed into one row against plain causal attention over the same row.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "kernels/common/activations.h"
#include "kernels/cpu/simd/simd.h"
#include "kernels/cpu/threadpool.h"
#include "kernels/ops.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *rnd(size_t n) {
    float *p = malloc(sizeof(float) * n);
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

/* Textbook triple loop, row-major C = A B^T (dot products over contiguous rows). */
static void naive_gemm_nt(int m, int n, int k, const float *a, const float *b, float *c) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0;
            for (int p = 0; p < k; p++) s += a[(size_t)i * k + p] * b[(size_t)j * k + p];
            c[(size_t)i * n + j] = s;
        }
}

typedef struct gshape {
    const char *name;
    tr_transpose ta, tb;
    int m, n, k;
} gshape;

static double time_gemm(const gshape *g, const float *a, const float *b, float *c) {
    const tr_ops *ops = tr_ops_cpu();
    int lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
    ops->gemm(g->ta, g->tb, g->m, g->n, g->k, 1, a, lda, b, ldb, 0, c, g->n); /* warm up */
    int reps = 0;
    double t0 = now(), t;
    do {
        ops->gemm(g->ta, g->tb, g->m, g->n, g->k, 1, a, lda, b, ldb, 0, c, g->n);
        reps++;
    } while ((t = now() - t0) < 0.4);
    return 2.0 * g->m * g->n * g->k * reps / t * 1e-9;
}

/* Naive attention: materialise the [T, T] score matrix per head, softmax, then the three
 * backward products, single-threaded. */
static void naive_attention(int T, int D, const float *q, const float *k, const float *v,
                            const float *dout, float *o, float *dq, float *dk, float *dv, float *P,
                            float *dP) {
    float scale = 1.0f / sqrtf((float)D);
    for (int i = 0; i < T; i++) {
        float mx = -INFINITY;
        for (int j = 0; j <= i; j++) {
            float s = 0;
            for (int e = 0; e < D; e++) s += q[i * D + e] * k[j * D + e];
            P[(size_t)i * T + j] = s * scale;
            mx = fmaxf(mx, s * scale);
        }
        float sum = 0;
        for (int j = 0; j <= i; j++) sum += P[(size_t)i * T + j] = expf(P[(size_t)i * T + j] - mx);
        for (int j = 0; j <= i; j++) P[(size_t)i * T + j] /= sum;
        for (int e = 0; e < D; e++) {
            float s = 0;
            for (int j = 0; j <= i; j++) s += P[(size_t)i * T + j] * v[j * D + e];
            o[i * D + e] = s;
        }
    }
    memset(dk, 0, sizeof(float) * T * D);
    memset(dv, 0, sizeof(float) * T * D);
    for (int i = 0; i < T; i++) {
        float rd = 0;
        for (int j = 0; j <= i; j++) {
            float s = 0;
            for (int e = 0; e < D; e++) s += dout[i * D + e] * v[j * D + e];
            dP[(size_t)i * T + j] = s;
            rd += s * P[(size_t)i * T + j];
        }
        for (int e = 0; e < D; e++) dq[i * D + e] = 0;
        for (int j = 0; j <= i; j++) {
            float p = P[(size_t)i * T + j], ds = p * (dP[(size_t)i * T + j] - rd) * scale;
            for (int e = 0; e < D; e++) {
                dv[j * D + e] += p * dout[i * D + e];
                dk[j * D + e] += ds * q[i * D + e];
                dq[i * D + e] += ds * k[j * D + e];
            }
        }
    }
}

static void bench_gemm(int tokens) {
    const int C = 768, FF = 3072;
    printf("sgemm via OpenBLAS (core: %s), tokens=%d hidden=%d ffn=%d\n", openblas_get_corename(),
           tokens, C, FF);

    /* naive GEMM reference on a slab of rows, same k */
    int nm = 64;
    float *na = rnd((size_t)nm * C), *nb = rnd((size_t)C * C), *nc = rnd((size_t)nm * C);
    double t0 = now();
    naive_gemm_nt(nm, C, C, na, nb, nc);
    double naive_gf = 2.0 * nm * C * C / (now() - t0) * 1e-9;
    printf("%-34s %9s %9s\n", "gemm (row-major, C = op(A) op(B))", "GFLOP/s", "x naive");
    printf("%-34s %9.1f %9.1f\n", "naive triple loop 64x768x768", naive_gf, 1.0);
    gshape shapes[] = {
        {"qkv fwd   [T,C]x[3C,C]^T", TR_NOTRANS, TR_TRANS, tokens, 3 * C, C},
        {"fc1 fwd   [T,C]x[4C,C]^T", TR_NOTRANS, TR_TRANS, tokens, FF, C},
        {"fc2 fwd   [T,4C]x[C,4C]^T", TR_NOTRANS, TR_TRANS, tokens, C, FF},
        {"fc1 dx    [T,4C]x[4C,C]", TR_NOTRANS, TR_NOTRANS, tokens, C, FF},
        {"fc1 dW    [T,4C]^Tx[T,C]", TR_TRANS, TR_NOTRANS, FF, C, tokens},
        {"proj dW   [T,C]^Tx[T,C]", TR_TRANS, TR_NOTRANS, C, C, tokens},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        gshape *g = &shapes[s];
        float *a = rnd((size_t)g->m * g->k), *b = rnd((size_t)g->k * g->n),
              *c = rnd((size_t)g->m * g->n);
        double gf = time_gemm(g, a, b, c);
        printf("%-34s %9.1f %9.1f\n", g->name, gf, gf / naive_gf);
        free(a), free(b), free(c);
    }
    free(na), free(nb), free(nc);
}

static void bench_attention(int seq, int with_naive) {
    const int H = 12, G = 4, D = 64;
    /* attention: B=1, T=seq, H query heads sharing G KV groups */
    const tr_ops *ops = tr_ops_cpu();
    size_t nq = (size_t)seq * H * D, nk = (size_t)seq * G * D;
    float *q = rnd(nq), *k = rnd(nk), *v = rnd(nk), *dout = rnd(nq);
    float *o = malloc(sizeof(float) * nq), *lse = malloc(sizeof(float) * H * seq);
    float *dq = malloc(sizeof(float) * nq), *dk = malloc(sizeof(float) * nk),
          *dv = malloc(sizeof(float) * nk);
    tr_attn_desc d = {.batch = 1,
                      .seq = seq,
                      .heads = H,
                      .groups = G,
                      .head_dim = D,
                      .scale = 1.0f / sqrtf((float)D),
                      .causal = 1};
    /* model FLOPs of causal attention: 2 matmuls forward, 4 backward (recomputation not counted) */
    double fwd_flops = 2.0 * 2.0 * H * (double)seq * seq * D / 2.0, bwd_flops = 2.0 * fwd_flops;
    ops->attention_fwd(o, lse, q, k, v, &d);
    int reps = 0;
    double tf = 0, tb = 0;
    double t0 = now();
    do {
        double a = now();
        ops->attention_fwd(o, lse, q, k, v, &d);
        double b = now();
        ops->attention_bwd(dq, dk, dv, dout, q, k, v, o, lse, &d);
        tf += b - a, tb += now() - b;
        reps++;
    } while (now() - t0 < 1.0);
    tf /= reps, tb /= reps;

    /* naive on one head (contiguous [T, D] slices), scaled to H heads; measured once */
    static double tn;
    if (with_naive) {
        size_t sd = (size_t)seq * D;
        float *hq = rnd(sd), *hk = rnd(sd), *hv = rnd(sd), *hd = rnd(sd);
        float *ho = malloc(sizeof(float) * sd), *hdq = malloc(sizeof(float) * sd);
        float *hdk = malloc(sizeof(float) * sd), *hdv = malloc(sizeof(float) * sd);
        float *P = malloc(sizeof(float) * seq * seq), *dP = malloc(sizeof(float) * seq * seq);
        t0 = now();
        naive_attention(seq, D, hq, hk, hv, hd, ho, hdq, hdk, hdv, P, dP);
        tn = (now() - t0) * H;
        free(hq), free(hk), free(hv), free(hd), free(ho), free(hdq), free(hdk), free(hdv);
        free(P), free(dP);
    }
    printf("causal attention B=1 T=%d H=%d G=%d D=%d (%d threads in the op pool)\n", seq, H, G, D,
           tr_cpu_num_threads());
    printf("  flash fwd  %8.2f ms  %6.1f GFLOP/s\n", tf * 1e3, fwd_flops / tf * 1e-9);
    printf("  flash bwd  %8.2f ms  %6.1f GFLOP/s\n", tb * 1e3, bwd_flops / tb * 1e-9);
    printf("  fwd+bwd    %8.2f ms  %6.1f GFLOP/s  %6.0f tok/s\n", (tf + tb) * 1e3,
           (fwd_flops + bwd_flops) / (tf + tb) * 1e-9, seq / (tf + tb));
    printf("  naive fwd+bwd (1 thread, [T,T] materialised) %8.2f ms  %6.1f GFLOP/s\n", tn * 1e3,
           (fwd_flops + bwd_flops) / tn * 1e-9);
    printf("  speed-up vs naive: %.1fx\n", tn / (tf + tb));
    free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv);
}

/* Mean seconds of one forward + backward over at least half a second. */
static double time_fwd_bwd(const tr_attn_desc *d, const float *q, const float *k, const float *v,
                           const float *dout, float *o, float *lse, float *dq, float *dk,
                           float *dv) {
    const tr_ops *ops = tr_ops_cpu();
    ops->attention_fwd(o, lse, q, k, v, d);
    int reps = 0;
    double t0 = now(), t;
    do {
        ops->attention_fwd(o, lse, q, k, v, d);
        ops->attention_bwd(dq, dk, dv, dout, q, k, v, o, lse, d);
        reps++;
    } while ((t = now() - t0) < 0.5);
    return t / reps;
}

static void bench_packed(int seq) {
    const int H = 12, G = 4, D = 64, docs = 8;
    size_t nq = (size_t)seq * H * D, nk = (size_t)seq * G * D;
    float *q = rnd(nq), *k = rnd(nk), *v = rnd(nk), *dout = rnd(nq);
    float *o = malloc(sizeof(float) * nq), *lse = malloc(sizeof(float) * H * seq);
    float *dq = malloc(sizeof(float) * nq), *dk = malloc(sizeof(float) * nk),
          *dv = malloc(sizeof(float) * nk);
    int32_t *ds = malloc(sizeof(int32_t) * seq);
    int len = seq / docs > 0 ? seq / docs : 1;
    for (int t = 0; t < seq; t++) ds[t] = t / len * len;
    tr_attn_desc d = {.batch = 1,
                      .seq = seq,
                      .heads = H,
                      .groups = G,
                      .head_dim = D,
                      .scale = 1.0f / sqrtf((float)D),
                      .causal = 1};
    double full = time_fwd_bwd(&d, q, k, v, dout, o, lse, dq, dk, dv);
    d.doc_start = ds;
    double packed = time_fwd_bwd(&d, q, k, v, dout, o, lse, dq, dk, dv);
    printf("packed attention B=1 T=%d H=%d G=%d D=%d, %d documents of %d (tile kernels: %s)\n", seq,
           H, G, D, (seq + len - 1) / len, len, tr_cpu_simd_active()->isa);
    printf("  full causal fwd+bwd    %8.2f ms\n", full * 1e3);
    printf("  doc-masked fwd+bwd     %8.2f ms  (%.1fx faster)\n", packed * 1e3, full / packed);
    free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv);
    free(ds);
}

typedef struct gelu_ref_ctx {
    float *out;
    const float *x, *dy;
    int tanh_form;
} gelu_ref_ctx;

static void gelu_ref_fwd(void *vc, int64_t b, int64_t e) {
    gelu_ref_ctx *c = vc;
    for (int64_t i = b; i < e; i++)
        c->out[i] = c->tanh_form ? tr_gelu_tanh(c->x[i]) : tr_gelu_erf(c->x[i]);
}

static void gelu_ref_bwd(void *vc, int64_t b, int64_t e) {
    gelu_ref_ctx *c = vc;
    for (int64_t i = b; i < e; i++)
        c->out[i] =
            c->dy[i] * (c->tanh_form ? tr_gelu_tanh_grad(c->x[i]) : tr_gelu_erf_grad(c->x[i]));
}

/* Mean seconds per call over at least 0.3 s: the op (variant active) or the scalar reference. */
static double time_gelu(int scalar, int bwd, int tanh_form, float *out, const float *x,
                        const float *dy, int64_t n) {
    const tr_ops *ops = tr_ops_cpu();
    gelu_ref_ctx c = {.out = out, .x = x, .dy = dy, .tanh_form = tanh_form};
    int reps = 0;
    double t0 = now(), t;
    do {
        if (scalar)
            tr_cpu_parallel_for(n, 4096, bwd ? gelu_ref_bwd : gelu_ref_fwd, &c);
        else if (bwd)
            ops->gelu_bwd(out, dy, x, n, tanh_form);
        else
            ops->gelu_fwd(out, x, n, tanh_form);
        reps++;
    } while ((t = now() - t0) < 0.3);
    return t / reps;
}

static void bench_gelu(void) {
    const int64_t n = 256 * 3072;
    float *x = rnd((size_t)n), *dy = rnd((size_t)n), *out = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) x[i] *= 8.0f; /* [-4, 4]: both branches of the erf form */
    printf("GeLU on [256, 3072] (%d threads); GB/s counts x, y (+ dy) once\n",
           tr_cpu_num_threads());
    printf("%-22s %9s %9s %9s\n", "", "ms", "GB/s", "x scalar");
    static const char *isas[] = {"avx512", "avx2", "generic"};
    for (int t = 1; t >= 0; t--)
        for (int bwd = 0; bwd < 2; bwd++) {
            double ref = time_gelu(1, bwd, t, out, x, dy, n), bytes = (bwd ? 12.0 : 8.0) * n;
            char name[64];
            snprintf(name, sizeof name, "%s %s scalar", t ? "tanh" : "erf", bwd ? "bwd" : "fwd");
            printf("%-22s %9.3f %9.2f %9.1f\n", name, ref * 1e3, bytes / ref * 1e-9, 1.0);
            for (int i = 0; i < 3; i++) {
                if (tr_cpu_simd_select(isas[i]) != TR_OK) continue;
                double s = time_gelu(0, bwd, t, out, x, dy, n);
                snprintf(name, sizeof name, "%s %s %s", t ? "tanh" : "erf", bwd ? "bwd" : "fwd",
                         isas[i]);
                printf("%-22s %9.3f %9.2f %9.1f\n", name, s * 1e3, bytes / s * 1e-9, ref / s);
            }
        }
    for (int i = 0; i < 3; i++)
        if (tr_cpu_simd_select(isas[i]) == TR_OK) break; /* back to the widest */
    free(x), free(dy), free(out);
}

int main(int argc, char **argv) {
    int tokens = argc > 1 ? atoi(argv[1]) : 1024, seq = argc > 2 ? atoi(argv[2]) : 1024;
    const char *only = argc > 3 ? argv[3] : "";
    if (!strcmp(only, "gelu") || !*only) {
        bench_gelu();
        if (!strcmp(only, "gelu")) return 0;
        printf("\n");
    }
    /* attention first: OpenBLAS workers spin for a while after each sgemm and would steal
     * cycles from the op pool */
    if (strcmp(only, "gemm") && strcmp(only, "packed")) {
        /* widest variant first (the default), then the narrower ones this CPU can run */
        static const char *isas[] = {"avx512", "avx2", "generic"};
        int first = 1;
        for (int i = 0; i < 3; i++) {
            if (tr_cpu_simd_select(isas[i]) != TR_OK) continue;
            printf("%s[tile kernels: %s]\n", first ? "" : "\n", isas[i]);
            bench_attention(seq, first);
            first = 0;
        }
    }
    if (!strcmp(only, "attn") || !strcmp(only, "packed") || !*only) {
        const char *isas[] = {"avx512", "avx2", "generic"};
        for (int i = 0; i < 3; i++)
            if (tr_cpu_simd_select(isas[i]) == TR_OK) break; /* back to the widest */
        printf("\n");
        bench_packed(seq);
    }
    if (strcmp(only, "attn") && strcmp(only, "packed")) {
        printf("\n");
        bench_gemm(tokens);
        if (!strncmp(openblas_get_corename(), "Prescott", 8) ||
            !strncmp(openblas_get_corename(), "prescott", 8))
            printf(
                "note: OpenBLAS did not recognise this CPU and chose its SSE3 kernels; set\n"
                "      OPENBLAS_CORETYPE (e.g. SkylakeX or Haswell) before starting the process\n");
    }
    return 0;
}
