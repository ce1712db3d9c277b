/* See runtime/model_linear.h. */
#include "runtime/model_linear.h"

tr_status tr_linear_fwd(const tr_ops *ops, const tr_linear *l, const float *x, float *y, int rows) {
    if (l->tp.size != 1) return TR_ERR_INVALID; /* the TP collectives arrive with the TP issue */
    TR_TRY(ops->gemm(TR_NOTRANS, TR_TRANS, rows, l->out, l->in, 1.0f, x, l->in, l->w, l->in, 0.0f,
                     y, l->out));
    if (l->b) TR_TRY(ops->bias_add(y, l->b, rows, l->out));
    return TR_OK;
}

tr_status tr_linear_bwd(const tr_ops *ops, const tr_linear *l, const float *x, const float *dy,
                        float *dx, int rows) {
    if (l->tp.size != 1) return TR_ERR_INVALID;
    TR_TRY(ops->gemm(TR_TRANS, TR_NOTRANS, l->out, l->in, rows, 1.0f, dy, l->out, x, l->in, 1.0f,
                     l->dw, l->in));
    if (l->db) TR_TRY(ops->bias_grad(l->db, dy, rows, l->out));
    if (!dx) return TR_OK;
    return ops->gemm(TR_NOTRANS, TR_NOTRANS, rows, l->in, l->out, 1.0f, dy, l->out, l->w, l->in,
                     0.0f, dx, l->in);
}
