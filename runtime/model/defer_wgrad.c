/* Deferred output-layer weight gradients (model.defer_embedding_wgrad_compute, Megatron's
 * embedding_activation_buffer / grad_output_buffer and drain_embedding_wgrad_compute). The loss
 * part's backward of a kept microbatch computes only the input gradient of the output layer, so
 * the gradient can leave for the previous stage sooner; the microbatch's layer input and logits
 * gradient stay here, and the drain at the pipeline's flush adds dW += dy^T x for each of them
 * in the order of their backwards. With every microbatch kept, the output weight's gradient is
 * the same sequence of accumulating GEMMs as without deferral, so bitwise the same. */
#include "runtime/model/internal.h"

/* Elements of the output layer's input (whole sequences, gathered under sequence parallelism)
 * and of this rank's logits; the buffers are sized in acts.c (tr_model_defer_sizes). */
static int64_t x_elems(const tr_model *m) {
    return (int64_t)m->batch * m->spec.seq * m->spec.hidden;
}

static int64_t dy_elems(const tr_model *m) {
    return (int64_t)m->batch * m->spec.seq * m->spec.vocab;
}

tr_status tr_model_defer_keep(tr_model *m, bool *kept) {
    *kept = false;
    if (m->defer_n >= m->defer_cap) return TR_OK; /* none, or room for no more: computed now */
    int64_t xf, dyf;
    tr_model_defer_sizes(m, &xf, &dyf);
    float *x = m->defer_x + (int64_t)m->defer_n * xf;
    float *dy = m->defer_dy + (int64_t)m->defer_n * dyf;
    int64_t nx = x_elems(m), ndy = dy_elems(m);
    if (m->lnf_h)
        TR_TRY(tr_model_copy(m, x, (const float *)m->lnf_h, (nx + 1) / 2));
    else
        TR_TRY(tr_model_copy(m, x, m->spec.sequence_parallel ? m->lnf_full : m->lnf, nx));
    if (m->spec.lowp)
        TR_TRY(m->ops->cast_lowp((tr_lowp)m->spec.lowp, (uint16_t *)dy, m->logits, ndy));
    else
        TR_TRY(tr_model_copy(m, dy, m->logits, ndy));
    m->defer_n++;
    *kept = true;
    return TR_OK;
}

tr_status tr_model_drain_wgrad(tr_model *m) {
    if (!m->defer_cap) return TR_OK;
    const tr_ops *ops = m->ops;
    int rows = m->batch * m->spec.seq;
    tr_linear out = tr_model_output_linear(m);
    int64_t xf, dyf;
    tr_model_defer_sizes(m, &xf, &dyf);
    bool half_x = tr_model_half_input(m, TR_MODEL_AT_HEAD);
    for (int k = 0; k < m->defer_n; k++) {
        const float *x = m->defer_x + (int64_t)k * xf, *dy = m->defer_dy + (int64_t)k * dyf;
        if (!m->spec.lowp) {
            /* Without an input gradient the layer's backward is its weight gradient alone. */
            TR_TRY(tr_linear_bwd(ops, &out, x, dy, NULL, rows));
            continue;
        }
        /* The GEMM the layer's backward runs for dW, with the logits gradient already rounded
         * (gemm_lowp_ex: the products of the values gemm_lowp would round to). */
        tr_gemm_operand a = {dy, out.out, true}, b = {x, out.in, half_x};
        TR_TRY(ops->gemm_lowp_ex((tr_lowp)m->spec.lowp, TR_TRANS, TR_NOTRANS, out.out, out.in, rows,
                                 1.0f, a, b, 1.0f, out.dw, out.in, NULL));
    }
    m->defer_n = 0;
    return tr_model_grads_done(m, TR_MODEL_AT_OUTPUT);
}
