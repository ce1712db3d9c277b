/* Timings of the CUDA ops at llama32_1b shapes (not a test; gpu_check.sh runs it): the bf16 and
 * fp32 GEMMs against the chip's bf16 peak, the fp32 attention, and the memory-bound ops against
 * the bytes they must move. CUDA events around 10 repetitions after 2 warm-ups; inputs random.
 * Usage: bench_cuda_ops [peak_tflops]   (default 989, H100/H200 SXM dense bf16) */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/cuda_mixed.h"
#include "kernels/cuda/cuda_ops.h"
#include "tests/gpu/gpu_test.h"

#define REPS 10

static cudaStream_t g_stream;

typedef tr_status (*bench_fn)(void *arg);

/* Median-free but honest: total event time over REPS launches after 2 warm-ups, in ms per call;
 * -1 when the op fails. */
static double time_ms(bench_fn fn, void *arg) {
    for (int i = 0; i < 2; i++)
        if (fn(arg) != TR_OK) return -1;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, g_stream);
    for (int i = 0; i < REPS; i++)
        if (fn(arg) != TR_OK) return -1;
    cudaEventRecord(b, g_stream);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / REPS;
}

static float *rand_dev(size_t n, float scale) {
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = gt_uniform(-scale, scale);
    float *d = gt_dev(h, n);
    free(h);
    return d;
}

typedef struct gemm_arg {
    int m, n, k;
    const void *a, *b;
    void *c;
    int bf16;
} gemm_arg;

static tr_status run_gemm(void *v) {
    gemm_arg *g = v;
    if (g->bf16)
        return tr_cuda_gemm_bf16(TR_NOTRANS, TR_TRANS, g->m, g->n, g->k, 1.0f, g->a, g->k, g->b,
                                 g->k, 0.0f, g->c, TR_CUDA_BF16, g->n, NULL);
    return tr_ops_cuda()->gemm(TR_NOTRANS, TR_TRANS, g->m, g->n, g->k, 1.0f, g->a, g->k, g->b, g->k,
                               0.0f, g->c, g->n);
}

typedef struct attn_arg {
    tr_attn_desc d;
    float *q, *k, *v, *o, *lse, *dq, *dk, *dv, *dout;
    int bwd;
} attn_arg;

static tr_status run_attn(void *v) {
    attn_arg *a = v;
    if (a->bwd)
        return tr_ops_cuda()->attention_bwd(a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->o,
                                            a->lse, &a->d);
    return tr_ops_cuda()->attention_fwd(a->o, a->lse, a->q, a->k, a->v, &a->d);
}

typedef struct flat_arg {
    int which, rows, cols;
    float *x, *y, *w, *r, *m, *v;
    int32_t *t;
    int64_t n;
} flat_arg;

static tr_status run_flat(void *v) {
    flat_arg *f = v;
    const tr_ops *o = tr_ops_cuda();
    tr_adamw_params p = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f};
    switch (f->which) {
    case 0:
        return o->rmsnorm_fwd(f->y, f->r, f->x, f->w, f->rows, f->cols, 1e-5f, 0);
    case 1:
        return o->ce_stats(f->y, f->x, f->t, f->rows, f->cols, 0);
    case 2:
        return o->adamw(f->x, f->y, f->m, f->v, f->n, &p);
    default:
        return o->swiglu_fwd(f->y, f->x, f->rows, f->cols);
    }
}

int main(int argc, char **argv) {
    if (tr_cuda_device_count() == 0) {
        printf("SKIPPED: no CUDA device visible\n");
        return TR_TEST_SKIPPED;
    }
    double peak = argc > 1 ? atof(argv[1]) : 989.0;
    tr_cuda_ctx *ctx;
    if (tr_cuda_select_device(0, NULL) != TR_OK || tr_cuda_ctx_create(NULL, &ctx) != TR_OK)
        return 1;
    tr_cuda_bind(ctx);
    g_stream = (cudaStream_t)tr_cuda_ctx_stream(ctx);
    gt_seed();
    printf("%-44s %10s %12s\n", "op (llama32_1b shapes)", "ms", "rate");

    /* GEMMs: the MLP's fc1 for 4096 tokens (4096 x 16384 x 2048) and a square 8192 product. */
    int shapes[2][3] = {{4096, 16384, 2048}, {8192, 8192, 8192}};
    for (int s = 0; s < 2; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        float *a = rand_dev((size_t)m * k, 1), *b = rand_dev((size_t)n * k, 1);
        uint16_t *ha = gt_dev_bytes(NULL, (size_t)m * k * 2),
                 *hb = gt_dev_bytes(NULL, (size_t)n * k * 2);
        tr_cuda_f32_to_bf16(ha, a, (int64_t)m * k);
        tr_cuda_f32_to_bf16(hb, b, (int64_t)n * k);
        float *c = gt_dev_bytes(NULL, (size_t)m * n * 4);
        double flops = 2.0 * m * n * k;
        for (int bf = 1; bf >= 0; bf--) {
            gemm_arg g = {m, n, k, bf ? (void *)ha : (void *)a, bf ? (void *)hb : (void *)b, c, bf};
            double ms = time_ms(run_gemm, &g);
            double tf = flops / (ms * 1e-3) / 1e12;
            printf("%-44s %10.3f %8.1f TF/s  (%.0f%% of %.0f)\n",
                   bf ? (s ? "gemm bf16 8192^3" : "gemm bf16 4096x16384x2048 (fc1)")
                      : (s ? "gemm fp32 8192^3" : "gemm fp32 4096x16384x2048 (fc1)"),
                   ms, tf, 100 * tf / peak, peak);
        }
        gt_free(a), gt_free(b), gt_free(ha), gt_free(hb), gt_free(c);
    }

    /* Attention: one layer, seq 4096, 32 heads, 8 KV groups, head_dim 64, causal. */
    attn_arg at = {.d = {1, 4096, 32, 8, 64, 0.125f, 1, 0, 0, NULL, 0, 0}};
    size_t nq = (size_t)4096 * 32 * 64, nk = (size_t)4096 * 8 * 64;
    at.q = rand_dev(nq, 1), at.k = rand_dev(nk, 1), at.v = rand_dev(nk, 1);
    at.dout = rand_dev(nq, 1), at.o = gt_dev_poison(nq), at.lse = gt_dev_poison(32 * 4096);
    at.dq = gt_dev_poison(nq), at.dk = gt_dev_poison(nk), at.dv = gt_dev_poison(nk);
    double attn_flops = 4.0 * 4096 * 4096 * 32 * 64 / 2; /* causal: half of QK^T and PV */
    /* lowp 0: the fp32 SIMT kernels; bf16 / fp16: the tensor-core kernels (desc.lowp) */
    static const char *const attn_names[3][2] = {
        {"attention fwd fp32 (T4096 H32 G8 D64)", "attention bwd fp32 (T4096 H32 G8 D64)"},
        {"attention fwd lowp bf16 (T4096 H32 G8 D64)",
         "attention bwd lowp bf16 (T4096 H32 G8 D64)"},
        {"attention fwd lowp fp16 (T4096 H32 G8 D64)",
         "attention bwd lowp fp16 (T4096 H32 G8 D64)"}};
    for (int lp = 0; lp < 3; lp++)
        for (int bwd = 0; bwd < 2; bwd++) {
            at.d.lowp = lp; /* 0, TR_LOWP_BF16, TR_LOWP_F16 */
            at.bwd = bwd;
            double ms = time_ms(run_attn, &at);
            double tf = (bwd ? 2.5 : 1.0) * attn_flops / (ms * 1e-3) / 1e12;
            printf("%-44s %10.3f %8.1f TF/s  (%s, %.0f%% of %.0f)\n", attn_names[lp][bwd], ms, tf,
                   lp ? "tensor cores" : "fp32 SIMT", 100 * tf / peak, peak);
        }

    /* Memory-bound ops: GB/s over the bytes each must move. */
    flat_arg f = {0};
    f.rows = 4096, f.cols = 2048;
    f.x = rand_dev((size_t)4096 * 2048, 1), f.y = gt_dev_poison((size_t)4096 * 2048);
    f.w = rand_dev(2048, 1), f.r = gt_dev_poison(4096);
    double ms = time_ms(run_flat, &f);
    printf("%-44s %10.3f %8.0f GB/s\n", "rmsnorm fwd 4096x2048", ms,
           2.0 * 4096 * 2048 * 4 / (ms * 1e-3) / 1e9);
    gt_free(f.x), gt_free(f.y);
    f.which = 1, f.cols = 128256;
    f.x = rand_dev((size_t)4096 * 128256, 4), f.y = gt_dev_poison(3 * 4096);
    int32_t *tg = malloc(sizeof(int32_t) * 4096);
    for (int i = 0; i < 4096; i++) tg[i] = i * 31 % 128256;
    f.t = gt_dev_bytes(tg, sizeof(int32_t) * 4096);
    ms = time_ms(run_flat, &f);
    printf("%-44s %10.3f %8.0f GB/s\n", "ce_stats 4096 x 128256", ms,
           4096.0 * 128256 * 4 / (ms * 1e-3) / 1e9);
    gt_free(f.x), gt_free(f.y), gt_free(f.t), free(tg);
    f.which = 2, f.n = 256 << 20; /* 256M parameters of AdamW: 4 arrays read, 3 written */
    f.x = rand_dev((size_t)f.n, 1), f.y = rand_dev((size_t)f.n, 1);
    f.m = rand_dev((size_t)f.n, 0), f.v = rand_dev((size_t)f.n, 0);
    ms = time_ms(run_flat, &f);
    printf("%-44s %10.3f %8.0f GB/s\n", "adamw 256M params", ms,
           7.0 * (double)f.n * 4 / (ms * 1e-3) / 1e9);
    gt_free(f.x), gt_free(f.y), gt_free(f.m), gt_free(f.v);
    tr_cuda_ctx_destroy(ctx);
    return 0;
}
