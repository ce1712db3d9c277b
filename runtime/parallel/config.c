/* The only runtime file that reads the config's parallelism fields, so the rest of the runtime
 * depends on tr_parallel_dims and not on the config layout. */
#include "runtime/parallel/config.h"

#include <limits.h>

#include "core/config.h"

/* Values are int64 in the config and int in the layout; anything out of range is refused rather
 * than truncated into a different, valid-looking layout. */
static bool narrow(int64_t v, int *out) {
    if (v < INT_MIN || v > INT_MAX) return false;
    *out = (int)v;
    return true;
}

tr_status tr_parallel_dims_from_config(const struct tr_config *c, int world,
                                       tr_parallel_dims *out) {
    tr_parallel_dims d;
    tr_parallel_dims_init(&d, world);
    const tr_model_config *m = &c->model;
    bool ok = narrow(m->tensor_model_parallel_size, &d.tp) &&
              narrow(m->pipeline_model_parallel_size, &d.pp) &&
              narrow(m->context_parallel_size, &d.cp) &&
              narrow(m->expert_model_parallel_size, &d.ep) &&
              narrow(c->ddp.num_distributed_optimizer_instances, &d.dist_opt_instances);
    if (!ok) return TR_ERR_INVALID;

    if (m->virtual_pipeline_model_parallel_size == TR_NULL_INT)
        d.vpp = 0;
    else if (!narrow(m->virtual_pipeline_model_parallel_size, &d.vpp))
        return TR_ERR_INVALID;

    /* Megatron-Bridge's default, which differs from Megatron-Core's (always TP): with experts
     * spread over EP ranks, splitting each expert again rarely pays. */
    if (m->expert_tensor_parallel_size == TR_NULL_INT)
        d.etp = d.ep > 1 ? 1 : d.tp;
    else if (!narrow(m->expert_tensor_parallel_size, &d.etp))
        return TR_ERR_INVALID;

    d.pp_before_dp = c->dist.use_tp_pp_dp_mapping;
    tr_parallel_dims_derive(&d);
    *out = d;
    return TR_OK;
}
