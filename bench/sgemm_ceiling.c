#include "bench/sgemm_ceiling.h"

#include <cblas.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/ops.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct shape {
    int out, in, count; /* a linear layer [out, in], `count` of them per step */
} shape;

static int step_shapes(const tr_model_spec *s, shape *sh) {
    int hd = s->heads * s->head_dim, kv = s->groups * s->head_dim, n = 0;
    sh[n++] = (shape){hd + 2 * kv, s->hidden, s->num_layers};
    sh[n++] = (shape){s->hidden, hd, s->num_layers};
    sh[n++] = (shape){(s->swiglu ? 2 : 1) * s->ffn, s->hidden, s->num_layers};
    sh[n++] = (shape){s->hidden, s->ffn, s->num_layers};
    sh[n++] = (shape){s->vocab, s->hidden, 1};
    return n;
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((i * 2654435761u + seed) % 2001u) / 2000.0f - 0.5f;
}

/* The three products of y = x W^T in row-major terms: forward gemm(N,T), dx = dy W gemm(N,N),
 * dW += dy^T x gemm(T,N) with beta 1, as runtime/model/linear.c calls them. */
static double time_one(int which, int pool, int rows, const shape *sh, const float *x,
                       const float *w, const float *dy, float *y, float *dx, float *dw) {
    const tr_ops *ops = tr_ops_cpu();
    double t = now_s();
    if (which == 0) {
        if (pool)
            ops->gemm(TR_NOTRANS, TR_TRANS, rows, sh->out, sh->in, 1.0f, x, sh->in, w, sh->in, 0.0f,
                      y, sh->out);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, sh->out, sh->in, 1.0f, x,
                        sh->in, w, sh->in, 0.0f, y, sh->out);
    } else if (which == 1) {
        if (pool)
            ops->gemm(TR_NOTRANS, TR_NOTRANS, rows, sh->in, sh->out, 1.0f, dy, sh->out, w, sh->in,
                      0.0f, dx, sh->in);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, sh->in, sh->out, 1.0f, dy,
                        sh->out, w, sh->in, 0.0f, dx, sh->in);
    } else {
        if (pool)
            ops->gemm(TR_TRANS, TR_NOTRANS, sh->out, sh->in, rows, 1.0f, dy, sh->out, x, sh->in,
                      1.0f, dw, sh->in);
        else
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, sh->out, sh->in, rows, 1.0f, dy,
                        sh->out, x, sh->in, 1.0f, dw, sh->in);
    }
    return now_s() - t;
}

int tr_bench_sgemm_ceiling(const tr_model_spec *s, int rows, int threads, int reps,
                           tr_bench_ceiling *out) {
    shape sh[5];
    int ns = step_shapes(s, sh);
    double flops = 0.0, t_mix = 0.0, t_blas = 0.0, best = 0.0;
    for (int i = 0; i < ns; i++) {
        size_t nw = (size_t)sh[i].out * sh[i].in;
        float *x = malloc((size_t)rows * sh[i].in * sizeof(float));
        float *dx = malloc((size_t)rows * sh[i].in * sizeof(float));
        float *y = malloc((size_t)rows * sh[i].out * sizeof(float));
        float *dy = malloc((size_t)rows * sh[i].out * sizeof(float));
        float *w = malloc(nw * sizeof(float)), *dw = calloc(nw, sizeof(float));
        if (!x || !dx || !y || !dy || !w || !dw) {
            free(x), free(dx), free(y), free(dy), free(w), free(dw);
            return 0;
        }
        fill(x, (size_t)rows * sh[i].in, 1);
        fill(dy, (size_t)rows * sh[i].out, 2);
        fill(w, nw, 3);
        double f = 2.0 * rows * (double)nw; /* each of the three products */
        for (int which = 0; which < 3; which++) {
            double tb = 1e30, tp = 1e30;
            for (int r = 0; r < reps; r++) {
                openblas_set_num_threads(threads);
                double t = time_one(which, 0, rows, &sh[i], x, w, dy, y, dx, dw);
                if (t < tb) tb = t;
                openblas_set_num_threads(1); /* what the CPU backend runs OpenBLAS with */
                t = time_one(which, 1, rows, &sh[i], x, w, dy, y, dx, dw);
                if (t < tp) tp = t;
            }
            double t = tb < tp ? tb : tp;
            if (f / t > best) best = f / t;
            flops += f * sh[i].count;
            t_mix += t * sh[i].count;
            t_blas += tb * sh[i].count;
        }
        free(x), free(dx), free(y), free(dy), free(w), free(dw);
    }
    out->gemm_gflop = flops / 1e9;
    out->mix_gflops = flops / t_mix / 1e9;
    out->blas_gflops = flops / t_blas / 1e9;
    out->best_gflops = best / 1e9;
    return 1;
}
