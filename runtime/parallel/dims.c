/* Layout rules. Each is a diagnostic rather than an assert so that a dry run lists every
 * problem with a layout at once, for worlds we are not running on. */
#include "runtime/parallel/dims.h"

#include <stdio.h>

#define KEYS_DENSE                                                                                 \
    "model.tensor_model_parallel_size,model.pipeline_model_parallel_size,"                         \
    "model.context_parallel_size"
#define KEYS_EXPERT                                                                                \
    "model.expert_tensor_parallel_size,model.expert_model_parallel_size,"                          \
    "model.pipeline_model_parallel_size"

void tr_parallel_dims_init(tr_parallel_dims *d, int world) {
    *d = (tr_parallel_dims){.world = world,
                            .tp = 1,
                            .pp = 1,
                            .vpp = 0,
                            .cp = 1,
                            .ep = 1,
                            .etp = 1,
                            .pp_before_dp = false,
                            .dist_opt_instances = 1};
    tr_parallel_dims_derive(d);
}

static long long gcd_ll(long long a, long long b) {
    while (b != 0) {
        long long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

void tr_parallel_dims_derive(tr_parallel_dims *d) {
    long long dense = (long long)d->tp * d->cp * d->pp;
    long long expert = (long long)d->etp * d->ep * d->pp;
    d->dp = (dense > 0 && d->world > 0 && d->world % dense == 0) ? (int)(d->world / dense) : 0;
    d->edp = (expert > 0 && d->world > 0 && d->world % expert == 0) ? (int)(d->world / expert) : 0;
}

long tr_parallel_min_world(const tr_parallel_dims *d) {
    long long a = (long long)d->tp * d->cp, b = (long long)d->ep * d->etp;
    if (a <= 0 || b <= 0 || d->pp <= 0) return 0;
    return (long)(d->pp * (a / gcd_ll(a, b) * b));
}

const char *tr_parallel_order_name(const tr_parallel_dims *d) {
    return d->pp_before_dp ? "tp-cp-ep-pp-dp" : "tp-cp-ep-dp-pp";
}

/* Adds an error (or warning) only when the caller wants the details. */
#define REPORT(sev, id, keys, hint, ...)                                                           \
    do {                                                                                           \
        if ((sev) == TR_SEV_ERROR) bad = true;                                                     \
        if (diags) tr_diag_add(diags, (sev), (id), NULL, (keys), (hint), __VA_ARGS__);             \
    } while (0)

static bool check_sizes(const tr_parallel_dims *d, tr_diags *diags) {
    bool bad = false;
    const struct {
        const char *name, *key;
        int value, min;
    } axes[] = {
        {"world size", NULL, d->world, 1},
        {"TP", "model.tensor_model_parallel_size", d->tp, 1},
        {"PP", "model.pipeline_model_parallel_size", d->pp, 1},
        {"VPP", "model.virtual_pipeline_model_parallel_size", d->vpp, 0},
        {"CP", "model.context_parallel_size", d->cp, 1},
        {"EP", "model.expert_model_parallel_size", d->ep, 1},
        {"ETP", "model.expert_tensor_parallel_size", d->etp, 1},
        {"distributed optimizer instances", "ddp.num_distributed_optimizer_instances",
         d->dist_opt_instances, 1},
    };
    for (size_t i = 0; i < sizeof axes / sizeof axes[0]; i++) {
        if (axes[i].value < axes[i].min)
            REPORT(TR_SEV_ERROR, "parallel.size_positive", axes[i].key,
                   axes[i].min == 0 ? "leave it unset (null) for no interleaving"
                                    : "every parallel size is a count of ranks: use 1 or more",
                   "%s is %d; it must be at least %d", axes[i].name, axes[i].value, axes[i].min);
    }
    return !bad;
}

tr_status tr_parallel_dims_check(const tr_parallel_dims *d, tr_diags *diags) {
    bool bad = false;
    if (!check_sizes(d, diags)) return TR_ERR_CONFIG; /* the products below would be meaningless */

    char hint[256];
    long long world = d->world;
    long long dense = (long long)d->tp * d->cp * d->pp;
    long long expert = (long long)d->etp * d->ep * d->pp;
    long min_world = tr_parallel_min_world(d);
    snprintf(hint, sizeof hint,
             "use a world size that is a multiple of PP*lcm(TP*CP, EP*ETP) = %ld, or shrink the "
             "parallel sizes",
             min_world);

    bool dense_ok = false, expert_ok = false;
    if (dense > world)
        REPORT(TR_SEV_ERROR, "parallel.model_parallel_too_large", KEYS_DENSE, hint,
               "TP*CP*PP = %d*%d*%d = %lld ranks, but the world has only %d", d->tp, d->cp, d->pp,
               dense, d->world);
    else if (world % dense != 0)
        REPORT(TR_SEV_ERROR, "parallel.world_divisible_by_tp_cp_pp", KEYS_DENSE, hint,
               "world size %d is not divisible by TP*CP*PP = %d*%d*%d = %lld, so the data-parallel "
               "size is not an integer",
               d->world, d->tp, d->cp, d->pp, dense);
    else
        dense_ok = true;

    if (expert > world)
        REPORT(TR_SEV_ERROR, "parallel.moe_grid_too_large", KEYS_EXPERT, hint,
               "the expert grid ETP*EP*PP = %d*%d*%d = %lld ranks does not fit in a world of %d",
               d->etp, d->ep, d->pp, expert, d->world);
    else if (world % expert != 0)
        REPORT(TR_SEV_ERROR, "parallel.world_divisible_by_etp_ep_pp", KEYS_EXPERT, hint,
               "world size %d is not divisible by ETP*EP*PP = %d*%d*%d = %lld, so the "
               "expert-data-parallel size is not an integer",
               d->world, d->etp, d->ep, d->pp, expert);
    else
        expert_ok = true;

    long long dp = dense_ok ? world / dense : 0, edp = expert_ok ? world / expert : 0;

    /* With DP outside PP, the PP stride is TP*CP on the dense grid and ETP*EP on the expert
     * grid; the pipeline groups of the two grids coincide only when DP == EDP. */
    if (dense_ok && expert_ok && d->pp > 1 && d->pp_before_dp && dp != edp)
        REPORT(TR_SEV_ERROR, "parallel.edp_equals_dp", "dist.use_tp_pp_dp_mapping," KEYS_EXPERT,
               "make TP*CP equal to ETP*EP, or turn dist.use_tp_pp_dp_mapping off",
               "with order %s and PP %d the expert-data-parallel size (%lld) must equal the "
               "data-parallel size (%lld)",
               tr_parallel_order_name(d), d->pp, edp, dp);

    int inst = d->dist_opt_instances;
    if (dense_ok && (dp * d->cp) % inst != 0)
        REPORT(TR_SEV_ERROR, "parallel.dp_cp_divisible_by_dist_opt_instances",
               "ddp.num_distributed_optimizer_instances,model.context_parallel_size",
               "choose a number of instances that divides DP*CP",
               "DP*CP = %lld*%d is not divisible by %d distributed-optimizer instances", dp, d->cp,
               inst);
    if (expert_ok && edp % inst != 0)
        REPORT(TR_SEV_ERROR, "parallel.edp_divisible_by_dist_opt_instances",
               "ddp.num_distributed_optimizer_instances," KEYS_EXPERT,
               "choose a number of instances that divides the expert-data-parallel size",
               "expert DP = %lld is not divisible by %d distributed-optimizer instances", edp,
               inst);

    if (d->vpp > 1 && d->pp == 1)
        REPORT(TR_SEV_WARNING, "parallel.vpp_without_pp",
               "model.virtual_pipeline_model_parallel_size,model.pipeline_model_parallel_size",
               "unset the virtual pipeline size or use PP > 1",
               "virtual pipeline size %d has no effect without pipeline parallelism (PP 1)",
               d->vpp);

    return bad ? TR_ERR_CONFIG : TR_OK;
}
