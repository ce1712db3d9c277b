/* Forward and backward of multi-latent attention (see mla.h for the data flow). */
#include "runtime/comm/comm.h"
#include "runtime/mla/mla.h"

/* The projections' GEMMs: in mixed precision on bf16/fp16 copies of both operands with fp32
 * accumulation, as the model's linear layers (runtime/model/linear.c). */
static tr_status gemm(const tr_mla_run *r, tr_transpose ta, tr_transpose tb, int m, int n, int k,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc) {
    if (r->lowp)
        return r->ops->gemm_lowp((tr_lowp)r->lowp, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c,
                                 ldc);
    return r->ops->gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

/* y [rows, out] = x [rows, in] (leading dimension ldx) W^T, W [out, in]. */
static tr_status lin_fwd(const tr_mla_run *r, const float *x, int ldx, const float *w, float *y,
                         int rows, int out, int in) {
    return gemm(r, TR_NOTRANS, TR_TRANS, rows, out, in, x, ldx, w, in, 0.0f, y, out);
}

/* dW += dy^T x; dx = dy W (beta 0) or dx += dy W (beta 1), dx skipped when NULL. */
static tr_status lin_bwd(const tr_mla_run *r, const float *x, int ldx, const float *w, float *dw,
                         const float *dy, float *dx, float beta, int rows, int out, int in) {
    if (dw) TR_TRY(gemm(r, TR_TRANS, TR_NOTRANS, out, in, rows, dy, out, x, ldx, 1.0f, dw, in));
    if (!dx) return TR_OK;
    return gemm(r, TR_NOTRANS, TR_NOTRANS, rows, in, out, dy, out, w, in, beta, dx, in);
}

static tr_status tp_sum(const tr_mla_run *r, float *x, int64_t n) {
    if (r->tp <= 1 || !r->comm) return TR_OK;
    return tr_comm_all_reduce_inplace(r->comm, r->group, x, (size_t)n, TR_COMM_F32, TR_COMM_SUM);
}

/* The rope channels of n vectors (stride ld) between their stored interleaved order and the
 * rotate-half order of pe [n, rope_dim]: to (gather) or from (scatter) pe. */
static tr_status deinterleave(const tr_mla_run *r, float *pe, float *src, int64_t ld, int64_t n,
                              bool gather) {
    int64_t d = r->s->rope_dim, half = d / 2;
    for (int64_t i = 0; i < half; i++)
        for (int64_t odd = 0; odd < 2; odd++) {
            float *p = pe + odd * half + i, *x = src + 2 * i + odd;
            TR_TRY(gather ? r->ops->copy_2d(p, d, x, ld, n, 1)
                          : r->ops->copy_2d(x, ld, p, d, n, 1));
        }
    return TR_OK;
}

/* The rotation of x [rows, heads, rope_dim] at the tokens' positions. */
static tr_status rotate(const tr_mla_run *r, float *x, int heads, bool forward) {
    int d = r->s->rope_dim, rows = r->batch * r->seq;
    const float *c = r->sc->cos, *s = r->sc->sin;
    int batch = r->batch, seq = r->seq;
    if (r->pos_ids) { /* tables per token (filled by the forward and backward entry points) */
        c = r->sc->cos_tok;
        s = r->sc->sin_tok;
        batch = 1;
        seq = rows;
    }
    return forward ? r->ops->rope_fwd(x, x, c, s, batch, seq, heads, d, d)
                   : r->ops->rope_bwd(x, x, c, s, batch, seq, heads, d, d);
}

static tr_status token_tables(const tr_mla_run *r) {
    if (!r->pos_ids) return TR_OK;
    int half = r->s->rope_dim / 2, rows = r->batch * r->seq;
    const tr_mla_scratch *sc = r->sc;
    TR_TRY(r->ops->embedding_fwd(sc->cos_tok, r->pos_ids, sc->cos, rows, half, 0, r->seq));
    return r->ops->embedding_fwd(sc->sin_tok, r->pos_ids, sc->sin, rows, half, 0, r->seq);
}

static tr_attn_desc attn_desc(const tr_mla_run *r) {
    tr_attn_desc d = r->attn;
    d.heads = d.groups = r->heads;
    d.head_dim = tr_mla_attn_dim(r->s);
    d.scale = tr_mla_softmax_scale(r->s);
    return d;
}

static tr_status rms_fwd(const tr_mla_run *r, float *y, float *rstd, const float *x, const float *w,
                         int rows, int dim) {
    return r->ops->rmsnorm_fwd(y, rstd, x, w, rows, dim, r->eps, r->zero_centered);
}

/* The down projections and their norms into a's latents. */
static tr_status down_fwd(const tr_mla_run *r, const tr_mla_weights *w, const tr_mla_acts *a,
                          const float *x) {
    const tr_mla_spec *s = r->s;
    int rows = r->batch * r->seq, C = r->hidden, qr = s->q_lora_rank, kr = s->kv_lora_rank;
    if (qr > 0) {
        TR_TRY(lin_fwd(r, x, C, w->q_down, a->qc, rows, qr, C));
        if (s->norms) TR_TRY(rms_fwd(r, a->qcn, a->qc_rstd, a->qc, w->q_norm, rows, qr));
    }
    TR_TRY(lin_fwd(r, x, C, w->kv_down, a->kvc, rows, kr + s->rope_dim, C));
    TR_TRY(r->ops->copy_2d(a->kvl, kr, a->kvc, kr + s->rope_dim, rows, kr));
    if (s->norms) TR_TRY(rms_fwd(r, a->kvn, a->kv_rstd, a->kvl, w->kv_norm, rows, kr));
    return TR_OK;
}

tr_status tr_mla_up_fwd(const tr_mla_run *r, const tr_mla_weights *w, const tr_mla_acts *a,
                        const float *x) {
    const tr_ops *o = r->ops;
    const tr_mla_spec *s = r->s;
    const tr_mla_scratch *sc = r->sc;
    int rows = r->batch * r->seq, H = r->heads, C = r->hidden;
    int dn = s->qk_dim, dr = s->rope_dim, dv = s->v_dim, qr = s->q_lora_rank;
    int kr = s->kv_lora_rank, qd = dn + dr, kvd = dn + dv, P = tr_mla_attn_dim(s);
    int64_t nh = (int64_t)rows * H;
    TR_TRY(token_tables(r));

    /* Queries: [rows, H, dn + dr] in sc->qf. */
    if (qr > 0)
        TR_TRY(lin_fwd(r, s->norms ? a->qcn : a->qc, qr, w->q_up, sc->qf, rows, H * qd, qr));
    else
        TR_TRY(lin_fwd(r, x, C, w->q_up, sc->qf, rows, H * qd, C));
    TR_TRY(o->copy_2d(a->q, P, sc->qf, qd, nh, dn));
    TR_TRY(deinterleave(r, sc->pe, sc->qf + dn, qd, nh, true));
    TR_TRY(rotate(r, sc->pe, H, true));
    TR_TRY(o->copy_2d(a->q + dn, P, sc->pe, dr, nh, dr));
    if (P > qd) TR_TRY(o->fill_2d(a->q + qd, P, nh, P - qd, 0.0f));

    /* Keys and values from the latent; the shared rotary key copied into every head. */
    TR_TRY(lin_fwd(r, s->norms ? a->kvn : a->kvl, kr, w->kv_up, sc->kvf, rows, H * kvd, kr));
    TR_TRY(o->copy_2d(a->k, P, sc->kvf, kvd, nh, dn));
    TR_TRY(o->copy_2d(a->v, P, sc->kvf + dn, kvd, nh, dv));
    TR_TRY(deinterleave(r, sc->kpe, a->kvc + kr, kr + dr, rows, true));
    TR_TRY(rotate(r, sc->kpe, 1, true));
    for (int h = 0; h < H; h++)
        TR_TRY(o->copy_2d(a->k + (int64_t)h * P + dn, (int64_t)H * P, sc->kpe, dr, rows, dr));
    if (P > qd) TR_TRY(o->fill_2d(a->k + qd, P, nh, P - qd, 0.0f));
    if (P > dv) TR_TRY(o->fill_2d(a->v + dv, P, nh, P - dv, 0.0f));
    return TR_OK;
}

tr_status tr_mla_attn_fwd(const tr_mla_run *r, const tr_mla_acts *a, float *out) {
    int64_t nh = (int64_t)r->batch * r->seq * r->heads;
    int P = tr_mla_attn_dim(r->s);
    tr_attn_desc d = attn_desc(r);
    TR_TRY(r->ops->attention_fwd(a->o, a->lse, a->q, a->k, a->v, &d));
    return r->ops->copy_2d(out, r->s->v_dim, a->o, P, nh, r->s->v_dim);
}

tr_status tr_mla_fwd(const tr_mla_run *r, const tr_mla_weights *w, const tr_mla_acts *a,
                     const float *x, float *out) {
    TR_TRY(down_fwd(r, w, a, x));
    TR_TRY(tr_mla_up_fwd(r, w, a, x));
    return tr_mla_attn_fwd(r, a, out);
}

/* dy [rows, dim] through the optional RMSNorm of x into dx (overwritten). */
static tr_status rms_bwd(const tr_mla_run *r, float *dx, float *dw, const float *dy, const float *x,
                         const float *w, const float *rstd, int rows, int dim) {
    TR_TRY(r->ops->fill(dx, (int64_t)rows * dim, 0.0f)); /* the op accumulates dx */
    return r->ops->rmsnorm_bwd(dx, dw, dy, x, w, rstd, rows, dim, r->zero_centered);
}

tr_status tr_mla_bwd(const tr_mla_run *r, const tr_mla_weights *w, const tr_mla_weights *g,
                     const tr_mla_acts *a, const float *x, const float *dout, float *dx) {
    const tr_ops *o = r->ops;
    const tr_mla_spec *s = r->s;
    const tr_mla_scratch *sc = r->sc;
    int rows = r->batch * r->seq, H = r->heads, C = r->hidden;
    int dn = s->qk_dim, dr = s->rope_dim, dv = s->v_dim, qr = s->q_lora_rank;
    int kr = s->kv_lora_rank, qd = dn + dr, kvd = dn + dv, P = tr_mla_attn_dim(s);
    int64_t nh = (int64_t)rows * H;
    TR_TRY(token_tables(r));

    TR_TRY(o->copy_2d(sc->dout, P, dout, dv, nh, dv));
    if (P > dv) TR_TRY(o->fill_2d(sc->dout + dv, P, nh, P - dv, 0.0f));
    tr_attn_desc d = attn_desc(r);
    TR_TRY(o->attention_bwd(sc->dq, sc->dk, sc->dv, sc->dout, a->q, a->k, a->v, a->o, a->lse, &d));

    /* Keys and values: the heads' parts into kvf's layout, the shared rotary key summed over
     * the heads (this rank's; the TP sum follows). */
    TR_TRY(o->copy_2d(sc->kvf, kvd, sc->dk, P, nh, dn));
    TR_TRY(o->copy_2d(sc->kvf + dn, kvd, sc->dv, P, nh, dv));
    for (int h = 0; h < H; h++) {
        float *dst = h ? sc->pe : sc->kpe;
        TR_TRY(o->copy_2d(dst, dr, sc->dk + (int64_t)h * P + dn, (int64_t)H * P, rows, dr));
        if (h) TR_TRY(o->add(sc->kpe, sc->pe, (int64_t)rows * dr));
    }
    TR_TRY(tp_sum(r, sc->kpe, (int64_t)rows * dr));
    TR_TRY(rotate(r, sc->kpe, 1, false));
    TR_TRY(deinterleave(r, sc->kpe, sc->dkvc + kr, kr + dr, rows, false));
    const float *kvin = s->norms ? a->kvn : a->kvl;
    TR_TRY(lin_bwd(r, kvin, kr, w->kv_up, g->kv_up, sc->kvf, sc->lat, 0.0f, rows, H * kvd, kr));
    TR_TRY(tp_sum(r, sc->lat, (int64_t)rows * kr));
    const float *dkvl = sc->lat;
    if (s->norms) {
        TR_TRY(rms_bwd(r, sc->lat2, g->kv_norm, sc->lat, a->kvl, w->kv_norm, a->kv_rstd, rows, kr));
        dkvl = sc->lat2;
    }
    TR_TRY(o->copy_2d(sc->dkvc, kr + dr, dkvl, kr, rows, kr));

    /* Queries: back to qf's interleaved layout. */
    TR_TRY(o->copy_2d(sc->qf, qd, sc->dq, P, nh, dn));
    TR_TRY(o->copy_2d(sc->pe, dr, sc->dq + dn, P, nh, dr));
    TR_TRY(rotate(r, sc->pe, H, false));
    TR_TRY(deinterleave(r, sc->pe, sc->qf + dn, qd, nh, false));
    if (qr > 0) {
        const float *qin = s->norms ? a->qcn : a->qc;
        TR_TRY(lin_bwd(r, qin, qr, w->q_up, g->q_up, sc->qf, sc->lat, 0.0f, rows, H * qd, qr));
        TR_TRY(tp_sum(r, sc->lat, (int64_t)rows * qr));
        const float *dqc = sc->lat;
        if (s->norms) {
            TR_TRY(
                rms_bwd(r, sc->lat2, g->q_norm, sc->lat, a->qc, w->q_norm, a->qc_rstd, rows, qr));
            dqc = sc->lat2;
        }
        TR_TRY(lin_bwd(r, x, C, w->q_down, g->q_down, dqc, dx, 0.0f, rows, qr, C));
    } else {
        TR_TRY(lin_bwd(r, x, C, w->q_up, g->q_up, sc->qf, dx, 0.0f, rows, H * qd, C));
        TR_TRY(tp_sum(r, dx, (int64_t)rows * C)); /* column-parallel: a partial input gradient */
    }
    /* The down projections' input gradient is the same on every rank (full inputs). */
    return lin_bwd(r, x, C, w->kv_down, g->kv_down, sc->dkvc, dx, 1.0f, rows, kr + dr, C);
}
