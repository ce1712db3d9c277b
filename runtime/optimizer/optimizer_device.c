/* The single-rank optimizer with its state in device memory (runtime/optimizer/optimizer.h): the
 * same step, the moments allocated through the device layer. */
#include <math.h>

#include "runtime/device/device.h"
#include "runtime/optimizer/optimizer.h"

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
