/* The routed experts (Megatron's SequentialMLP: one GEMM per expert over its contiguous block of
 * rows) and the shared expert, forward and backward over the op table; the layer's buffer
 * allocation. */
#include <math.h>
#include <stdlib.h>

#include "runtime/device/device.h"
#include "runtime/moe/internal.h"

/* The layer's buffers (layer.c, dispatch.c): from the device when the dims name one. */
void *tr_moe_dev_alloc(struct tr_device *dev, int64_t bytes) {
    void *p = NULL;
    if (!dev) return calloc((size_t)(bytes > 0 ? bytes : 1), 1);
    return tr_device_alloc(dev, TR_MEM_ACTIVATIONS, (size_t)bytes, &p) == TR_OK ? p : NULL;
}

void tr_moe_dev_free(struct tr_device *dev, void *p) {
    if (!p) return;
    if (dev)
        tr_device_free(dev, TR_MEM_ACTIVATIONS, p);
    else
        free(p);
}

void *tr_moe_buf_alloc(const tr_moe_layer *L, int64_t bytes) {
    return tr_moe_dev_alloc(L->d.dev, bytes);
}

void tr_moe_buf_free(const tr_moe_layer *L, void *p) {
    tr_moe_dev_free(L->d.dev, p);
}

tr_status tr_moe_gemm(const tr_moe_layer *L, bool lowp, tr_transpose ta, tr_transpose tb, int m,
                      int n, int k, const float *a, int lda, const float *b, int ldb, float beta,
                      float *c, int ldc) {
    if (m == 0 || n == 0) return TR_OK;
    if (lowp && L->d.lowp)
        return L->ops->gemm_lowp((tr_lowp)L->d.lowp, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c,
                                 ldc);
    return L->ops->gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

static tr_status act_fwd(const tr_moe_layer *L, float *y, const float *x, int rows, int ffn) {
    if (L->d.swiglu) return L->ops->swiglu_fwd(y, x, rows, ffn);
    return L->ops->gelu_fwd(y, x, (int64_t)rows * ffn, L->d.gelu_tanh);
}

static tr_status act_bwd(const tr_moe_layer *L, float *dx, const float *dy, const float *x,
                         int rows, int ffn) {
    if (L->d.swiglu) return L->ops->swiglu_bwd(dx, dy, x, rows, ffn);
    return L->ops->gelu_bwd(dx, dy, x, (int64_t)rows * ffn, L->d.gelu_tanh);
}

/* y [n, out] = x [n, in] W^T, W [out, in]. */
static tr_status lin_fwd(const tr_moe_layer *L, const float *x, const float *w, float *y, int n,
                         int out, int in, float beta) {
    return tr_moe_gemm(L, true, TR_NOTRANS, TR_TRANS, n, out, in, x, in, w, in, beta, y, out);
}

/* dW += dy^T x, and dx = dy W (beta 1: dx +=); dx NULL: none; dw NULL (frozen, LoRA): none. */
static tr_status lin_bwd(const tr_moe_layer *L, const float *x, const float *w, const float *dy,
                         float *dw, float *dx, int n, int out, int in, float beta) {
    if (dw)
        TR_TRY(
            tr_moe_gemm(L, true, TR_TRANS, TR_NOTRANS, out, in, n, dy, out, x, in, 1.0f, dw, in));
    if (!dx) return TR_OK;
    return tr_moe_gemm(L, true, TR_NOTRANS, TR_NOTRANS, n, in, out, dy, out, w, in, beta, dx, in);
}

/* Block e of r is local expert e % El (ETP's gathered rows: El blocks per expert-TP rank). */
tr_status tr_moe_experts_fwd(tr_moe_layer *L, const tr_moe_rows *r) {
    int h = L->d.hidden, F = L->s.ffn, F1 = L->fc1_dim;
    for (int e = 0; e < r->n; e++) {
        int r0 = r->off[e], n = r->off[e + 1] - r0;
        if (n == 0) continue;
        float *fc1 = r->fc1 + (int64_t)r0 * F1, *act = r->act + (int64_t)r0 * F;
        float *xp = r->xp + (int64_t)r0 * h, *ye = r->ye + (int64_t)r0 * h;
        TR_TRY(lin_fwd(L, xp, L->p.fc1[e % L->El], fc1, n, F1, h, 0.0f));
        TR_TRY(tr_moe_lora_fwd(L, TR_MOE_LORA_FC1, e, r0, xp, fc1, n));
        TR_TRY(act_fwd(L, act, fc1, n, F));
        TR_TRY(lin_fwd(L, act, L->p.fc2[e % L->El], ye, n, h, F, 0.0f));
        TR_TRY(tr_moe_lora_fwd(L, TR_MOE_LORA_FC2, e, r0, act, ye, n));
    }
    return TR_OK;
}

tr_status tr_moe_experts_act(tr_moe_layer *L, const tr_moe_rows *r) {
    int F = L->s.ffn, F1 = L->fc1_dim;
    for (int e = 0; e < r->n; e++) {
        int r0 = r->off[e], n = r->off[e + 1] - r0;
        if (n > 0) TR_TRY(act_fwd(L, r->act + (int64_t)r0 * F, r->fc1 + (int64_t)r0 * F1, n, F));
    }
    return TR_OK;
}

tr_status tr_moe_experts_bwd(tr_moe_layer *L, const tr_moe_rows *r, const float *dy_rows,
                             float *dx_rows) {
    int h = L->d.hidden, F = L->s.ffn, F1 = L->fc1_dim;
    for (int e = 0; e < r->n; e++) {
        int r0 = r->off[e], n = r->off[e + 1] - r0;
        if (n == 0) continue;
        const float *dy = dy_rows + (int64_t)r0 * h;
        float *dact = L->d_act + (int64_t)r0 * F, *dfc1 = L->d_fc1 + (int64_t)r0 * F1;
        const float *act = r->act + (int64_t)r0 * F, *xp = r->xp + (int64_t)r0 * h;
        float *dx = dx_rows + (int64_t)r0 * h;
        TR_TRY(lin_bwd(L, act, L->p.fc2[e % L->El], dy, L->g.fc2[e % L->El], dact, n, h, F, 0.0f));
        TR_TRY(tr_moe_lora_bwd(L, TR_MOE_LORA_FC2, e, r0, act, dy, dact, n));
        TR_TRY(act_bwd(L, dfc1, dact, r->fc1 + (int64_t)r0 * F1, n, F));
        TR_TRY(lin_bwd(L, xp, L->p.fc1[e % L->El], dfc1, L->g.fc1[e % L->El], dx, n, F1, h, 0.0f));
        TR_TRY(tr_moe_lora_bwd(L, TR_MOE_LORA_FC1, e, r0, xp, dfc1, dx, n));
    }
    return TR_OK;
}

static float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

tr_status tr_moe_shared_fwd(tr_moe_layer *L, tr_moe_state *st, float *y) {
    if (L->s.shared_ffn <= 0) return TR_OK;
    int T = L->T, h = L->d.hidden, F = L->s.shared_ffn, F1 = L->s_fc1_dim;
    TR_TRY(lin_fwd(L, st->x, L->p.s_fc1, st->s_fc1, T, F1, h, 0.0f));
    TR_TRY(tr_moe_lora_fwd(L, TR_MOE_LORA_FC1, -1, 0, st->x, st->s_fc1, T));
    TR_TRY(act_fwd(L, st->s_act, st->s_fc1, T, F));
    if (!L->s.shared_gate) {
        TR_TRY(lin_fwd(L, st->s_act, L->p.s_fc2, y, T, h, F, 1.0f));
        return tr_moe_lora_fwd(L, TR_MOE_LORA_FC2, -1, 0, st->s_act, y, T);
    }
    TR_TRY(lin_fwd(L, st->s_act, L->p.s_fc2, st->s_y, T, h, F, 0.0f));
    TR_TRY(tr_moe_lora_fwd(L, TR_MOE_LORA_FC2, -1, 0, st->s_act, st->s_y, T));
    /* the gate is a router-like projection: computed in fp32 */
    TR_TRY(tr_moe_gemm(L, false, TR_NOTRANS, TR_TRANS, T, 1, h, st->x, h, L->p.s_gate, h, 0.0f,
                       st->s_gate, 1));
    for (int t = 0; t < T; t++) {
        float g = st->s_gate[t] = sigmoid(st->s_gate[t]);
        for (int c = 0; c < h; c++) y[(int64_t)t * h + c] += g * st->s_y[(int64_t)t * h + c];
    }
    return TR_OK;
}

tr_status tr_moe_shared_bwd(tr_moe_layer *L, const tr_moe_state *st, const float *dy, float *dx) {
    if (L->s.shared_ffn <= 0) return TR_OK;
    int T = L->T, h = L->d.hidden, F = L->s.shared_ffn, F1 = L->s_fc1_dim;
    const float *dys = dy;
    if (L->s.shared_gate) {
        for (int t = 0; t < T; t++) {
            float g = st->s_gate[t];
            double dot = 0.0;
            for (int c = 0; c < h; c++) {
                int64_t i = (int64_t)t * h + c;
                dot += (double)dy[i] * st->s_y[i];
                L->s_dy[i] = g * dy[i];
            }
            L->s_dg[t] = (float)(dot * g * (1.0f - g));
        }
        if (L->g.s_gate)
            TR_TRY(tr_moe_gemm(L, false, TR_TRANS, TR_NOTRANS, 1, h, T, L->s_dg, 1, st->x, h, 1.0f,
                               L->g.s_gate, h));
        TR_TRY(tr_moe_gemm(L, false, TR_NOTRANS, TR_NOTRANS, T, h, 1, L->s_dg, 1, L->p.s_gate, h,
                           1.0f, dx, h));
        dys = L->s_dy;
    }
    TR_TRY(lin_bwd(L, st->s_act, L->p.s_fc2, dys, L->g.s_fc2, L->s_dact, T, h, F, 0.0f));
    TR_TRY(tr_moe_lora_bwd(L, TR_MOE_LORA_FC2, -1, 0, st->s_act, dys, L->s_dact, T));
    TR_TRY(act_bwd(L, L->s_dfc1, L->s_dact, st->s_fc1, T, F));
    TR_TRY(lin_bwd(L, st->x, L->p.s_fc1, L->s_dfc1, L->g.s_fc1, dx, T, F1, h, 1.0f));
    return tr_moe_lora_bwd(L, TR_MOE_LORA_FC1, -1, 0, st->x, L->s_dfc1, dx, T);
}
