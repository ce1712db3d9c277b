/* Optimizer steps over a flat range of fp32 master parameters. */
#include <math.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threadpool.h"

typedef struct opt_ctx {
    float *p, *m, *v;
    const float *g;
    float lr, b1, b2, eps, wd, bc1, bc2, mom, gs;
    int nesterov;
} opt_ctx;

/* torch.optim.AdamW order: decay the weight first (decoupled, scaled by lr), then the Adam
 * update with bias-corrected moments. Distinct buffers and loop-invariant scalars in locals let
 * the compiler vectorise the loop (with -fno-math-errno, sqrtf becomes one instruction). Every
 * operation is a correctly rounded IEEE one and none is fused (ISO C mode: no FMA contraction),
 * so the vector loop, in any width, is bitwise the scalar loop (test_ops_scalar_order). */
static inline __attribute__((always_inline)) void adamw_loop(const opt_ctx *c, int64_t b,
                                                             int64_t e) {
    float *restrict pp = c->p, *restrict mp = c->m, *restrict vp = c->v;
    const float *restrict gp = c->g;
    const float b1 = c->b1, b2 = c->b2, lr = c->lr, eps = c->eps, bc1 = c->bc1, bc2 = c->bc2;
    const float decay = 1.0f - c->lr * c->wd, gs = c->gs;
    for (int64_t i = b; i < e; i++) {
        float g = gp[i] * gs; /* exact when gs is 1; else the clip pass's own product */
        float m = b1 * mp[i] + (1.0f - b1) * g;
        float v = b2 * vp[i] + (1.0f - b2) * g * g;
        mp[i] = m;
        vp[i] = v;
        float p = pp[i] * decay;
        pp[i] = p - lr * (m / bc1) / (sqrtf(v / bc2) + eps);
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* The same loop 16 wide: its divisions and square roots cost more than its memory traffic in
 * SSE. */
__attribute__((target("avx512f"), optimize("fp-contract=off"))) static void
adamw_loop_avx512(const opt_ctx *c, int64_t b, int64_t e) {
    adamw_loop(c, b, e);
}
#define TR_ADAMW_AVX512 1
#endif

static void adamw_range(void *vc, int64_t b, int64_t e) {
    const opt_ctx *c = vc;
#ifdef TR_ADAMW_AVX512
    if (__builtin_cpu_supports("avx512f")) {
        adamw_loop_avx512(c, b, e);
        return;
    }
#endif
    adamw_loop(c, b, e);
}

tr_status tr_cpu_adamw(float *param, const float *grad, float *m, float *v, int64_t n,
                       const tr_adamw_params *p) {
    if (!p || n < 0 || p->step < 1 || (n && (!param || !grad || !m || !v))) return TR_ERR_INVALID;
    opt_ctx c = {.p = param,
                 .g = grad,
                 .m = m,
                 .v = v,
                 .lr = p->lr,
                 .b1 = p->beta1,
                 .b2 = p->beta2,
                 .eps = p->eps,
                 .wd = p->weight_decay,
                 .gs = p->grad_scale != 0.0f ? p->grad_scale : 1.0f};
    c.bc1 = (float)(1.0 - pow(p->beta1, (double)p->step));
    c.bc2 = (float)(1.0 - pow(p->beta2, (double)p->step));
    tr_cpu_parallel_for(n, 16384, adamw_range, &c);
    return TR_OK;
}

/* torch.optim.SGD (dampening 0): with a zero-initialised buffer the first step's
 * buf = momentum*0 + g equals torch's buf = g, so no first-step special case is needed. */
static void sgd_range(void *vc, int64_t b, int64_t e) {
    opt_ctx *c = vc;
    for (int64_t i = b; i < e; i++) {
        float d = c->g[i] + c->wd * c->p[i];
        if (c->mom != 0.0f) {
            float buf = c->mom * c->m[i] + d;
            c->m[i] = buf;
            d = c->nesterov ? d + c->mom * buf : buf;
        }
        c->p[i] -= c->lr * d;
    }
}

tr_status tr_cpu_sgd(float *param, const float *grad, float *momentum_buf, int64_t n,
                     const tr_sgd_params *p) {
    if (!p || n < 0 || (n && (!param || !grad || (p->momentum != 0.0f && !momentum_buf))))
        return TR_ERR_INVALID;
    opt_ctx c = {.p = param,
                 .g = grad,
                 .m = momentum_buf,
                 .lr = p->lr,
                 .wd = p->weight_decay,
                 .mom = p->momentum,
                 .nesterov = p->nesterov};
    tr_cpu_parallel_for(n, 16384, sgd_range, &c);
    return TR_OK;
}
