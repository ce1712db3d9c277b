/* See runtime/train_precision.h. */
#include "runtime/train_precision.h"

#include <math.h>
#include <string.h>

tr_status tr_train_precision_from_config(const tr_config *c, tr_train_precision *p, tr_diags *d) {
    memset(p, 0, sizeof *p);
    const tr_model_config *m = &c->model;
    int lowp = m->bf16 ? TR_LOWP_BF16 : m->fp16 ? TR_LOWP_F16 : 0;
    /* Megatron's grad buffer then holds the parameters' dtype and is reduced in it; here the
     * reduction stays fp32 and its result is rounded, the precision the optimizer would see. */
    if (lowp && !c->ddp.grad_reduce_in_fp32) p->grad_lowp = lowp;
    int bad = 0;
    if (c->mixed_precision.autocast_enabled)
        bad |= tr_diag_add(d, TR_SEV_ERROR, "runtime.unsupported", NULL,
                           "mixed_precision.autocast_enabled",
                           "set it to false; mixed_precision.preset=bf16_mixed gives bf16 GEMMs "
                           "over fp32 main parameters",
                           "the training runtime does not implement autocast regions") != TR_OK;
    bad |= tr_loss_scaler_from_config(c, &p->scaler, d) != TR_OK;
    return bad ? TR_ERR_CONFIG : TR_OK;
}

bool tr_train_precision_touches_grads(const tr_train_precision *p) {
    return p->grad_lowp || p->scaler.enabled;
}

tr_status tr_train_precision_grads(const tr_train_precision *p, const tr_ops *ops, float *g,
                                   int64_t n, float *found_inf) {
    if (p->grad_lowp) TR_TRY(ops->round_lowp((tr_lowp)p->grad_lowp, g, n));
    if (!p->scaler.enabled) return TR_OK;
    /* A power-of-two scale unscales exactly; the reciprocal of any other is rounded once, as
     * Megatron's inv_scale is. */
    return ops->unscale_check(g, n, (float)(1.0 / p->scaler.scale), found_inf);
}

float tr_train_precision_grad_scale(const tr_train_precision *p) {
    return p->scaler.enabled ? (float)p->scaler.scale : 0.0f;
}

double tr_train_precision_after_step(tr_train_precision *p, bool found_inf) {
    tr_loss_scaler_update(&p->scaler, found_inf);
    return p->scaler.enabled ? p->scaler.scale : NAN;
}
