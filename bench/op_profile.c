/* See bench/op_profile.h. Each wrapper times the CPU op it forwards to; a step's ops run one
 * after another from the caller's thread (each op parallelises inside), so the times add up to
 * the step less what runs outside the table (the gradient memset, the model's own loops). */
#include "bench/op_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SLOTS 96

typedef struct slot {
    char name[48];
    double s, flops;
    long calls;
} slot;

static slot g_slots[MAX_SLOTS];
static int g_nslots;
static const tr_ops *g_base;
static tr_ops g_prof;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static slot *find(const char *name) {
    for (int i = 0; i < g_nslots; i++)
        if (!strcmp(g_slots[i].name, name)) return &g_slots[i];
    if (g_nslots == MAX_SLOTS) return &g_slots[MAX_SLOTS - 1]; /* lumps the rest together */
    slot *s = &g_slots[g_nslots++];
    *s = (slot){0};
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

static void record(const char *name, double t0, double flops) {
    slot *s = find(name);
    s->s += now_s() - t0;
    s->flops += flops;
    s->calls++;
}

/* The three products of a linear layer as runtime/model/linear.c calls them. */
static tr_status w_gemm(tr_transpose ta, tr_transpose tb, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc) {
    double t = now_s();
    tr_status st = g_base->gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    const char *role = ta == TR_TRANS ? "wgrad" : tb == TR_TRANS ? "fwd" : "dgrad";
    char name[48];
    snprintf(name, sizeof name, "gemm %-5s %dx%dx%d", role, m, n, k);
    record(name, t, 2.0 * m * (double)n * k);
    return st;
}

#define TIMED(op, params, args)                                                                    \
    static tr_status w_##op params {                                                               \
        double t0_ = now_s();                                                                      \
        tr_status st_ = g_base->op args;                                                           \
        record(#op, t0_, 0.0);                                                                     \
        return st_;                                                                                \
    }

TIMED(bias_add, (float *y, const float *bias, int rows, int cols), (y, bias, rows, cols))
TIMED(bias_grad, (float *db, const float *dy, int rows, int cols), (db, dy, rows, cols))
TIMED(add, (float *y, const float *x, int64_t n), (y, x, n))
TIMED(fill, (float *x, int64_t n, float v), (x, n, v))
TIMED(scale, (float *x, int64_t n, float s), (x, n, s))
TIMED(sum_squares, (float *out, const float *x, int64_t n), (out, x, n))
TIMED(copy_2d, (float *d, int64_t ldd, const float *s, int64_t lds, int64_t r, int64_t c),
      (d, ldd, s, lds, r, c))
TIMED(loss_mean, (float *out, const float *l, const int32_t *t, int rows), (out, l, t, rows))
TIMED(embedding_fwd, (float *o, const int32_t *ids, const float *t, int n, int d, int s, int e),
      (o, ids, t, n, d, s, e))
TIMED(embedding_bwd, (float *o, const int32_t *ids, const float *t, int n, int d, int s, int e),
      (o, ids, t, n, d, s, e))
TIMED(pos_embedding_fwd, (float *x, const float *w, int b, int s, int d, int o), (x, w, b, s, d, o))
TIMED(pos_embedding_bwd, (float *x, const float *w, int b, int s, int d, int o), (x, w, b, s, d, o))
TIMED(layernorm_fwd,
      (float *y, float *mu, float *rs, const float *x, const float *w, const float *b, int rows,
       int dim, float eps, int zc),
      (y, mu, rs, x, w, b, rows, dim, eps, zc))
TIMED(layernorm_bwd,
      (float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
       const float *mu, const float *rs, int rows, int dim, int zc),
      (dx, dw, db, dy, x, w, mu, rs, rows, dim, zc))
TIMED(attention_fwd,
      (float *o, float *lse, const float *q, const float *k, const float *v, const tr_attn_desc *d),
      (o, lse, q, k, v, d))
TIMED(attention_bwd,
      (float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
       const float *v, const float *out, const float *lse, const tr_attn_desc *d),
      (dq, dk, dv, dout, q, k, v, out, lse, d))
TIMED(gelu_fwd, (float *y, const float *x, int64_t n, int t), (y, x, n, t))
TIMED(gelu_bwd, (float *dx, const float *dy, const float *x, int64_t n, int t), (dx, dy, x, n, t))
TIMED(ce_stats, (float *st, const float *l, const int32_t *t, int rows, int vl, int vs),
      (st, l, t, rows, vl, vs))
TIMED(ce_loss, (float *loss, const float *st, const int32_t *t, int rows), (loss, st, t, rows))
TIMED(ce_bwd,
      (float *l, const float *st, const int32_t *t, const float *dl, int rows, int vl, int vs),
      (l, st, t, dl, rows, vl, vs))
TIMED(adamw, (float *p, const float *g, float *m, float *v, int64_t n, const tr_adamw_params *ap),
      (p, g, m, v, n, ap))

const tr_ops *tr_bench_profiled_ops(void) {
    if (g_base) return &g_prof;
    g_base = tr_ops_cpu();
    g_prof = *g_base;
    g_prof.name = "cpu (profiled)";
    g_prof.gemm = w_gemm;
#define SET(op) g_prof.op = w_##op
    SET(bias_add), SET(bias_grad), SET(add), SET(fill), SET(scale), SET(sum_squares);
    SET(copy_2d), SET(loss_mean), SET(embedding_fwd), SET(embedding_bwd);
    SET(pos_embedding_fwd), SET(pos_embedding_bwd), SET(layernorm_fwd), SET(layernorm_bwd);
    SET(attention_fwd), SET(attention_bwd), SET(gelu_fwd), SET(gelu_bwd);
    SET(ce_stats), SET(ce_loss), SET(ce_bwd), SET(adamw);
#undef SET
    return &g_prof;
}

void tr_bench_profile_reset(void) {
    g_nslots = 0;
}

static int by_time(const void *a, const void *b) {
    double x = ((const slot *)a)->s, y = ((const slot *)b)->s;
    return (x < y) - (x > y);
}

void tr_bench_profile_print(int steps, double step_s, double ceil_gflops) {
    qsort(g_slots, (size_t)g_nslots, sizeof *g_slots, by_time);
    double ops_s = 0.0, gemm_s = 0.0, gemm_f = 0.0;
    printf("  per-op profile, ms per step (%d steps), against a %.1f ms step and a %.1f GFLOP/s "
           "ceiling:\n",
           steps, 1e3 * step_s, ceil_gflops);
    printf("    %-34s %9s %6s %7s %9s %8s %9s\n", "op", "ms", "% step", "calls", "GFLOP/s",
           "% ceil", "ms lost");
    for (int i = 0; i < g_nslots; i++) {
        const slot *s = &g_slots[i];
        double ms = 1e3 * s->s / steps;
        ops_s += s->s / steps;
        printf("    %-34s %9.2f %6.1f %7ld", s->name, ms, 100.0 * s->s / steps / step_s,
               s->calls / steps);
        if (s->flops > 0) {
            double gf = s->flops / s->s / 1e9, at_ceil = 1e3 * s->flops / steps / ceil_gflops / 1e9;
            gemm_s += s->s / steps;
            gemm_f += s->flops / steps;
            printf(" %9.1f %7.1f%% %9.2f\n", gf, 100.0 * gf / ceil_gflops, ms - at_ceil);
        } else {
            printf(" %9s %8s %9.2f\n", "", "", ms);
        }
    }
    double gemm_ideal = gemm_f / ceil_gflops / 1e9;
    printf(
        "    GEMMs %.1f ms (%.1f at the ceiling), other ops %.1f ms, outside the table %.1f ms\n",
        1e3 * gemm_s, 1e3 * gemm_ideal, 1e3 * (ops_s - gemm_s), 1e3 * (step_s - ops_s));
}
