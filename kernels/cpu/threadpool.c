#include "kernels/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define TR_POOL_MAX 64

/* One job at a time. `claim` packs the job's number (high 32 bits) with its next chunk (low 32),
 * so a worker that wakes after its job finished fails the compare-exchange instead of running
 * chunks of the next job with the old function. The caller waits for the chunks to be done, not
 * for the workers to check in: when the machine is shared and a worker is not scheduled, the
 * caller runs every chunk itself and never waits for a thread that holds no work. */
typedef struct pool {
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    pthread_mutex_t submit; /* one job at a time when several user threads call ops */
    int nthreads;           /* including the caller */
    uint32_t job;           /* under mu: the current job's number */
    tr_cpu_task fn;
    void *ctx;
    int64_t n, chunk;
    uint32_t nchunks;
    int caller_waiting; /* under mu */
    atomic_uint_fast64_t claim;
    atomic_uint finished; /* chunks of the current job done */
} pool;

static pool g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
                      .wake = PTHREAD_COND_INITIALIZER,
                      .done = PTHREAD_COND_INITIALIZER,
                      .submit = PTHREAD_MUTEX_INITIALIZER,
                      .nthreads = 1};
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Thread_local int t_inside_task;

/* Runs chunks of job `job` until none is left; returns how many this thread ran. */
static uint32_t run_chunks(pool *p, uint32_t job, tr_cpu_task fn, void *ctx, int64_t n,
                           int64_t chunk, uint32_t nchunks) {
    uint32_t ran = 0;
    uint_fast64_t cur = atomic_load(&p->claim);
    for (;;) {
        if ((uint32_t)(cur >> 32) != job || (uint32_t)cur >= nchunks) return ran;
        if (!atomic_compare_exchange_weak(&p->claim, &cur, cur + 1)) continue;
        int64_t b = (int64_t)(uint32_t)cur * chunk;
        int64_t e = b + chunk < n ? b + chunk : n;
        fn(ctx, b, e);
        ran++;
        cur = atomic_load(&p->claim);
    }
}

static void *worker(void *arg) {
    pool *p = arg;
    uint32_t seen = 0;
    t_inside_task = 1;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->job == seen) pthread_cond_wait(&p->wake, &p->mu); /* parked, no spinning */
        seen = p->job;
        tr_cpu_task fn = p->fn;
        void *ctx = p->ctx;
        int64_t n = p->n, chunk = p->chunk;
        uint32_t nchunks = p->nchunks;
        pthread_mutex_unlock(&p->mu);
        uint32_t ran = run_chunks(p, seen, fn, ctx, n, chunk, nchunks);
        pthread_mutex_lock(&p->mu);
        /* The job is still current while the caller waits for its chunks (it holds `submit`). */
        if (ran && atomic_fetch_add(&p->finished, ran) + ran == nchunks && p->caller_waiting)
            pthread_cond_signal(&p->done);
    }
    return NULL;
}

/* CPUs this process may run on: the affinity mask, capped by a cgroup CPU quota (v2 cpu.max,
 * else v1 cfs_quota/period), rounded up. A container limited to 1.5 CPUs gets 2 threads. */
static long quota_cpus(void) {
    long q = -1, per = -1;
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        char first[32];
        if (fscanf(f, "%31s %ld", first, &per) == 2 && first[0] != 'm') q = atol(first);
        fclose(f);
    } else {
        f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r");
        if (f) {
            if (fscanf(f, "%ld", &q) != 1) q = -1;
            fclose(f);
        }
        f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r");
        if (f) {
            if (fscanf(f, "%ld", &per) != 1) per = -1;
            fclose(f);
        }
    }
    if (q <= 0 || per <= 0) return -1;
    return (q + per - 1) / per;
}

int tr_cpu_available_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) n = CPU_COUNT(&set);
    long q = quota_cpus();
    if (q > 0 && q < n) n = q;
    return n < 1 ? 1 : (int)n;
}

static void pool_init(void) {
    long want = tr_cpu_available_cpus();
    const char *env = getenv("TR_CPU_THREADS");
    if (env && atoi(env) > 0) want = atoi(env);
    if (want > TR_POOL_MAX) want = TR_POOL_MAX;
    int started = 1;
    for (int i = 1; i < want; i++) {
        pthread_t th;
        if (pthread_create(&th, NULL, worker, &g_pool) != 0) break; /* fewer threads still work */
        pthread_detach(th);
        started++;
    }
    g_pool.nthreads = started;
}

int tr_cpu_num_threads(void) {
    pthread_once(&g_once, pool_init);
    return g_pool.nthreads;
}

void tr_cpu_parallel_for(int64_t n, int64_t grain, tr_cpu_task fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int nt = tr_cpu_num_threads();
    if (nt == 1 || t_inside_task || n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    /* ~4 chunks per thread balances uneven work (causal attention rows) without much overhead. */
    int64_t chunk = (n + 4 * nt - 1) / (4 * nt);
    if (chunk < grain) chunk = grain;
    uint32_t nchunks = (uint32_t)((n + chunk - 1) / chunk);

    pool *p = &g_pool;
    pthread_mutex_lock(&p->submit);
    pthread_mutex_lock(&p->mu);
    uint32_t job = ++p->job;
    if (job == 0) job = ++p->job; /* 0 is the workers' "seen nothing yet" */
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = chunk;
    p->nchunks = nchunks;
    atomic_store(&p->finished, 0);
    atomic_store(&p->claim, (uint_fast64_t)job << 32);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    t_inside_task = 1;
    uint32_t ran = run_chunks(p, job, fn, ctx, n, chunk, nchunks);
    t_inside_task = 0;

    if (atomic_fetch_add(&p->finished, ran) + ran != nchunks) {
        pthread_mutex_lock(&p->mu);
        p->caller_waiting = 1;
        while (atomic_load(&p->finished) != nchunks) pthread_cond_wait(&p->done, &p->mu);
        p->caller_waiting = 0;
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&p->submit);
}
