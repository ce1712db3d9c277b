/* See runtime/model/linear.h. */
#include "runtime/model/linear.h"

#include "runtime/model/adapters/dora.h"
#include "runtime/model/internal.h"
#include "runtime/model/tensor_parallel.h"

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

/* C = x op(W) with the activation x (fp32, or already half precision: a saved activation) and
 * the layer's weight as B: the model's half-precision weight copy when it keeps one (made once
 * per parameter change), else the fp32 weight rounded by the GEMM. bias (forward only, NULL
 * otherwise) is added to the product; through gemm_lowp_ex it is fused into the GEMM, which adds
 * it as bias_add would. */
static tr_status weight_gemm(const tr_ops *ops, const tr_linear *l, tr_transpose tb, int m, int n,
                             int k, tr_gemm_operand x, float *c, const float *bias) {
    const uint16_t *wc = NULL;
    TR_TRY(tr_model_wcopy_of(l->model, l->w, &wc));
    if (wc || x.lowp) {
        if (!l->model->spec.lowp) return TR_ERR_INTERNAL;
        tr_gemm_operand b = {wc ? (const void *)wc : (const void *)l->w, l->in, wc != NULL};
        return ops->gemm_lowp_ex((tr_lowp)l->model->spec.lowp, TR_NOTRANS, tb, m, n, k, 1.0f, x, b,
                                 0.0f, c, n, bias);
    }
    TR_TRY(lin_gemm(ops, l, TR_NOTRANS, tb, m, n, k, x.p, x.ld, l->w, l->in, 0.0f, c, n));
    return bias ? ops->bias_add(c, bias, m, n) : TR_OK;
}

/* One GEMM of the layer (forward: y = x W^T + bias; data gradient: dx = dy W) restricted to rows,
 * for the pieces of tensor-parallel communication overlap: x [rows, k] is the operand, y
 * [rows, n] the output. The rows are computed independently by the GEMM, so a piece's rows are
 * those of the whole GEMM. */
typedef struct rows_gemm {
    const tr_ops *ops;
    const tr_linear *l;
    tr_transpose tb;
    int n, k;
    tr_gemm_operand x;
    float *y;
    const float *bias;
} rows_gemm;

static tr_status rows_gemm_fn(void *ctx, int64_t row, int n, float *dst) {
    const rows_gemm *g = ctx;
    size_t es = g->x.lowp ? sizeof(uint16_t) : sizeof(float);
    tr_gemm_operand x = {(const char *)g->x.p + (size_t)row * (size_t)g->x.ld * es, g->x.ld,
                         g->x.lowp};
    return weight_gemm(g->ops, g->l, g->tb, n, g->n, g->k, x, dst ? dst : g->y + row * g->n,
                       g->bias);
}

/* LoRA's low-rank path, in fp32 (the adapters are small), as Megatron's ParallelLinearAdapter
 * splits it under TP: a column-parallel layer's adapter holds all of A and its rows of B, a
 * row-parallel layer's its columns of A (summed over TP into u) and all of B. Inside the TP
 * region the adapter sees whole sequences, as the base GEMM does; with sequence parallelism
 * only what leaves the region (a row layer's output, a column layer's input gradient) is this
 * rank's sequence chunk. u = x A^T [rows, rank]. */
static tr_status lora_down(const tr_ops *ops, const tr_linear *l, const float *x, int rows) {
    int r = l->model->spec.lora_rank;
    TR_TRY(ops->gemm(TR_NOTRANS, TR_TRANS, rows, r, l->in, 1.0f, x, l->in, l->lora_a, l->in, 0.0f,
                     l->model->lora_u, r));
    if (l->kind != TR_LINEAR_ROW) return TR_OK;
    return tr_tp_all_reduce(l->model, l->model->lora_u, (int64_t)rows * r);
}

/* The adapter's input: x, or x through the adapter dropout (peft.dropout, position "pre"). */
static tr_status lora_input(const tr_linear *l, const float *x, int rows, const float **xa) {
    *xa = x;
    if (!tr_lora_dropout_on(l->model)) return TR_OK;
    *xa = l->model->lora_x;
    return tr_lora_dropout(l, l->model->lora_x, x, rows, true);
}

/* Sequence parallel: the first row of sequence b's chunk on this rank, in a whole-sequence
 * matrix, and how many rows the chunk has. */
static int64_t chunk_row(const tr_model *m, int b, int *chunk) {
    *chunk = m->spec.seq / m->tp.size;
    return (int64_t)b * m->spec.seq + (int64_t)m->tp.rank * *chunk;
}

/* y += scale * u B^T; B = 0 (its initial value) adds exact zeros, so the output is bitwise the
 * base layer's. rows: whole sequences (x, u); a sequence-parallel row layer's y holds this
 * rank's chunk of each, so only those rows of u go out, unless `whole` (DoRA's recomputed
 * pre-scale output covers whole sequences). */
static tr_status lora_fwd(const tr_ops *ops, const tr_linear *l, const float *x, float *y, int rows,
                          bool whole) {
    const tr_model *m = l->model;
    int r = m->spec.lora_rank;
    float scale = m->spec.lora_scale;
    TR_TRY(lora_input(l, x, rows, &x));
    TR_TRY(lora_down(ops, l, x, rows));
    if (whole || !(l->kind == TR_LINEAR_ROW && seq_split(l)))
        return ops->gemm(TR_NOTRANS, TR_TRANS, rows, l->out, r, scale, m->lora_u, r, l->lora_b, r,
                         1.0f, y, l->out);
    for (int b = 0; b < m->batch; b++) {
        int chunk;
        int64_t at = chunk_row(m, b, &chunk);
        TR_TRY(ops->gemm(TR_NOTRANS, TR_TRANS, chunk, l->out, r, scale, m->lora_u + at * r, r,
                         l->lora_b, r, 1.0f, y + (int64_t)b * chunk * l->out, l->out));
    }
    return TR_OK;
}

/* Sequence parallel, a column layer: dx [local rows, in] += this rank's chunk rows of the
 * adapter's whole-sequence input gradient full [rows, in]. */
static tr_status add_chunk_rows(const tr_linear *l, float *dx, const float *full) {
    const tr_model *m = l->model;
    for (int b = 0; b < m->batch; b++) {
        int chunk;
        int64_t at = chunk_row(m, b, &chunk);
        TR_TRY(m->ops->add(dx + (int64_t)b * chunk * l->in, full + at * l->in,
                           (int64_t)chunk * l->in));
    }
    return TR_OK;
}

/* dB += scale dy^T u, du = scale dy B (summed over a column layer's output shards), dA += du^T x,
 * and dx += du A when dx is wanted: a column layer's dx is then already complete (the caller
 * adds it after the base layer's all-reduce or reduce-scatter; with sequence parallelism only
 * this rank's chunk rows of it), a row layer's is its own input shard. rows: whole sequences. */
static tr_status lora_bwd(const tr_ops *ops, const tr_linear *l, const float *x, const float *dy,
                          float *dx, int rows) {
    const tr_model *m = l->model;
    int r = m->spec.lora_rank;
    float scale = m->spec.lora_scale;
    TR_TRY(lora_input(l, x, rows, &x));
    TR_TRY(lora_down(ops, l, x, rows));
    TR_TRY(ops->gemm(TR_TRANS, TR_NOTRANS, l->out, r, rows, scale, dy, l->out, m->lora_u, r, 1.0f,
                     l->lora_db, r));
    TR_TRY(ops->gemm(TR_NOTRANS, TR_NOTRANS, rows, r, l->out, scale, dy, l->out, l->lora_b, r, 0.0f,
                     m->lora_du, r));
    if (l->kind == TR_LINEAR_COLUMN) TR_TRY(tr_tp_all_reduce(m, m->lora_du, (int64_t)rows * r));
    TR_TRY(ops->gemm(TR_TRANS, TR_NOTRANS, r, l->in, rows, 1.0f, m->lora_du, r, x, l->in, 1.0f,
                     l->lora_da, l->in));
    if (!dx) return TR_OK;
    bool sp_dx = l->kind == TR_LINEAR_COLUMN && seq_split(l);
    if (!tr_lora_dropout_on(m) && !sp_dx)
        return ops->gemm(TR_NOTRANS, TR_NOTRANS, rows, l->in, r, 1.0f, m->lora_du, r, l->lora_a,
                         l->in, 1.0f, dx, l->in);
    /* du A into the (no longer needed) dropped-out input, back through the dropout mask, then
     * added: all of it, or this rank's chunk rows. */
    TR_TRY(ops->gemm(TR_NOTRANS, TR_NOTRANS, rows, l->in, r, 1.0f, m->lora_du, r, l->lora_a, l->in,
                     0.0f, m->lora_x, l->in));
    if (tr_lora_dropout_on(m)) TR_TRY(tr_lora_dropout(l, m->lora_x, m->lora_x, rows, false));
    if (sp_dx) return add_chunk_rows(l, dx, m->lora_x);
    return ops->add(dx, m->lora_x, (int64_t)rows * l->in);
}

/* The layer's input as a GEMM operand [rows, in]; an adapter reads it in fp32. With `local` (a
 * column layer's sequence chunks) x is where their all-gather goes, pipelined with the GEMM. */
static tr_status linear_fwd(const tr_ops *ops, const tr_linear *l, tr_gemm_operand x, float *y,
                            int rows, const float *local) {
    if (x.lowp && (l->lora_a || local)) return TR_ERR_INTERNAL;
    const tr_model *m = l->model;
    bool sp_out = l->kind == TR_LINEAR_ROW && seq_split(l);
    float *out = sp_out ? m->sp_full : y;
    /* The bias goes with the GEMM unless a TP reduction of the output comes in between (a
     * row-parallel layer's partial sums); either way it is added after the product, so the
     * order of the additions is the same. */
    bool dora = l->dora_m != NULL;
    if (dora) TR_TRY(tr_dora_weight_scale(l));
    bool bias_now = l->b && !dora && (l->kind == TR_LINEAR_COLUMN || m->tp.size == 1);
    rows_gemm g = {ops, l, TR_TRANS, l->out, l->in, x, out, bias_now ? l->b : NULL};
    if (local) {
        TR_TRY(tr_tp_seq_gather_overlap(m, local, (float *)x.p, l->in, rows_gemm_fn, &g));
    } else if (sp_out && (l->overlap & TR_TPO_RS)) {
        TR_TRY(tr_tp_seq_reduce_scatter_overlap(m, y, l->out, rows_gemm_fn, &g));
    } else {
        TR_TRY(weight_gemm(ops, l, TR_TRANS, rows, l->out, l->in, x, out, g.bias));
        if (sp_out)
            TR_TRY(tr_tp_seq_reduce_scatter(m, out, y, l->out));
        else if (l->kind == TR_LINEAR_ROW)
            TR_TRY(tr_tp_all_reduce(m, y, (int64_t)rows * l->out));
    }
    int y_rows = sp_out ? tr_tp_local_rows(m) : rows;
    if (dora) { /* (m / ||V||) * (base + adapter), then the bias */
        if (l->lora_a) TR_TRY(lora_fwd(ops, l, x.p, y, rows, false));
        TR_TRY(ops->col_scale(y, l->dora_scale, y_rows, l->out));
        return l->b ? ops->bias_add(y, l->b, y_rows, l->out) : TR_OK;
    }
    if (l->b && !bias_now) TR_TRY(ops->bias_add(y, l->b, y_rows, l->out));
    if (l->lora_a) TR_TRY(lora_fwd(ops, l, x.p, y, rows, false));
    return TR_OK;
}

/* DoRA's pre-scale output z = x W^T + scale x A^T B^T over whole sequences, into the model's
 * scratch: the forward's own GEMMs and reduction again, instead of a stored [rows, out]. */
static tr_status dora_preact(const tr_ops *ops, const tr_linear *l, tr_gemm_operand x, int rows) {
    float *z = l->model->dora_z;
    TR_TRY(weight_gemm(ops, l, TR_TRANS, rows, l->out, l->in, x, z, NULL));
    if (l->kind == TR_LINEAR_ROW) TR_TRY(tr_tp_all_reduce(l->model, z, (int64_t)rows * l->out));
    return l->lora_a ? lora_fwd(ops, l, x.p, z, rows, true) : TR_OK;
}

/* dW += dy^T x: a half-precision x is a ready operand, an fp32 one is rounded by the GEMM. */
static tr_status weight_grad(const tr_ops *ops, const tr_linear *l, tr_gemm_operand x,
                             const float *dy, int rows) {
    if (!x.lowp)
        return lin_gemm(ops, l, TR_TRANS, TR_NOTRANS, l->out, l->in, rows, dy, l->out, x.p, l->in,
                        1.0f, l->dw, l->in);
    if (!l->model->spec.lowp) return TR_ERR_INTERNAL;
    tr_gemm_operand a = {dy, l->out, false};
    return ops->gemm_lowp_ex((tr_lowp)l->model->spec.lowp, TR_TRANS, TR_NOTRANS, l->out, l->in,
                             rows, 1.0f, a, x, 1.0f, l->dw, l->in, NULL);
}

/* The data-gradient GEMM dx = dy W of `rows` rows into y, or by rows into the overlap's pieces. */
static rows_gemm dgrad_rows(const tr_ops *ops, const tr_linear *l, const float *dy, float *y) {
    return (rows_gemm){ops, l, TR_NOTRANS, l->in, l->out, {dy, l->out, false}, y, NULL};
}

/* With tensor-parallel overlap a row layer's data-gradient GEMM runs piece by piece as the output
 * gradient's all-gather arrives (AG), and a column layer's input-gradient reduce-scatter goes
 * out piece by piece behind its GEMM (RS_DGRAD) or whole during the weight-gradient GEMM
 * (BULK_WGRAD). The GEMMs and the sums are the same, only their order changes. */
static tr_status linear_bwd(const tr_ops *ops, const tr_linear *l, tr_gemm_operand x,
                            const float *dy, float *dx, int rows) {
    if (x.lowp && l->lora_a) return TR_ERR_INTERNAL;
    const tr_model *m = l->model;
    bool dx_done = false;
    if (l->kind == TR_LINEAR_ROW && seq_split(l)) {
        /* The whole sequence's output gradient; the bias gradient from it is complete. */
        if (dx && !l->dora_m && (l->overlap & TR_TPO_AG)) {
            rows_gemm g = dgrad_rows(ops, l, m->sp_full, dx);
            TR_TRY(tr_tp_seq_gather_overlap(m, dy, m->sp_full, l->out, rows_gemm_fn, &g));
            dx_done = true;
        } else {
            TR_TRY(tr_tp_seq_gather(m, dy, m->sp_full, l->out));
        }
        dy = m->sp_full;
    }
    if (l->db) TR_TRY(ops->bias_grad(l->db, dy, rows, l->out));
    if (l->dora_m) { /* the magnitude's gradient; below, dy through the scale */
        TR_TRY(dora_preact(ops, l, x, rows));
        TR_TRY(tr_dora_backward(l, dy, m->dora_z, rows));
        dy = m->dora_z;
    }
    bool sp_dx = dx && l->kind == TR_LINEAR_COLUMN && seq_split(l);
    tr_comm_request *rs = NULL;
    if (sp_dx && (l->overlap & TR_TPO_RS_DGRAD)) {
        rows_gemm g = dgrad_rows(ops, l, dy, NULL);
        TR_TRY(tr_tp_seq_reduce_scatter_overlap(m, dx, l->in, rows_gemm_fn, &g));
        dx_done = true;
    } else if (sp_dx && (l->overlap & TR_TPO_BULK_WGRAD)) {
        TR_TRY(weight_gemm(ops, l, TR_NOTRANS, rows, l->in, l->out,
                           (tr_gemm_operand){dy, l->out, false}, m->sp_full, NULL));
        TR_TRY(tr_tp_seq_ireduce_scatter(m, m->sp_full, dx, l->in, &rs));
        dx_done = true;
    }
    tr_status st = l->dw ? weight_grad(ops, l, x, dy, rows) : TR_OK;
    tr_status w = rs ? tr_comm_wait(m->comm, &rs) : TR_OK;
    TR_TRY(st);
    TR_TRY(w);
    if (!dx) return l->lora_a ? lora_bwd(ops, l, x.p, dy, NULL, rows) : TR_OK;
    if (!dx_done) {
        float *out = sp_dx ? m->sp_full : dx;
        tr_gemm_operand g = {dy, l->out, false};
        TR_TRY(weight_gemm(ops, l, TR_NOTRANS, rows, l->in, l->out, g, out, NULL));
        if (sp_dx)
            TR_TRY(tr_tp_seq_reduce_scatter(m, out, dx, l->in));
        else if (l->kind == TR_LINEAR_COLUMN)
            TR_TRY(tr_tp_all_reduce(m, dx, (int64_t)rows * l->in));
    }
    return l->lora_a ? lora_bwd(ops, l, x.p, dy, dx, rows) : TR_OK;
}

tr_status tr_linear_fwd(const tr_ops *ops, const tr_linear *l, const float *x, float *y, int rows) {
    return linear_fwd(ops, l, (tr_gemm_operand){x, l->in, false}, y, rows, NULL);
}

tr_status tr_linear_fwd_gather(const tr_ops *ops, const tr_linear *l, const float *local,
                               float *full, float *y, int rows) {
    return linear_fwd(ops, l, (tr_gemm_operand){full, l->in, false}, y, rows, local);
}

tr_status tr_linear_bwd(const tr_ops *ops, const tr_linear *l, const float *x, const float *dy,
                        float *dx, int rows) {
    return linear_bwd(ops, l, (tr_gemm_operand){x, l->in, false}, dy, dx, rows);
}

tr_status tr_linear_fwd_half(const tr_ops *ops, const tr_linear *l, const uint16_t *x, float *y,
                             int rows) {
    return linear_fwd(ops, l, (tr_gemm_operand){x, l->in, true}, y, rows, NULL);
}

tr_status tr_linear_bwd_half(const tr_ops *ops, const tr_linear *l, const uint16_t *x,
                             const float *dy, float *dx, int rows) {
    return linear_bwd(ops, l, (tr_gemm_operand){x, l->in, true}, dy, dx, rows);
}

/* A linear layer without adapter (LoRA fills its adapter fields). */
static tr_linear base_linear(const float *w, const float *b, float *dw, float *db, int in, int out,
                             tr_linear_kind kind, const tr_model *m) {
    return (tr_linear){
        .w = w, .b = b, .dw = dw, .db = db, .in = in, .out = out, .kind = kind, .model = m};
}

static tr_linear layer_linear(const tr_model *m, int layer, tr_model_linear_id id) {
    const tr_model_spec *s = &m->spec;
    const tr_layer_views *p = &m->p.layers[layer], *g = &m->g.layers[layer];
    int hd = s->heads * s->head_dim;
    switch (id) {
    case TR_LIN_QKV:
        return base_linear(p->qkv_w, p->qkv_b, g->qkv_w, g->qkv_b, s->hidden, m->qkv_dim,
                           TR_LINEAR_COLUMN, m);
    case TR_LIN_PROJ:
        return base_linear(p->proj_w, p->proj_b, g->proj_w, g->proj_b, hd, s->hidden, TR_LINEAR_ROW,
                           m);
    case TR_LIN_FC1:
        return base_linear(p->fc1_w, p->fc1_b, g->fc1_w, g->fc1_b, s->hidden, m->fc1_dim,
                           TR_LINEAR_COLUMN, m);
    case TR_LIN_FC2:
    default:
        return base_linear(p->fc2_w, p->fc2_b, g->fc2_w, g->fc2_b, s->ffn, s->hidden, TR_LINEAR_ROW,
                           m);
    }
}

/* The overlap a layer takes part in: Megatron's tp_comm_overlap covers the four TP GEMMs of
 * a transformer layer (not the output layer); its disable options keep qkv's or fc1's forward
 * all-gather whole. */
static unsigned layer_overlap(const tr_model *m, tr_model_linear_id id) {
    unsigned b = m->spec.tp_overlap;
    if (id == TR_LIN_PROJ || id == TR_LIN_FC2) return b & (TR_TPO_AG | TR_TPO_RS);
    if ((id == TR_LIN_QKV && (b & TR_TPO_NO_QKV)) || (id == TR_LIN_FC1 && (b & TR_TPO_NO_FC1)))
        b &= ~TR_TPO_AG;
    return b & (TR_TPO_AG | TR_TPO_RS_DGRAD | TR_TPO_BULK_WGRAD);
}

/* With LoRA the base weights are frozen (no dW, no db) and targeted layers carry adapters. */
tr_linear tr_model_layer_linear(const tr_model *m, int layer, tr_model_linear_id id) {
    tr_linear l = layer_linear(m, layer, id);
    l.overlap = layer_overlap(m, id);
    if (!m->spec.lora_rank) return l;
    l.dw = l.db = NULL;
    const tr_layer_views *p = &m->p.layers[layer], *g = &m->g.layers[layer];
    l.lora_a = p->lora_a[id];
    l.lora_b = p->lora_b[id];
    l.lora_da = g->lora_a[id];
    l.lora_db = g->lora_b[id];
    l.lora_site = layer * TR_LORA_TARGETS + (int)id;
    l.dora_m = p->lora_m[id];
    l.dora_dm = g->lora_m[id];
    int64_t at = m->dora_at ? m->dora_at[l.lora_site] : -1;
    if (l.dora_m && at >= 0) {
        l.dora_scale = m->dora_scale + at;
        l.dora_inv = l.dora_scale + l.out;
    }
    return l;
}

tr_linear tr_model_output_linear(const tr_model *m) {
    return base_linear(m->p.out_w, NULL, m->spec.lora_rank ? NULL : m->g.out_w, NULL,
                       m->spec.hidden, m->spec.vocab, TR_LINEAR_COLUMN, m);
}
