/* Rotary position embedding, non-interleaved (rotate-half) layout: channel i pairs with
 * channel i + rot_dim/2, both rotated by angle pos * inv_freq[i]. */
#include <math.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threadpool.h"

tr_status tr_cpu_rope_table(float *cos_t, float *sin_t, const tr_rope_params *p, int seq,
                            int pos_offset) {
    if (!p || !cos_t || !sin_t || seq < 0 || pos_offset < 0) return TR_ERR_INVALID;
    if (p->rot_dim <= 0 || p->rot_dim % 2 || !(p->base > 1.0)) return TR_ERR_INVALID;
    if (p->llama3 && (!(p->factor > 0) || !(p->high_freq_factor > p->low_freq_factor) ||
                      !(p->low_freq_factor > 0) || !(p->original_max_position > 0)))
        return TR_ERR_INVALID;
    int half = p->rot_dim / 2;
    for (int i = 0; i < half; i++) {
        double f = tr_rope_inv_freq(p, i);
        for (int t = 0; t < seq; t++) {
            double pos = (double)(pos_offset + t);
            if (p->interp_factor > 0) pos /= p->interp_factor;
            cos_t[(int64_t)t * half + i] = (float)cos(pos * f);
            sin_t[(int64_t)t * half + i] = (float)sin(pos * f);
        }
    }
    return TR_OK;
}

typedef struct rope_ctx {
    float *y;
    const float *x, *cs, *sn;
    int seq, heads, head_dim, rot_dim;
    float sign; /* +1 forward, -1 backward: the inverse of a rotation is the rotation by -angle */
} rope_ctx;

static void rope_rows(void *vc, int64_t r0, int64_t r1) {
    rope_ctx *c = vc;
    int half = c->rot_dim / 2;
    for (int64_t r = r0; r < r1; r++) { /* r indexes (b, t) */
        int t = (int)(r % c->seq);
        const float *cs = c->cs + (int64_t)t * half, *sn = c->sn + (int64_t)t * half;
        for (int h = 0; h < c->heads; h++) {
            int64_t base = (r * c->heads + h) * c->head_dim;
            const float *x = c->x + base;
            float *y = c->y + base;
            for (int i = 0; i < half; i++) {
                float x1 = x[i], x2 = x[i + half], s = c->sign * sn[i];
                y[i] = x1 * cs[i] - x2 * s;
                y[i + half] = x2 * cs[i] + x1 * s;
            }
            if (y != x)
                for (int i = c->rot_dim; i < c->head_dim; i++) y[i] = x[i];
        }
    }
}

static tr_status rope_apply(float *y, const float *x, const float *cos_t, const float *sin_t,
                            int batch, int seq, int heads, int head_dim, int rot_dim, float sign) {
    if (batch < 0 || seq < 0 || heads <= 0 || head_dim <= 0) return TR_ERR_INVALID;
    if (rot_dim <= 0 || rot_dim % 2 || rot_dim > head_dim) return TR_ERR_INVALID;
    if (batch && seq && (!y || !x || !cos_t || !sin_t)) return TR_ERR_INVALID;
    rope_ctx c = {.y = y,
                  .x = x,
                  .cs = cos_t,
                  .sn = sin_t,
                  .seq = seq,
                  .heads = heads,
                  .head_dim = head_dim,
                  .rot_dim = rot_dim,
                  .sign = sign};
    tr_cpu_parallel_for((int64_t)batch * seq, 8, rope_rows, &c);
    return TR_OK;
}

tr_status tr_cpu_rope_fwd(float *y, const float *x, const float *cos_t, const float *sin_t,
                          int batch, int seq, int heads, int head_dim, int rot_dim) {
    return rope_apply(y, x, cos_t, sin_t, batch, seq, heads, head_dim, rot_dim, 1.0f);
}

tr_status tr_cpu_rope_bwd(float *dx, const float *dy, const float *cos_t, const float *sin_t,
                          int batch, int seq, int heads, int head_dim, int rot_dim) {
    return rope_apply(dx, dy, cos_t, sin_t, batch, seq, heads, head_dim, rot_dim, -1.0f);
}
