/* Flat-buffer helpers used around the model: residual add, fill, clip scale, squared norm. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threadpool.h"

#define TR_EW_GRAIN 16384

typedef struct ew_ctx {
    float *y;
    const float *x;
    float s;
} ew_ctx;

static void add_range(void *vc, int64_t b, int64_t e) {
    ew_ctx *c = vc;
    for (int64_t i = b; i < e; i++) c->y[i] += c->x[i];
}

static void fill_range(void *vc, int64_t b, int64_t e) {
    ew_ctx *c = vc;
    for (int64_t i = b; i < e; i++) c->y[i] = c->s;
}

static void scale_range(void *vc, int64_t b, int64_t e) {
    ew_ctx *c = vc;
    for (int64_t i = b; i < e; i++) c->y[i] *= c->s;
}

tr_status tr_cpu_add(float *y, const float *x, int64_t n) {
    if (n < 0 || (n && (!y || !x))) return TR_ERR_INVALID;
    ew_ctx c = {.y = y, .x = x};
    tr_cpu_parallel_for(n, TR_EW_GRAIN, add_range, &c);
    return TR_OK;
}

tr_status tr_cpu_fill(float *x, int64_t n, float value) {
    if (n < 0 || (n && !x)) return TR_ERR_INVALID;
    ew_ctx c = {.y = x, .s = value};
    tr_cpu_parallel_for(n, TR_EW_GRAIN, fill_range, &c);
    return TR_OK;
}

tr_status tr_cpu_scale(float *x, int64_t n, float s) {
    if (n < 0 || (n && !x)) return TR_ERR_INVALID;
    ew_ctx c = {.y = x, .s = s};
    tr_cpu_parallel_for(n, TR_EW_GRAIN, scale_range, &c);
    return TR_OK;
}

/* Fixed-size blocks summed in index order: the result does not depend on the thread count,
 * which keeps the global grad norm (and so clipping) reproducible across machines. */
#define TR_SSQ_BLOCK 4096

typedef struct ssq_ctx {
    const float *x;
    int64_t n;
    double *partial;
} ssq_ctx;

/* Each block is one chain of double additions in index order, which is latency-bound; eight
 * blocks advance side by side so the chains overlap, each still added in its own order: the
 * partial sums are bitwise those of one block at a time. */
#define TR_SSQ_LANES 8

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
/* Sixteen blocks side by side in two vectors of double sums, lane l taking element i of block l
 * (a gather) at step i: the same chains of additions, sixteen at a time. The squares are exact
 * in double (24-bit mantissas), and no FMA is used, so each lane is bitwise the scalar chain. */
__attribute__((target("avx512f"))) static void ssq16_avx512(const float *x, double *out) {
    const __m256i idx =
        _mm256_setr_epi32(0, TR_SSQ_BLOCK, 2 * TR_SSQ_BLOCK, 3 * TR_SSQ_BLOCK, 4 * TR_SSQ_BLOCK,
                          5 * TR_SSQ_BLOCK, 6 * TR_SSQ_BLOCK, 7 * TR_SSQ_BLOCK);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (int i = 0; i < TR_SSQ_BLOCK; i++) {
        __m512d a = _mm512_cvtps_pd(_mm256_i32gather_ps(x + i, idx, 4));
        __m512d b = _mm512_cvtps_pd(_mm256_i32gather_ps(x + 8 * TR_SSQ_BLOCK + i, idx, 4));
        s0 = _mm512_add_pd(s0, _mm512_mul_pd(a, a));
        s1 = _mm512_add_pd(s1, _mm512_mul_pd(b, b));
    }
    _mm512_storeu_pd(out, s0);
    _mm512_storeu_pd(out + 8, s1);
}
#define TR_SSQ_AVX512 1
#endif

static void ssq_blocks(void *vc, int64_t b0, int64_t b1) {
    ssq_ctx *c = vc;
    int64_t full = c->n / TR_SSQ_BLOCK; /* blocks with all TR_SSQ_BLOCK elements */
#ifdef TR_SSQ_AVX512
    if (__builtin_cpu_supports("avx512f"))
        for (; b0 + 16 <= b1 && b0 + 16 <= full; b0 += 16)
            ssq16_avx512(c->x + b0 * TR_SSQ_BLOCK, c->partial + b0);
#endif
    for (; b0 + TR_SSQ_LANES <= b1 && b0 + TR_SSQ_LANES <= full; b0 += TR_SSQ_LANES) {
        const float *x = c->x + b0 * TR_SSQ_BLOCK;
        double s[TR_SSQ_LANES] = {0};
        for (int64_t i = 0; i < TR_SSQ_BLOCK; i++)
            for (int l = 0; l < TR_SSQ_LANES; l++) {
                double v = x[l * TR_SSQ_BLOCK + i];
                s[l] += v * v;
            }
        for (int l = 0; l < TR_SSQ_LANES; l++) c->partial[b0 + l] = s[l];
    }
    for (int64_t b = b0; b < b1; b++) {
        int64_t i0 = b * TR_SSQ_BLOCK, i1 = i0 + TR_SSQ_BLOCK < c->n ? i0 + TR_SSQ_BLOCK : c->n;
        double s = 0.0;
        for (int64_t i = i0; i < i1; i++) s += (double)c->x[i] * c->x[i];
        c->partial[b] = s;
    }
}

tr_status tr_cpu_sum_squares(float *out, const float *x, int64_t n) {
    if (!out || n < 0 || (n && !x)) return TR_ERR_INVALID;
    int64_t nb = (n + TR_SSQ_BLOCK - 1) / TR_SSQ_BLOCK;
    double stackbuf[64];
    double *partial = nb <= 64 ? stackbuf : malloc((size_t)nb * sizeof *partial);
    if (!partial) return TR_ERR_NOMEM;
    ssq_ctx c = {.x = x, .n = n, .partial = partial};
    tr_cpu_parallel_for(nb, 4, ssq_blocks, &c);
    double s = 0.0;
    for (int64_t b = 0; b < nb; b++) s += partial[b];
    if (partial != stackbuf) free(partial);
    *out = (float)s;
    return TR_OK;
}

/* Row and column reductions (DoRA's weight norms and magnitude gradients): each output element
 * is one thread's sum in a fixed order, so results do not depend on the thread count. */
typedef struct rowcol_ctx {
    float *out, *y;
    const float *a, *b, *s;
    int rows, cols;
} rowcol_ctx;

static void row_ssq_range(void *vc, int64_t r0, int64_t r1) {
    rowcol_ctx *c = vc;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = c->a + r * c->cols;
        double acc = 0.0;
        for (int j = 0; j < c->cols; j++) acc += (double)x[j] * x[j];
        c->out[r] = (float)acc;
    }
}

tr_status tr_cpu_row_sum_squares(float *out, const float *x, int rows, int cols) {
    if (rows < 0 || cols < 0 || (rows && (!out || (cols && !x)))) return TR_ERR_INVALID;
    rowcol_ctx c = {.out = out, .a = x, .rows = rows, .cols = cols};
    tr_cpu_parallel_for(rows, 16, row_ssq_range, &c);
    return TR_OK;
}

static void col_scale_range(void *vc, int64_t r0, int64_t r1) {
    rowcol_ctx *c = vc;
    for (int64_t r = r0; r < r1; r++) {
        float *y = c->y + r * c->cols;
        for (int j = 0; j < c->cols; j++) y[j] *= c->s[j];
    }
}

tr_status tr_cpu_col_scale(float *y, const float *s, int rows, int cols) {
    if (rows < 0 || cols < 0 || (rows && cols && (!y || !s))) return TR_ERR_INVALID;
    rowcol_ctx c = {.y = y, .s = s, .rows = rows, .cols = cols};
    tr_cpu_parallel_for(rows, 16, col_scale_range, &c);
    return TR_OK;
}

static void col_dot_range(void *vc, int64_t j0, int64_t j1) {
    rowcol_ctx *c = vc;
    for (int64_t j = j0; j < j1; j++) {
        double acc = 0.0;
        for (int64_t r = 0; r < c->rows; r++)
            acc += (double)c->a[r * c->cols + j] * c->b[r * c->cols + j];
        c->out[j] += c->s[j] * (float)acc;
    }
}

tr_status tr_cpu_col_dot(float *out, const float *a, const float *b, const float *s, int rows,
                         int cols) {
    if (rows < 0 || cols < 0 || (cols && (!out || !s || (rows && (!a || !b)))))
        return TR_ERR_INVALID;
    rowcol_ctx c = {.out = out, .a = a, .b = b, .s = s, .rows = rows, .cols = cols};
    tr_cpu_parallel_for(cols, 64, col_dot_range, &c);
    return TR_OK;
}

tr_status tr_cpu_norm_scale(float *scale, float *inv, const float *mag, const float *sq, int n) {
    if (n < 0 || (n && (!scale || !inv || !mag || !sq))) return TR_ERR_INVALID;
    for (int i = 0; i < n; i++) {
        inv[i] = 1.0f / sqrtf(sq[i]);
        scale[i] = mag[i] * inv[i];
    }
    return TR_OK;
}
