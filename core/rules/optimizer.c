/* Rules on the optimizer and the data-parallel gradient path (reference §3.3, §3.8). */
#include "core/rules/rule.h"

TR_RULE_FN(tr_check_lr_set) {
    if (!tr_is_null_float(c->optimizer.lr)) return;
    TR_FAIL("optimizer.lr", "set optimizer.lr, e.g. 3e-4", "optimizer.lr is not set");
}

TR_RULE_FN(tr_check_min_lr_le_lr) {
    double lr = c->optimizer.lr, mn = c->optimizer.min_lr;
    if (!tr_is_null_float(lr) && !tr_is_null_float(mn) && mn > lr)
        TR_FAIL("optimizer.min_lr,optimizer.lr", "make optimizer.min_lr at most optimizer.lr",
                "optimizer.min_lr (%g) must not exceed optimizer.lr (%g)", mn, lr);
    double dlr = c->optimizer.decoupled_lr, dmn = c->optimizer.decoupled_min_lr;
    if (tr_is_null_float(dlr)) dlr = lr;
    if (tr_is_null_float(dmn)) return;
    if (!tr_is_null_float(dlr) && dmn > dlr)
        TR_FAIL("optimizer.decoupled_min_lr,optimizer.decoupled_lr",
                "make optimizer.decoupled_min_lr at most the decoupled peak",
                "optimizer.decoupled_min_lr (%g) must not exceed the decoupled peak learning rate "
                "(%g)",
                dmn, dlr);
}

/* MBridge does not reject these (it only turns overlap on when it can run); Megatron-LM's
 * argument checks do, and an overlap that silently does nothing is worse than an error. */
TR_RULE_FN(tr_check_overlap_param_gather_needs_distopt) {
    if (!c->ddp.overlap_param_gather || c->ddp.use_distributed_optimizer) return;
    TR_FAIL("ddp.overlap_param_gather,ddp.use_distributed_optimizer",
            "set ddp.use_distributed_optimizer=true or ddp.overlap_param_gather=false",
            "ddp.overlap_param_gather (true) needs the distributed optimizer "
            "(ddp.use_distributed_optimizer is false)");
}

TR_RULE_FN(tr_check_overlap_param_gather_needs_grad_reduce) {
    if (!c->ddp.overlap_param_gather || c->ddp.overlap_grad_reduce) return;
    TR_FAIL("ddp.overlap_param_gather,ddp.overlap_grad_reduce", "set ddp.overlap_grad_reduce=true",
            "ddp.overlap_param_gather (true) needs ddp.overlap_grad_reduce (false)");
}

TR_RULE_FN(tr_check_precision_aware_optimizer) {
    const tr_optimizer_config *o = &c->optimizer;
    if (o->use_precision_aware_optimizer) {
        if (o->optimizer != TR_OPTIM_ADAM)
            TR_FAIL("optimizer.use_precision_aware_optimizer,optimizer.optimizer",
                    "use optimizer.optimizer=adam",
                    "the precision-aware optimizer needs adam (not %s)",
                    tr_enum_str(&tr_enum_optimizer_type, o->optimizer));
        if (!o->use_distributed_optimizer)
            TR_FAIL("optimizer.use_precision_aware_optimizer,optimizer.use_distributed_optimizer",
                    "set optimizer.use_distributed_optimizer=true",
                    "the precision-aware optimizer needs optimizer.use_distributed_optimizer");
        return;
    }
    static const struct {
        int id;
        const char *key;
    } f[] = {{TR_FID_optimizer_main_grads_dtype, "optimizer.main_grads_dtype"},
             {TR_FID_optimizer_main_params_dtype, "optimizer.main_params_dtype"},
             {TR_FID_optimizer_exp_avg_dtype, "optimizer.exp_avg_dtype"},
             {TR_FID_optimizer_exp_avg_sq_dtype, "optimizer.exp_avg_sq_dtype"}};
    int32_t v[4] = {o->main_grads_dtype, o->main_params_dtype, o->exp_avg_dtype,
                    o->exp_avg_sq_dtype};
    for (int i = 0; i < 4; i++) {
        if (v[i] == TR_DTYPE_FP32) continue;
        char keys[128], hint[128];
        TR_FAIL(
            TR_FMT(keys, "%s,optimizer.use_precision_aware_optimizer", f[i].key),
            TR_FMT(hint, "set %s=fp32 or optimizer.use_precision_aware_optimizer=true", f[i].key),
            "%s (%s) can only differ from fp32 with optimizer.use_precision_aware_optimizer",
            f[i].key, tr_enum_str(&tr_enum_dtype, v[i]));
    }
}

TR_RULE_FN(tr_check_buckets) {
    if (tr_is_set(c->ddp.num_buckets) && tr_is_set(c->ddp.bucket_size))
        TR_FAIL("ddp.num_buckets,ddp.bucket_size", "set only one of them",
                "ddp.num_buckets (%lld) and ddp.bucket_size (%lld) cannot both be set",
                tr_ll(c->ddp.num_buckets), tr_ll(c->ddp.bucket_size));
    if (tr_strlist_set(&c->ddp.param_name_patterns_for_fp32_local_accumulation) &&
        c->ddp.grad_reduce_in_fp32)
        TR_FAIL("ddp.param_name_patterns_for_fp32_local_accumulation,ddp.grad_reduce_in_fp32",
                "drop the patterns or set ddp.grad_reduce_in_fp32=false",
                "ddp.param_name_patterns_for_fp32_local_accumulation cannot be combined with "
                "ddp.grad_reduce_in_fp32");
}
