/* Where a training step's time goes: a copy of the CPU op table whose entries time each call
 * (GEMMs by shape), for bench_train_cpu --profile. The table is for one thread of callers. */
#ifndef TR_BENCH_OP_PROFILE_H
#define TR_BENCH_OP_PROFILE_H

#include "kernels/ops.h"

/* The CPU op table with timed entries. */
const tr_ops *tr_bench_profiled_ops(void);
/* Forgets what was timed so far (after the warm-up steps). */
void tr_bench_profile_reset(void);
/* Prints each op's time per step (steps: steps timed since the reset) against step_s, the
 * measured step, and each GEMM shape's GFLOP/s against ceil_gflops, the same run's ceiling. */
void tr_bench_profile_print(int steps, double step_s, double ceil_gflops);

#endif
