/* Rules on saving, loading and fine-tuning from checkpoints (reference §2.7, §3.1, §3.5). */
#include "core/rules/rule.h"

/* The runtime writes its native sharded format for torch_dist, so both count as "torch_dist". */
static bool sharded_format(const tr_config *c) {
    return c->checkpoint.ckpt_format == TR_CKPTFMT_TORCH_DIST ||
           c->checkpoint.ckpt_format == TR_CKPTFMT_TRESTLE;
}

static const char *format_name(const tr_config *c) {
    return tr_enum_str(&tr_enum_ckpt_format, c->checkpoint.ckpt_format);
}

TR_RULE_FN(tr_note_save_interval_without_save) {
    if (!tr_is_set(c->checkpoint.save_interval) || c->checkpoint.save) return;
    TR_FAIL("checkpoint.save_interval,checkpoint.save", "set checkpoint.save to a directory",
            "checkpoint.save_interval (%lld) has no effect without checkpoint.save",
            tr_ll(c->checkpoint.save_interval));
}

TR_RULE_FN(tr_check_most_recent_k) {
    int64_t k = c->checkpoint.most_recent_k;
    if (k == -1 || k >= 1) return;
    TR_FAIL("checkpoint.most_recent_k", "use -1 to keep every checkpoint, or k >= 1",
            "checkpoint.most_recent_k (%lld) must be -1 or at least 1", tr_ll(k));
}

TR_RULE_FN(tr_check_async_save) {
    const tr_checkpoint_config *k = &c->checkpoint;
    if (!k->async_save) return;
    if (!sharded_format(c))
        TR_FAIL("checkpoint.async_save,checkpoint.ckpt_format",
                "set checkpoint.ckpt_format=torch_dist",
                "checkpoint.async_save needs ckpt_format torch_dist (it is %s)", format_name(c));
    if (!k->save)
        TR_FAIL("checkpoint.async_save,checkpoint.save", "set checkpoint.save to a directory",
                "checkpoint.async_save needs checkpoint.save");
    if (!k->use_persistent_ckpt_worker)
        TR_FAIL("checkpoint.async_save,checkpoint.use_persistent_ckpt_worker",
                "set checkpoint.use_persistent_ckpt_worker=true",
                "checkpoint.async_save needs checkpoint.use_persistent_ckpt_worker");
}

TR_RULE_FN(tr_check_load_main_params) {
    if (!c->checkpoint.load_main_params_from_ckpt || !c->checkpoint.load_optim) return;
    TR_FAIL("checkpoint.load_main_params_from_ckpt,checkpoint.load_optim",
            "set checkpoint.load_optim=false",
            "checkpoint.load_main_params_from_ckpt needs checkpoint.load_optim false");
}

TR_RULE_FN(tr_check_ckpt_step_needs_load) {
    if (!tr_is_set(c->checkpoint.ckpt_step) || c->checkpoint.load) return;
    TR_FAIL("checkpoint.ckpt_step,checkpoint.load",
            "set checkpoint.load to the checkpoint directory",
            "checkpoint.ckpt_step (%lld) needs checkpoint.load", tr_ll(c->checkpoint.ckpt_step));
}

TR_RULE_FN(tr_check_reshardable_exclusive) {
    if (!c->checkpoint.dist_ckpt_optim_fully_reshardable ||
        !c->checkpoint.distrib_optim_fully_reshardable_mem_efficient)
        return;
    TR_FAIL("checkpoint.dist_ckpt_optim_fully_reshardable,"
            "checkpoint.distrib_optim_fully_reshardable_mem_efficient",
            "set only one of them",
            "checkpoint.dist_ckpt_optim_fully_reshardable and "
            "checkpoint.distrib_optim_fully_reshardable_mem_efficient cannot both be true");
}

TR_RULE_FN(tr_check_verify_integrity_format) {
    if (!c->checkpoint.verify_integrity || sharded_format(c)) return;
    TR_FAIL("checkpoint.verify_integrity,checkpoint.ckpt_format",
            "set checkpoint.ckpt_format=torch_dist",
            "checkpoint.verify_integrity needs ckpt_format torch_dist (it is %s)", format_name(c));
}

TR_RULE_FN(tr_check_distopt_without_gloo_format) {
    if (c->dist.use_gloo_process_groups || !c->optimizer.use_distributed_optimizer ||
        sharded_format(c))
        return;
    TR_FAIL(
        "checkpoint.ckpt_format,dist.use_gloo_process_groups,optimizer.use_distributed_optimizer",
        "set checkpoint.ckpt_format=torch_dist",
        "the distributed optimizer without gloo process groups needs ckpt_format torch_dist "
        "(it is %s)",
        format_name(c));
}

TR_RULE_FN(tr_check_peft_needs_pretrained) {
    if (c->peft.scheme < 0 || c->checkpoint.pretrained_checkpoint) return;
    TR_FAIL("checkpoint.pretrained_checkpoint,peft.scheme",
            "set checkpoint.pretrained_checkpoint to the base model's checkpoint",
            "peft.scheme %s needs checkpoint.pretrained_checkpoint",
            tr_enum_str(&tr_enum_peft_scheme, c->peft.scheme));
}

TR_RULE_FN(tr_check_finetune_needs_checkpoint) {
    if (!c->checkpoint.finetune || c->checkpoint.load || c->checkpoint.pretrained_checkpoint)
        return;
    TR_FAIL("checkpoint.finetune,checkpoint.pretrained_checkpoint,checkpoint.load",
            "set checkpoint.pretrained_checkpoint (or checkpoint.load)",
            "checkpoint.finetune needs a checkpoint to start from");
}
