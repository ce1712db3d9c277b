/* GeLU, SwiGLU and dropout: element-wise parallel loops. GeLU runs the vectorised kernels of
 * kernels/cpu/simd (the scalar maths in kernels/common calls tanhf/erff per element and was most
 * of a GPT-2 step's non-GEMM time); SwiGLU and dropout use the shared scalar maths. */
#include "kernels/common/activations.h"
#include "kernels/common/philox.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd/simd.h"
#include "kernels/cpu/threadpool.h"

#define TR_ACT_GRAIN 4096

typedef struct act_ctx {
    float *out;
    const float *x, *dy;
    int mode, ffn;
    float p;
    uint64_t seed, offset;
    const tr_cpu_simd *simd; /* fixed for the whole op, so all chunks use one variant */
} act_ctx;

static void gelu_fwd_range(void *vc, int64_t b, int64_t e) {
    act_ctx *c = vc;
    c->simd->gelu_fwd(c->out + b, c->x + b, e - b, c->mode);
}

static void gelu_bwd_range(void *vc, int64_t b, int64_t e) {
    act_ctx *c = vc;
    c->simd->gelu_bwd(c->out + b, c->dy + b, c->x + b, e - b, c->mode);
}

tr_status tr_cpu_gelu_fwd(float *y, const float *x, int64_t n, int tanh_approx) {
    if (n < 0 || (n && (!y || !x))) return TR_ERR_INVALID;
    act_ctx c = {.out = y, .x = x, .mode = tanh_approx != 0, .simd = tr_cpu_simd_active()};
    tr_cpu_parallel_for(n, TR_ACT_GRAIN, gelu_fwd_range, &c);
    return TR_OK;
}

tr_status tr_cpu_gelu_bwd(float *dx, const float *dy, const float *x, int64_t n, int tanh_approx) {
    if (n < 0 || (n && (!dx || !dy || !x))) return TR_ERR_INVALID;
    act_ctx c = {
        .out = dx, .x = x, .dy = dy, .mode = tanh_approx != 0, .simd = tr_cpu_simd_active()};
    tr_cpu_parallel_for(n, TR_ACT_GRAIN, gelu_bwd_range, &c);
    return TR_OK;
}

static void swiglu_fwd_rows(void *vc, int64_t r0, int64_t r1) {
    act_ctx *c = vc;
    for (int64_t r = r0; r < r1; r++) {
        const float *gate = c->x + r * 2 * c->ffn, *up = gate + c->ffn;
        float *y = c->out + r * c->ffn;
        for (int j = 0; j < c->ffn; j++) y[j] = tr_silu(gate[j]) * up[j];
    }
}

static void swiglu_bwd_rows(void *vc, int64_t r0, int64_t r1) {
    act_ctx *c = vc;
    for (int64_t r = r0; r < r1; r++) {
        const float *gate = c->x + r * 2 * c->ffn, *up = gate + c->ffn;
        const float *dy = c->dy + r * c->ffn;
        float *dgate = c->out + r * 2 * c->ffn, *dup = dgate + c->ffn;
        for (int j = 0; j < c->ffn; j++) {
            float g = gate[j], u = up[j], d = dy[j];
            dgate[j] = d * u * tr_silu_grad(g);
            dup[j] = d * tr_silu(g);
        }
    }
}

tr_status tr_cpu_swiglu_fwd(float *y, const float *x, int rows, int ffn) {
    if (rows < 0 || ffn <= 0 || (rows && (!y || !x))) return TR_ERR_INVALID;
    act_ctx c = {.out = y, .x = x, .ffn = ffn};
    tr_cpu_parallel_for(rows, 4, swiglu_fwd_rows, &c);
    return TR_OK;
}

/* dx must not alias x or dy: the gate and up halves are both read after being written. */
tr_status tr_cpu_swiglu_bwd(float *dx, const float *dy, const float *x, int rows, int ffn) {
    if (rows < 0 || ffn <= 0 || (rows && (!dx || !dy || !x))) return TR_ERR_INVALID;
    if (rows && (dx == x || dx == dy)) return TR_ERR_INVALID;
    act_ctx c = {.out = dx, .x = x, .dy = dy, .ffn = ffn};
    tr_cpu_parallel_for(rows, 4, swiglu_bwd_rows, &c);
    return TR_OK;
}

static void dropout_range(void *vc, int64_t b, int64_t e) {
    act_ctx *c = vc;
    float keep_scale = 1.0f / (1.0f - c->p);
    for (int64_t i = b; i < e; i++) {
        float u = tr_philox_uniform(c->seed, c->offset + (uint64_t)i);
        c->out[i] = u >= c->p ? c->x[i] * keep_scale : 0.0f;
    }
}

static tr_status dropout_apply(float *y, const float *x, int64_t n, float p, uint64_t seed,
                               uint64_t offset) {
    if (n < 0 || (n && (!y || !x)) || !(p >= 0.0f && p < 1.0f)) return TR_ERR_INVALID;
    act_ctx c = {.out = y, .x = x, .p = p, .seed = seed, .offset = offset};
    tr_cpu_parallel_for(n, TR_ACT_GRAIN, dropout_range, &c);
    return TR_OK;
}

tr_status tr_cpu_dropout_fwd(float *y, const float *x, int64_t n, float p, uint64_t seed,
                             uint64_t offset) {
    return dropout_apply(y, x, n, p, seed, offset);
}

/* The mask and scale are the same linear map in both directions. */
tr_status tr_cpu_dropout_bwd(float *dx, const float *dy, int64_t n, float p, uint64_t seed,
                             uint64_t offset) {
    return dropout_apply(dx, dy, n, p, seed, offset);
}
