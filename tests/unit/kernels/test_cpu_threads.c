/* The CPU backend's threads: the pool runs every index of every job exactly once (also when
 * workers wake late, after their job is gone), nested calls run inline, the thread count follows
 * the affinity mask, and the GEMM split over the pool gives bitwise the product of one
 * single-threaded sgemm call. The pool is forced to 4 threads so the splits happen on any
 * machine. */
#include <cblas.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/threadpool.h"
#include "kernels/ops.h"
#include "tests/unit/harness.h"

#define MAXN 2048

typedef struct count_ctx {
    atomic_int hits[MAXN];
} count_ctx;

static void count_task(void *vc, int64_t b, int64_t e) {
    count_ctx *c = vc;
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

static void test_every_index_once(void) {
    static count_ctx c;
    for (int job = 0; job < 20000; job++) {
        int n = 1 + (job * 7919) % MAXN, grain = 1 + job % 5;
        if (job % 3) n = 1 + job % 40; /* many short jobs: late wake-ups meet newer jobs */
        for (int i = 0; i < n; i++) atomic_store(&c.hits[i], 0);
        tr_cpu_parallel_for(n, grain, count_task, &c);
        for (int i = 0; i < n; i++)
            if (atomic_load(&c.hits[i]) != 1) {
                CHECK_INT_EQ(atomic_load(&c.hits[i]), 1);
                return;
            }
    }
}

/* Inside a task the inner loop runs inline (a nested submit would wait on itself). */
static void nested_task(void *vc, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) tr_cpu_parallel_for(100, 1, count_task, vc);
}

static void test_nested_inline(void) {
    static count_ctx c;
    for (int i = 0; i < 100; i++) atomic_store(&c.hits[i], 0);
    tr_cpu_parallel_for(8, 1, nested_task, &c);
    for (int i = 0; i < 100; i++) CHECK_INT_EQ(atomic_load(&c.hits[i]), 8);
}

static void test_threads_follow_affinity(void) {
    CHECK_INT_EQ(tr_cpu_num_threads(), 4); /* TR_CPU_THREADS set by main */
    cpu_set_t old, one;
    CHECK(sched_getaffinity(0, sizeof old, &old) == 0);
    CHECK(tr_cpu_available_cpus() >= 1 && tr_cpu_available_cpus() <= CPU_COUNT(&old));
    int first = 0;
    while (first < CPU_SETSIZE && !CPU_ISSET(first, &old)) first++;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
    CHECK_INT_EQ(tr_cpu_available_cpus(), 1);
    CHECK(sched_setaffinity(0, sizeof old, &old) == 0);
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((i * 2654435761u + seed * 40503u) % 4001u) / 1000.0f - 2.0f;
}

/* One shape: tr_ops_cpu()->gemm against one cblas_sgemm call on a single OpenBLAS thread. */
static int same_as_single_call(int ta, int tb, int m, int n, int k, float alpha, float beta,
                               int pad) {
    int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int lda = ac + pad, ldb = bc + pad, ldc = n + pad;
    float *a = malloc(sizeof(float) * (size_t)ar * lda),
          *b = malloc(sizeof(float) * (size_t)br * ldb);
    float *c1 = malloc(sizeof(float) * (size_t)m * ldc),
          *c2 = malloc(sizeof(float) * (size_t)m * ldc);
    fill(a, (size_t)ar * lda, 1);
    fill(b, (size_t)br * ldb, 2);
    fill(c1, (size_t)m * ldc, 3);
    memcpy(c2, c1, sizeof(float) * (size_t)m * ldc);
    CHECK_INT_EQ(tr_ops_cpu()->gemm(ta ? TR_TRANS : TR_NOTRANS, tb ? TR_TRANS : TR_NOTRANS, m, n, k,
                                    alpha, a, lda, b, ldb, beta, c1, ldc),
                 TR_OK);
    openblas_set_num_threads(1);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, a, lda, b, ldb, beta, c2, ldc);
    int same = !memcmp(c1, c2, sizeof(float) * (size_t)m * ldc);
    free(a), free(b), free(c1), free(c2);
    return same;
}

static void test_gemm_split_bitwise(void) {
    /* The step's kinds of shape (forward N,T; input gradient N,N; weight gradient T,N with
     * beta 1), smaller, plus ragged edges, strides and every transpose pair. */
    static const int shapes[][3] = {{256, 2304, 768}, {256, 768, 2304}, {2304, 768, 256},
                                    {256, 4100, 96},  {300, 1000, 700}, {1000, 130, 257},
                                    {130, 1000, 257}, {77, 3001, 129},  {64, 8192, 33},
                                    {3001, 64, 65},   {12, 20, 30},     {5000, 5, 600}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++) {
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
            int ok = same_as_single_call(t & 1, t >> 1, m, n, k, 1.0f, 0.0f, 0) &&
                     same_as_single_call(t & 1, t >> 1, m, n, k, 0.5f, 1.0f, 3);
            if (!ok)
                fprintf(stderr, "  differs: ta %d tb %d m %d n %d k %d\n", t & 1, t >> 1, m, n, k);
            CHECK(ok);
        }
}

int main(int argc, char **argv) {
    setenv("TR_CPU_THREADS", "4", 1); /* before the pool starts */
    static const tr_test_case tests[] = {
        TR_TEST(test_every_index_once), TR_TEST(test_nested_inline),
        TR_TEST(test_threads_follow_affinity), TR_TEST(test_gemm_split_bitwise)};
    return tr_test_main(argc, argv, tests, 4);
}
