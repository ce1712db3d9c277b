/* GEMM and bias: the linear layer's three products all map onto one row-major sgemm. */
#include <cblas.h>
#include <pthread.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threadpool.h"

/* OpenBLAS runs single-threaded and the pool splits the product into column (or row) panels of
 * C: one set of threads for every op, and idle ones sleep instead of spinning in OpenBLAS's
 * server loop or its inter-thread waits, which crawl when another process shares the cores.
 * Each element of C is still one sgemm's dot product over the whole k, with the same k blocking
 * and, with panel edges at multiples of TR_GEMM_PANEL (a multiple of every register tile), the
 * same micro-kernel path: the result is bitwise that of a single call, whatever the thread
 * count (test_cpu_threads). */
#define TR_GEMM_PANEL 64
/* Least m*n*k of a panel: above OpenBLAS's small-matrix and "direct" sgemm cut-offs (at most
 * 28*512*512), so a panel takes the same packed path as the whole product would. */
#define TR_GEMM_PANEL_MIN_WORK (1LL << 23)

typedef struct gemm_ctx {
    CBLAS_TRANSPOSE ta, tb;
    int m, n, k, lda, ldb, ldc, split_n;
    int64_t blocks, parts; /* the split side's TR_GEMM_PANEL-wide blocks, grouped in panels */
    float alpha, beta;
    const float *a, *b;
    float *c;
} gemm_ctx;

/* Start of panel p of g->parts over the split side: block edges, the last panel ends at lim. */
static int panel_edge(const gemm_ctx *g, int64_t p) {
    int lim = g->split_n ? g->n : g->m;
    if (p >= g->parts) return lim;
    return (int)(p * g->blocks / g->parts * TR_GEMM_PANEL);
}

static void gemm_panels(void *vctx, int64_t p0, int64_t p1) {
    const gemm_ctx *g = vctx;
    int s = panel_edge(g, p0), e = panel_edge(g, p1);
    if (s >= e) return;
    if (g->split_n) {
        const float *b = g->tb == CblasTrans ? g->b + (int64_t)s * g->ldb : g->b + s;
        cblas_sgemm(CblasRowMajor, g->ta, g->tb, g->m, e - s, g->k, g->alpha, g->a, g->lda, b,
                    g->ldb, g->beta, g->c + s, g->ldc);
    } else {
        const float *a = g->ta == CblasTrans ? g->a + s : g->a + (int64_t)s * g->lda;
        cblas_sgemm(CblasRowMajor, g->ta, g->tb, e - s, g->n, g->k, g->alpha, a, g->lda, g->b,
                    g->ldb, g->beta, g->c + (int64_t)s * g->ldc, g->ldc);
    }
}

static int narrowest_panel(const gemm_ctx *g) {
    int w = panel_edge(g, 1) - panel_edge(g, 0);
    for (int64_t p = 1; p < g->parts; p++) {
        int wp = panel_edge(g, p + 1) - panel_edge(g, p);
        if (wp < w) w = wp;
    }
    return w;
}

static void blas_single_thread(void) {
    openblas_set_num_threads(1);
}

tr_status tr_cpu_gemm(tr_transpose ta, tr_transpose tb, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc) {
    if (m < 0 || n < 0 || k < 0) return TR_ERR_INVALID;
    if (m == 0 || n == 0) return TR_OK;
    /* Row-major: op(A) is m x k, so A itself is m x k (lda >= k) or k x m (lda >= m). */
    if (lda < (ta == TR_TRANS ? m : k) || ldb < (tb == TR_TRANS ? k : n) || ldc < n)
        return TR_ERR_INVALID;
    if (!c || (k > 0 && (!a || !b))) return TR_ERR_INVALID;
    if (k == 0) { /* BLAS semantics: beta == 0 overwrites C, even NaN */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(int64_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(int64_t)i * ldc + j];
        return TR_OK;
    }
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, blas_single_thread);
    /* Split the side whose operand is larger, so the operand every panel re-reads is the
     * smaller one (panels over n all read A, panels over m all read B). */
    gemm_ctx g = {.ta = ta == TR_TRANS ? CblasTrans : CblasNoTrans,
                  .tb = tb == TR_TRANS ? CblasTrans : CblasNoTrans,
                  .m = m,
                  .n = n,
                  .k = k,
                  .lda = lda,
                  .ldb = ldb,
                  .ldc = ldc,
                  .split_n = n >= m,
                  .alpha = alpha,
                  .beta = beta,
                  .a = a,
                  .b = b,
                  .c = c};
    int lim = g.split_n ? n : m;
    int64_t other = g.split_n ? m : n;
    g.blocks = (lim + TR_GEMM_PANEL - 1) / TR_GEMM_PANEL;
    /* One panel per thread: every panel packs the whole shared operand again (for the 50k-row
     * output layer's input gradient that is the [rows, 50304] logits gradient), and two panels
     * per thread measured 5-25% slower on the step's shapes (bench_train_cpu --profile). When a
     * worker is slow to start the caller still takes its panel (tr_cpu_parallel_for). */
    g.parts = (int64_t)tr_cpu_num_threads();
    if (g.parts > g.blocks) g.parts = g.blocks;
    while (g.parts >= 2 && (int64_t)narrowest_panel(&g) * other * k < TR_GEMM_PANEL_MIN_WORK)
        g.parts--;
    if (g.parts < 2) g.parts = 1;
    tr_cpu_parallel_for(g.parts, 1, gemm_panels, &g);
    return TR_OK;
}

typedef struct bias_ctx {
    float *y;
    const float *bias;
    const float *dy;
    int rows, cols;
} bias_ctx;

static void bias_add_rows(void *vctx, int64_t r0, int64_t r1) {
    bias_ctx *c = vctx;
    for (int64_t r = r0; r < r1; r++) {
        float *yr = c->y + r * c->cols;
        for (int j = 0; j < c->cols; j++) yr[j] += c->bias[j];
    }
}

tr_status tr_cpu_bias_add(float *y, const float *bias, int rows, int cols) {
    if (rows < 0 || cols < 0 || (rows && cols && (!y || !bias))) return TR_ERR_INVALID;
    bias_ctx c = {.y = y, .bias = bias, .rows = rows, .cols = cols};
    tr_cpu_parallel_for(rows, 16, bias_add_rows, &c);
    return TR_OK;
}

/* Split over columns rather than rows: each column's sum is owned by one task, which keeps the
 * result deterministic without per-thread partial buffers. A task walks the rows once for
 * TR_COL_BLOCK adjacent columns (contiguous loads, one vector of sums) instead of once per
 * column down a stride; each column is still summed over the rows in order, bitwise as before. */
#define TR_COL_BLOCK 16

static void bias_grad_cols(void *vctx, int64_t b0, int64_t b1) {
    bias_ctx *c = vctx;
    for (int64_t b = b0; b < b1; b++) {
        int64_t j0 = b * TR_COL_BLOCK;
        const float *dy = c->dy + j0;
        if (j0 + TR_COL_BLOCK <= c->cols) {
            double s[TR_COL_BLOCK] = {0};
            for (int r = 0; r < c->rows; r++)
                for (int l = 0; l < TR_COL_BLOCK; l++) s[l] += dy[(int64_t)r * c->cols + l];
            for (int l = 0; l < TR_COL_BLOCK; l++) c->y[j0 + l] += (float)s[l];
            continue;
        }
        for (int64_t j = j0; j < c->cols; j++) {
            double s = 0.0;
            for (int r = 0; r < c->rows; r++) s += c->dy[(int64_t)r * c->cols + j];
            c->y[j] += (float)s;
        }
    }
}

tr_status tr_cpu_bias_grad(float *dbias, const float *dy, int rows, int cols) {
    if (rows < 0 || cols < 0 || (rows && cols && (!dbias || !dy))) return TR_ERR_INVALID;
    bias_ctx c = {.y = dbias, .dy = dy, .rows = rows, .cols = cols};
    tr_cpu_parallel_for((cols + TR_COL_BLOCK - 1) / TR_COL_BLOCK, 1, bias_grad_cols, &c);
    return TR_OK;
}
