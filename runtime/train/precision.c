/* See runtime/train/precision.h. */
#include "runtime/train/precision.h"

#include "runtime/device/device.h"
#include "runtime/optimizer/optimizer.h"

#include <math.h>
#include <string.h>

tr_status tr_train_precision_from_config(const tr_config *c, tr_train_precision *p, tr_diags *d) {
    memset(p, 0, sizeof *p);
    const tr_model_config *m = &c->model;
    int lowp = m->bf16 ? TR_LOWP_BF16 : m->fp16 ? TR_LOWP_F16 : 0;
    /* Megatron's grad buffer then holds the parameters' dtype and is reduced in it; here the
     * reduction stays fp32 and its result is rounded, the precision the optimizer would see. */
    if (lowp && !c->ddp.grad_reduce_in_fp32) p->grad_lowp = lowp;
    p->main_grad_lowp = tr_dtype_lowp(c->optimizer.main_grads_dtype);
    int bad = 0; /* autocast is refused by tr_runtime_check (core/rules/runtime.c) */
    bad |= tr_loss_scaler_from_config(c, &p->scaler, d) != TR_OK;
    return bad ? TR_ERR_CONFIG : TR_OK;
}

bool tr_train_precision_touches_grads(const tr_train_precision *p) {
    return p->grad_lowp || p->main_grad_lowp || p->scaler.enabled;
}

tr_status tr_train_precision_grads(const tr_train_precision *p, tr_device *dev, float *grads,
                                   const tr_grad_range *ranges, int n_ranges, bool *found_inf) {
    *found_inf = false;
    if (!tr_train_precision_touches_grads(p)) return TR_OK;
    const tr_ops *ops = tr_device_ops(dev);
    float *flag = NULL, raised = 0.0f;
    TR_TRY(tr_device_alloc(dev, TR_MEM_WORKSPACE, sizeof *flag, (void **)&flag));
    tr_status st = TR_OK;
    /* A power-of-two scale unscales exactly; the reciprocal of any other is rounded once, as
     * Megatron's inv_scale is. */
    float inv_scale = p->scaler.enabled ? (float)(1.0 / p->scaler.scale) : 1.0f;
    for (int i = 0; i < n_ranges && st == TR_OK; i++) {
        float *g = grads + ranges[i].offset;
        if (p->grad_lowp) st = ops->round_lowp((tr_lowp)p->grad_lowp, g, ranges[i].numel);
        if (st == TR_OK && p->main_grad_lowp)
            st = ops->round_lowp((tr_lowp)p->main_grad_lowp, g, ranges[i].numel);
        if (st == TR_OK && p->scaler.enabled)
            st = ops->unscale_check(g, ranges[i].numel, inv_scale, flag);
    }
    if (st == TR_OK) st = tr_device_to_host(dev, &raised, flag, sizeof raised);
    tr_device_free(dev, TR_MEM_WORKSPACE, flag);
    *found_inf = raised != 0.0f;
    return st;
}

float tr_train_precision_grad_scale(const tr_train_precision *p) {
    return p->scaler.enabled ? (float)p->scaler.scale : 0.0f;
}

double tr_train_precision_after_step(tr_train_precision *p, bool found_inf) {
    tr_loss_scaler_update(&p->scaler, found_inf);
    return p->scaler.enabled ? p->scaler.scale : NAN;
}
