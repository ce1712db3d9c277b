/* See runtime/optimizer/optimizer.h. */
#include "runtime/optimizer/optimizer.h"

#include <math.h>
#include <stdlib.h>

#include "runtime/device/device.h"

/* What the optimizer cannot run (coupled Adam decay, a separate embedding learning rate, state
 * below fp32) is refused before this by tr_runtime_check (core/rules/runtime.c). */
int tr_dtype_lowp(int32_t dtype) {
    return dtype == TR_DTYPE_BF16 ? TR_LOWP_BF16 : dtype == TR_DTYPE_FP16 ? TR_LOWP_F16 : 0;
}

tr_status tr_optimizer_spec_from_config(const tr_config *c, tr_optimizer_spec *s, tr_diags *d) {
    (void)d;
    const tr_optimizer_config *o = &c->optimizer;
    *s = (tr_optimizer_spec){.sgd = o->optimizer == TR_OPTIM_SGD,
                             .beta1 = (float)o->adam_beta1,
                             .beta2 = (float)o->adam_beta2,
                             .eps = (float)o->adam_eps,
                             .momentum = (float)o->sgd_momentum,
                             .clip_grad = o->clip_grad,
                             .grad_norm_skip_threshold = o->grad_norm_skip_threshold,
                             .exp_avg_lowp = tr_dtype_lowp(o->exp_avg_dtype),
                             .exp_avg_sq_lowp = tr_dtype_lowp(o->exp_avg_sq_dtype),
                             .main_params_lowp = tr_dtype_lowp(o->main_params_dtype)};
    return TR_OK;
}

tr_status tr_optimizer_create(tr_optimizer *o, const tr_optimizer_spec *s, const tr_ops *ops,
                              const tr_param_info *info, int n_info, int64_t n) {
    *o = (tr_optimizer){.spec = *s, .ops = ops, .info = info, .n_info = n_info, .n = n};
    for (int i = 0; i < n_info; i++)
        if (info[i].offset < 0 || info[i].offset + info[i].numel > n) return TR_ERR_INVALID;
    o->m = calloc((size_t)n, sizeof(float));
    if (!s->sgd) o->v = calloc((size_t)n, sizeof(float));
    if (!o->m || (!s->sgd && !o->v)) {
        tr_optimizer_free(o);
        return TR_ERR_NOMEM;
    }
    return TR_OK;
}

void tr_optimizer_free(tr_optimizer *o) {
    if (o->dev) {
        tr_optimizer_free_on_device(o);
        return;
    }
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
}

tr_status tr_grad_norm(const tr_ops *ops, const float *grads, int64_t n, double *norm) {
    float sq = 0.0f;
    TR_TRY(ops->sum_squares(&sq, grads, n));
    *norm = sqrt((double)sq);
    return TR_OK;
}

tr_status tr_clip_grads(const tr_ops *ops, float *grads, int64_t n, double max_norm, double norm) {
    if (max_norm <= 0.0 || !(norm > max_norm)) return TR_OK;
    return ops->scale(grads, n, (float)(max_norm / (norm + 1e-6)));
}

tr_status tr_optimizer_step(tr_optimizer *o, float *params, const float *grads, double lr,
                            double wd) {
    o->step++;
    for (int i = 0; i < o->n_info; i++) {
        const tr_param_info *p = &o->info[i];
        if (p->frozen) continue; /* LoRA's base weights: no update, no weight decay */
        float decay = p->no_decay ? 0.0f : (float)wd;
        int64_t off = p->offset;
        if (o->spec.sgd) {
            tr_sgd_params sp = {
                .lr = (float)lr, .momentum = o->spec.momentum, .weight_decay = decay};
            TR_TRY(o->ops->sgd(params + off, grads + off, o->m + off, p->numel, &sp));
        } else {
            tr_adamw_params ap = {.lr = (float)lr,
                                  .beta1 = o->spec.beta1,
                                  .beta2 = o->spec.beta2,
                                  .eps = o->spec.eps,
                                  .weight_decay = decay,
                                  .step = o->step};
            TR_TRY(o->ops->adamw(params + off, grads + off, o->m + off, o->v + off, p->numel, &ap));
            const tr_optimizer_spec *s = &o->spec;
            if (s->exp_avg_lowp)
                TR_TRY(o->ops->round_lowp((tr_lowp)s->exp_avg_lowp, o->m + off, p->numel));
            if (s->exp_avg_sq_lowp)
                TR_TRY(o->ops->round_lowp((tr_lowp)s->exp_avg_sq_lowp, o->v + off, p->numel));
        }
        if (o->spec.main_params_lowp)
            TR_TRY(o->ops->round_lowp((tr_lowp)o->spec.main_params_lowp, params + off, p->numel));
    }
    return TR_OK;
}

/* The same optimizer with its state in device memory. */
tr_status tr_optimizer_create_on(tr_optimizer *o, tr_device *dev, const tr_optimizer_spec *s,
                                 const tr_param_info *info, int n_info, int64_t n) {
    *o = (tr_optimizer){
        .spec = *s, .ops = tr_device_ops(dev), .info = info, .n_info = n_info, .n = n, .dev = dev};
    for (int i = 0; i < n_info; i++)
        if (info[i].offset < 0 || info[i].offset + info[i].numel > n) return TR_ERR_INVALID;
    size_t bytes = (size_t)n * sizeof(float);
    tr_status st = tr_device_alloc(dev, TR_MEM_OPTIMIZER, bytes, (void **)&o->m);
    if (st == TR_OK && !s->sgd) st = tr_device_alloc(dev, TR_MEM_OPTIMIZER, bytes, (void **)&o->v);
    if (st != TR_OK) tr_optimizer_free(o);
    return st;
}

void tr_optimizer_free_on_device(tr_optimizer *o) {
    tr_device_free(o->dev, TR_MEM_OPTIMIZER, o->v);
    tr_device_free(o->dev, TR_MEM_OPTIMIZER, o->m);
    o->m = o->v = NULL;
}

tr_status tr_grad_norm_on(tr_device *dev, const float *grads, int64_t n, double *norm) {
    float sq = 0.0f;
    TR_TRY(tr_device_sum_squares(dev, grads, n, &sq));
    *norm = sqrt((double)sq);
    return TR_OK;
}
