#include "kernels/cpu/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define TR_POOL_MAX 64

typedef struct pool {
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    pthread_mutex_t submit; /* one job at a time when several user threads call ops */
    int nthreads;           /* including the caller */
    uint64_t generation;
    int busy; /* workers still inside the current job */
    tr_cpu_task fn;
    void *ctx;
    int64_t n, chunk;
    atomic_llong next;
} pool;

static pool g_pool = {.mu = PTHREAD_MUTEX_INITIALIZER,
                      .wake = PTHREAD_COND_INITIALIZER,
                      .done = PTHREAD_COND_INITIALIZER,
                      .submit = PTHREAD_MUTEX_INITIALIZER,
                      .nthreads = 1};
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Thread_local int t_inside_task;

static void run_chunks(pool *p, tr_cpu_task fn, void *ctx, int64_t n, int64_t chunk) {
    for (;;) {
        int64_t b = (int64_t)atomic_fetch_add(&p->next, chunk);
        if (b >= n) return;
        int64_t e = b + chunk < n ? b + chunk : n;
        fn(ctx, b, e);
    }
}

static void *worker(void *arg) {
    pool *p = arg;
    uint64_t seen = 0;
    t_inside_task = 1;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        seen = p->generation;
        tr_cpu_task fn = p->fn;
        void *ctx = p->ctx;
        int64_t n = p->n, chunk = p->chunk;
        pthread_mutex_unlock(&p->mu);
        run_chunks(p, fn, ctx, n, chunk);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0) pthread_cond_signal(&p->done);
    }
    return NULL;
}

static void pool_init(void) {
    long want = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("TR_CPU_THREADS");
    if (env && atoi(env) > 0) want = atoi(env);
    if (want < 1) want = 1;
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

    pool *p = &g_pool;
    pthread_mutex_lock(&p->submit);
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = chunk;
    atomic_store(&p->next, 0);
    p->busy = nt - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    t_inside_task = 1;
    run_chunks(p, fn, ctx, n, chunk);
    t_inside_task = 0;

    pthread_mutex_lock(&p->mu);
    while (p->busy > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->submit);
}
