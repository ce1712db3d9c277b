/* See runtime/model_linear.h. */
#include "runtime/model_linear.h"

#include "runtime/tensor_parallel.h"

static bool seq_split(const tr_linear *l) {
    return l->model->spec.sequence_parallel;
}

/* Mixed precision: the GEMM sees bf16/fp16 copies of the fp32 weights and activations and
 * accumulates in fp32, as a tensor core does. */
static tr_status lin_gemm(const tr_ops *ops, const tr_linear *l, tr_transpose ta, tr_transpose tb,
                          int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                          float beta, float *c, int ldc) {
    int lowp = l->model->spec.lowp;
    if (lowp)
        return ops->gemm_lowp((tr_lowp)lowp, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    return ops->gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

tr_status tr_linear_fwd(const tr_ops *ops, const tr_linear *l, const float *x, float *y, int rows) {
    bool sp_out = l->kind == TR_LINEAR_ROW && seq_split(l);
    float *out = sp_out ? l->model->sp_full : y;
    TR_TRY(lin_gemm(ops, l, TR_NOTRANS, TR_TRANS, rows, l->out, l->in, x, l->in, l->w, l->in, 0.0f,
                    out, l->out));
    if (sp_out) {
        TR_TRY(tr_tp_seq_reduce_scatter(l->model, out, y, l->out));
        rows = tr_tp_local_rows(l->model);
    } else if (l->kind == TR_LINEAR_ROW) {
        TR_TRY(tr_tp_all_reduce(l->model, y, (int64_t)rows * l->out));
    }
    if (l->b) TR_TRY(ops->bias_add(y, l->b, rows, l->out));
    return TR_OK;
}

tr_status tr_linear_bwd(const tr_ops *ops, const tr_linear *l, const float *x, const float *dy,
                        float *dx, int rows) {
    if (l->kind == TR_LINEAR_ROW && seq_split(l)) {
        /* The whole sequence's output gradient; the bias gradient from it is complete. */
        TR_TRY(tr_tp_seq_gather(l->model, dy, l->model->sp_full, l->out));
        dy = l->model->sp_full;
    }
    TR_TRY(lin_gemm(ops, l, TR_TRANS, TR_NOTRANS, l->out, l->in, rows, dy, l->out, x, l->in, 1.0f,
                    l->dw, l->in));
    if (l->db) TR_TRY(ops->bias_grad(l->db, dy, rows, l->out));
    if (!dx) return TR_OK;
    bool sp_dx = l->kind == TR_LINEAR_COLUMN && seq_split(l);
    float *out = sp_dx ? l->model->sp_full : dx;
    TR_TRY(lin_gemm(ops, l, TR_NOTRANS, TR_NOTRANS, rows, l->in, l->out, dy, l->out, l->w, l->in,
                    0.0f, out, l->in));
    if (sp_dx) return tr_tp_seq_reduce_scatter(l->model, out, dx, l->in);
    if (l->kind == TR_LINEAR_COLUMN) return tr_tp_all_reduce(l->model, dx, (int64_t)rows * l->in);
    return TR_OK;
}
