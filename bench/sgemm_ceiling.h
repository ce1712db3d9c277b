/* The GEMM ceiling of a training step, measured in the bench's own run: every linear layer's
 * three products (forward, input gradient, weight gradient) at the step's shapes, each timed
 * through OpenBLAS's own threads and through the CPU backend's panel split (OpenBLAS on one
 * thread per panel), the faster kept. The ceiling is the step's GEMM FLOPs over the sum of those
 * best times: what the step would reach if it did nothing but its GEMMs. */
#ifndef TR_BENCH_SGEMM_CEILING_H
#define TR_BENCH_SGEMM_CEILING_H

#include "runtime/model/model.h"

typedef struct tr_bench_ceiling {
    double mix_gflops;  /* the step's GEMM mix */
    double best_gflops; /* its fastest single shape */
    double blas_gflops; /* the mix through OpenBLAS's threads alone */
    double gemm_gflop;  /* GEMM work of one step */
} tr_bench_ceiling;

/* rows = batch * seq; reps: timings per shape, the best kept. Returns 0 on allocation failure. */
int tr_bench_sgemm_ceiling(const tr_model_spec *s, int rows, int threads, int reps,
                           tr_bench_ceiling *out);

#endif
