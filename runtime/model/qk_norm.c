/* Megatron's qk_layernorm: after the QKV split and before RoPE, each head's query and key vector
 * is normalised over head_dim by the model's norm type (RMSNorm, or LayerNorm with a bias), one
 * weight [head_dim] for all query heads and one for all key heads. The rows of q [B*T*heads, D]
 * and k [B*T*groups, D] are contiguous, so the hidden-size norm ops run on them unchanged. */
#include "runtime/model/internal.h"

static tr_status norm_fwd(const tr_model *m, float *y, float *mean, float *rstd, const float *x,
                          const float *w, const float *b, int rows) {
    const tr_model_spec *s = &m->spec;
    if (s->layernorm)
        return m->ops->layernorm_fwd(y, mean, rstd, x, w, b, rows, s->head_dim, s->eps,
                                     s->zero_centered);
    return m->ops->rmsnorm_fwd(y, rstd, x, w, rows, s->head_dim, s->eps, s->zero_centered);
}

/* dx is accumulated into (the norm ops' convention): the caller zeroes it. */
static tr_status norm_bwd(const tr_model *m, float *dx, float *dw, float *db, const float *dy,
                          const float *x, const float *w, const float *mean, const float *rstd,
                          int rows) {
    const tr_model_spec *s = &m->spec;
    if (s->layernorm)
        return m->ops->layernorm_bwd(dx, dw, db, dy, x, w, mean, rstd, rows, s->head_dim,
                                     s->zero_centered);
    return m->ops->rmsnorm_bwd(dx, dw, dy, x, w, rstd, rows, s->head_dim, s->zero_centered);
}

tr_status tr_model_qk_norm_fwd(const tr_model *m, int layer) {
    const tr_model_spec *s = &m->spec;
    const tr_layer_views *p = &m->p.layers[layer];
    const tr_layer_acts *a = &m->acts[layer];
    int bt = m->batch * s->seq;
    TR_TRY(norm_fwd(m, a->q, a->qn_mean, a->qn_rstd, a->q_raw, p->qn_w, p->qn_b, bt * s->heads));
    return norm_fwd(m, a->k, a->kn_mean, a->kn_rstd, a->k_raw, p->kn_w, p->kn_b, bt * s->groups);
}

tr_status tr_model_qk_norm_bwd(const tr_model *m, int layer, const float **dq, const float **dk) {
    const tr_model_spec *s = &m->spec;
    const tr_layer_views *p = &m->p.layers[layer], *g = &m->g.layers[layer];
    const tr_layer_acts *a = &m->acts[layer];
    int bt = m->batch * s->seq;
    int64_t nq = (int64_t)bt * s->heads * s->head_dim, nk = (int64_t)bt * s->groups * s->head_dim;
    TR_TRY(m->ops->fill(m->dq_raw, nq, 0.0f));
    TR_TRY(m->ops->fill(m->dk_raw, nk, 0.0f));
    TR_TRY(norm_bwd(m, m->dq_raw, g->qn_w, g->qn_b, m->dq, a->q_raw, p->qn_w, a->qn_mean,
                    a->qn_rstd, bt * s->heads));
    TR_TRY(norm_bwd(m, m->dk_raw, g->kn_w, g->kn_b, m->dk, a->k_raw, p->kn_w, a->kn_mean,
                    a->kn_rstd, bt * s->groups));
    *dq = m->dq_raw;
    *dk = m->dk_raw;
    return TR_OK;
}
