/* The distributed optimizer's state in device memory (runtime/distributed/dist_optimizer.h). */
#include <stdlib.h>

#include "runtime/device/device.h"
#include "runtime/distributed/dist_optimizer.h"

tr_status tr_dist_opt_use_device(tr_dist_opt *o, tr_device *dev) {
    if (o->dev || o->step) return TR_ERR_INVALID;
    size_t bytes = (size_t)(o->owned.state_numel ? o->owned.state_numel : 1) * sizeof(float);
    float *m = NULL, *v = NULL;
    tr_status st = tr_device_alloc(dev, TR_MEM_OPTIMIZER, bytes, (void **)&m);
    if (st == TR_OK) st = tr_device_alloc(dev, TR_MEM_OPTIMIZER, bytes, (void **)&v);
    if (st != TR_OK) {
        tr_device_free(dev, TR_MEM_OPTIMIZER, v);
        tr_device_free(dev, TR_MEM_OPTIMIZER, m);
        return st;
    }
    free(o->m);
    free(o->v);
    o->m = m;
    o->v = v;
    o->dev = dev;
    o->ops = tr_device_ops(dev);
    return TR_OK;
}

void tr_dist_opt_free_state_on_device(tr_dist_opt *o) {
    tr_device_free(o->dev, TR_MEM_OPTIMIZER, o->v);
    tr_device_free(o->dev, TR_MEM_OPTIMIZER, o->m);
    o->m = o->v = NULL;
}
