/* A small persistent worker pool: ops split a range [0, n) into chunks and every worker (and
 * the caller) pulls chunks until none are left. Threads come from TR_CPU_THREADS, else the CPUs
 * this process may use (affinity mask and cgroup quota). Idle workers sleep on a condition
 * variable. Calls from inside a task run serially, so ops may nest safely. */
#ifndef TR_CPU_THREADPOOL_H
#define TR_CPU_THREADPOOL_H

#include <stdint.h>

typedef void (*tr_cpu_task)(void *ctx, int64_t begin, int64_t end);

/* Runs fn over [0, n) in chunks of at least `grain` items; returns after all chunks finished. */
void tr_cpu_parallel_for(int64_t n, int64_t grain, tr_cpu_task fn, void *ctx);
int tr_cpu_num_threads(void);
/* CPUs the process may run on: sched_getaffinity, capped by a cgroup CPU quota; at least 1. */
int tr_cpu_available_cpus(void);

#endif
