/* Multi-token prediction's pieces below the model (see mtp.h). */
#include "runtime/mtp/mtp.h"

#include "runtime/comm/comm.h"

void tr_mtp_carve_acts(int64_t rows, int hidden, int vocab_local, bool norm_mean, bool sp,
                       tr_mtp_acts *a, tr_mtp_carve_fn carve, void *ctx) {
    int64_t n = rows * hidden;
    *a = (tr_mtp_acts){0};
    a->ids = (int32_t *)carve(ctx, rows); /* int32 and float are both 4 bytes */
    a->targets = (int32_t *)carve(ctx, rows);
    a->emb = carve(ctx, n);
    a->en = carve(ctx, n);
    a->en_mean = norm_mean ? carve(ctx, rows) : NULL;
    a->en_rstd = carve(ctx, rows);
    a->hn = carve(ctx, n);
    a->hn_mean = norm_mean ? carve(ctx, rows) : NULL;
    a->hn_rstd = carve(ctx, rows);
    a->cat = carve(ctx, 2 * n);
    a->y = carve(ctx, n);
    a->h = carve(ctx, n);
    a->h_mean = norm_mean ? carve(ctx, rows) : NULL;
    a->h_rstd = carve(ctx, rows);
    a->h_full = sp ? carve(ctx, n) : NULL;
    a->logits = carve(ctx, rows * vocab_local);
    a->ce_stats = carve(ctx, 4 * rows);
    a->losses = carve(ctx, rows);
    a->dloss = carve(ctx, rows);
    a->loss = carve(ctx, 1);
}

void tr_mtp_carve_scratch(int64_t rows, int hidden, int depths, tr_mtp_scratch *sc,
                          tr_mtp_carve_fn carve, void *ctx) {
    int64_t n = rows * hidden;
    sc->gather = carve(ctx, n);
    sc->dcat = carve(ctx, 2 * n);
    sc->dh = carve(ctx, n);
    sc->de = carve(ctx, n);
    sc->sum = carve(ctx, depths);
}

int64_t tr_mtp_shift(const int32_t *src, int32_t *dst, int batch, int seq, int k, int32_t fill) {
    int64_t valid = 0;
    for (int b = 0; b < batch; b++)
        for (int t = 0; t < seq; t++) {
            int64_t i = (int64_t)b * seq + t;
            dst[i] = t + k < seq ? src[i + k] : fill;
            valid += dst[i] >= 0;
        }
    return valid;
}

/* In mixed precision on bf16/fp16 copies of both operands, as the model's linear layers. */
static tr_status gemm(const tr_mtp_run *r, tr_transpose ta, tr_transpose tb, int64_t m, int64_t n,
                      int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float beta, float *c, int64_t ldc) {
    if (r->lowp)
        return r->ops->gemm_lowp((tr_lowp)r->lowp, ta, tb, (int)m, (int)n, (int)k, 1.0f, a,
                                 (int)lda, b, (int)ldb, beta, c, (int)ldc);
    return r->ops->gemm(ta, tb, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, beta, c,
                        (int)ldc);
}

tr_status tr_mtp_proj_fwd(const tr_mtp_run *r, const float *w, const tr_mtp_acts *a,
                          const float *en, const float *hn, float *out) {
    const tr_ops *o = r->ops;
    int64_t C = r->hidden, rows = r->rows, cl = C / r->tp;
    TR_TRY(o->copy_2d(a->cat, 2 * C, en, C, rows, C));
    TR_TRY(o->copy_2d(a->cat + C, 2 * C, hn, C, rows, C));
    float *local = r->tp > 1 ? r->sc->gather : out;
    TR_TRY(
        gemm(r, TR_NOTRANS, TR_TRANS, rows, cl, 2 * C, a->cat, 2 * C, w, 2 * C, 0.0f, local, cl));
    if (r->tp <= 1) return TR_OK;
    /* Each rank's columns, then [rank][rows][C / tp] -> [rows][C]. */
    TR_TRY(tr_comm_all_gather(r->comm, r->group, local, out, (size_t)(rows * cl), TR_COMM_F32));
    TR_TRY(o->copy_2d(r->sc->gather, C, out, C, rows, C)); /* out is the blocks now */
    for (int64_t k = 0; k < r->tp; k++)
        TR_TRY(o->copy_2d(out + k * cl, C, r->sc->gather + k * rows * cl, cl, rows, cl));
    return TR_OK;
}

tr_status tr_mtp_proj_bwd(const tr_mtp_run *r, const float *w, float *dw, const tr_mtp_acts *a,
                          const float *dout) {
    int64_t C = r->hidden, rows = r->rows, cl = C / r->tp;
    const float *dy = dout + (int64_t)r->rank * cl; /* this rank's columns, stride C */
    TR_TRY(gemm(r, TR_TRANS, TR_NOTRANS, cl, 2 * C, rows, dy, C, a->cat, 2 * C, 1.0f, dw, 2 * C));
    TR_TRY(gemm(r, TR_NOTRANS, TR_NOTRANS, rows, 2 * C, cl, dy, C, w, 2 * C, 0.0f, r->sc->dcat,
                2 * C));
    if (r->tp <= 1 || r->sp) return TR_OK;
    return tr_comm_all_reduce_inplace(r->comm, r->group, r->sc->dcat, (size_t)(rows * 2 * C),
                                      TR_COMM_F32, TR_COMM_SUM);
}
