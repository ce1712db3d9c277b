/* Rules on training length and the learning-rate / weight-decay schedule (reference §3.1 steps
 * 1, 26-27 and §3.5). */
#include "core/rules/rule.h"

static bool sample_mode(const tr_config *c) {
    return tr_is_set(c->train.train_samples);
}

/* train_iters counts as a choice only when the user set it, not when finalize() derived it. */
TR_RULE_FN(tr_check_train_length_exactly_one) {
    bool iters = tr_is_set(c->train.train_iters) &&
                 c->origin[TR_FID_train_train_iters].kind != TR_ORIGIN_DERIVED;
    bool samples = tr_is_set(c->train.train_samples);
    bool epochs = !tr_is_null_float(c->train.num_epochs);
    int n = iters + samples + epochs;
    if (n == 1) return;
    TR_FAIL("train.train_iters,train.train_samples,train.num_epochs",
            n == 0 ? "set train.train_iters (e.g. 1000)"
                   : "keep one of them and set the others to null",
            "exactly one of train.train_iters, train.train_samples and train.num_epochs must be "
            "set (%s)",
            n == 0 ? "none is" : "several are");
}

TR_RULE_FN(tr_check_num_epochs) {
    double e = c->train.num_epochs;
    if (tr_is_null_float(e)) return;
    if (!(e > 0))
        TR_FAIL("train.num_epochs", "use a positive number of epochs",
                "train.num_epochs (%g) must be positive", e);
    if (c->dataset.type != TR_DS_SFT)
        TR_FAIL("train.num_epochs,dataset.type",
                "use train.train_iters or train.train_samples for this dataset",
                "train.num_epochs needs a finite sft dataset (dataset.type is %s)",
                tr_enum_str(&tr_enum_dataset_type, c->dataset.type));
    if (c->dataset.dataloader_type != TR_DL_BATCH)
        TR_FAIL("train.num_epochs,dataset.dataloader_type", "set dataset.dataloader_type=batch",
                "train.num_epochs needs dataset.dataloader_type batch (it is %s)",
                tr_enum_str(&tr_enum_dataloader_type, c->dataset.dataloader_type));
}

TR_RULE_FN(tr_check_scheduler_sample_mode_fields) {
    if (!sample_mode(c)) return;
    const tr_scheduler_config *s = &c->scheduler;
    if (tr_is_set(s->max_steps))
        TR_FAIL("scheduler.max_steps,train.train_samples", "unset scheduler.max_steps",
                "scheduler.max_steps (%lld) only applies to iteration-based training",
                tr_ll(s->max_steps));
    /* lr_decay_iters may only have been filled by finalize() in iteration mode, so any value
     * here came from the user. */
    if (tr_is_set(s->lr_decay_iters))
        TR_FAIL(
            "scheduler.lr_decay_iters,train.train_samples", "use scheduler.lr_decay_samples",
            "scheduler.lr_decay_iters (%lld) is for iteration-based training; train.train_samples "
            "is set",
            tr_ll(s->lr_decay_iters));
    if (s->lr_warmup_iters != 0)
        TR_FAIL("scheduler.lr_warmup_iters,train.train_samples", "use scheduler.lr_warmup_samples",
                "scheduler.lr_warmup_iters (%lld) is for iteration-based training; "
                "train.train_samples is set",
                tr_ll(s->lr_warmup_iters));
    if (tr_is_set(s->lr_wsd_decay_iters))
        TR_FAIL("scheduler.lr_wsd_decay_iters,train.train_samples",
                "use scheduler.lr_wsd_decay_samples",
                "scheduler.lr_wsd_decay_iters (%lld) is for iteration-based training; "
                "train.train_samples is set",
                tr_ll(s->lr_wsd_decay_iters));
}

TR_RULE_FN(tr_check_scheduler_iteration_mode_fields) {
    if (sample_mode(c)) return;
    const tr_scheduler_config *s = &c->scheduler;
    if (tr_is_set(s->lr_decay_samples))
        TR_FAIL("scheduler.lr_decay_samples,train.train_iters", "use scheduler.lr_decay_iters",
                "scheduler.lr_decay_samples (%lld) is for sample-based training; use "
                "scheduler.lr_decay_iters",
                tr_ll(s->lr_decay_samples));
    if (s->lr_warmup_samples != 0)
        TR_FAIL("scheduler.lr_warmup_samples,train.train_iters", "use scheduler.lr_warmup_iters",
                "scheduler.lr_warmup_samples (%lld) is for sample-based training; use "
                "scheduler.lr_warmup_iters",
                tr_ll(s->lr_warmup_samples));
    if (tr_is_set(s->lr_wsd_decay_samples))
        TR_FAIL("scheduler.lr_wsd_decay_samples,train.train_iters",
                "use scheduler.lr_wsd_decay_iters",
                "scheduler.lr_wsd_decay_samples (%lld) is for sample-based training",
                tr_ll(s->lr_wsd_decay_samples));
}

TR_RULE_FN(tr_check_warmup_fraction_exclusive) {
    const tr_scheduler_config *s = &c->scheduler;
    if (tr_is_null_float(s->lr_warmup_fraction)) return;
    if (s->lr_warmup_iters == 0 && s->lr_warmup_samples == 0) return;
    TR_FAIL("scheduler.lr_warmup_fraction,scheduler.lr_warmup_iters,scheduler.lr_warmup_samples",
            "keep one way of giving the warmup and set the others to 0/null",
            "scheduler.lr_warmup_fraction (%g) cannot be combined with scheduler.lr_warmup_iters "
            "(%lld) or scheduler.lr_warmup_samples (%lld)",
            s->lr_warmup_fraction, tr_ll(s->lr_warmup_iters), tr_ll(s->lr_warmup_samples));
}

TR_RULE_FN(tr_check_max_steps_covers_train_iters) {
    int64_t m = c->scheduler.max_steps, t = c->train.train_iters;
    if (!tr_is_set(m) || !tr_is_set(t) || m >= t) return;
    char hint[128];
    TR_FAIL("scheduler.max_steps,train.train_iters",
            TR_FMT(hint, "set scheduler.max_steps >= %lld or unset it", tr_ll(t)),
            "scheduler.max_steps (%lld) must be at least train.train_iters (%lld)", tr_ll(m),
            tr_ll(t));
}

TR_RULE_FN(tr_check_weight_decay_range) {
    double a = c->scheduler.start_weight_decay, b = c->scheduler.end_weight_decay;
    if (tr_is_null_float(a) || tr_is_null_float(b) || b >= a) return;
    TR_FAIL("scheduler.end_weight_decay,scheduler.start_weight_decay",
            "make end_weight_decay at least start_weight_decay",
            "scheduler.end_weight_decay (%g) must be >= scheduler.start_weight_decay (%g)", b, a);
}

TR_RULE_FN(tr_check_scheduler_checkpoint_source) {
    if (!c->scheduler.override_opt_param_scheduler ||
        !c->scheduler.use_checkpoint_opt_param_scheduler)
        return;
    TR_FAIL("scheduler.override_opt_param_scheduler,scheduler.use_checkpoint_opt_param_scheduler",
            "set one of them to false",
            "scheduler.override_opt_param_scheduler and "
            "scheduler.use_checkpoint_opt_param_scheduler cannot both be true");
}

TR_RULE_FN(tr_warn_deprecated_eval_fields) {
    static const struct {
        int id;
        const char *key, *repl;
    } f[] = {{TR_FID_train_eval_iters, "train.eval_iters", "validation.eval_iters"},
             {TR_FID_train_eval_interval, "train.eval_interval", "validation.eval_interval"},
             {TR_FID_train_skip_train, "train.skip_train", "validation.skip_train"}};
    bool set[3] = {tr_is_set(c->train.eval_iters), tr_is_set(c->train.eval_interval),
                   c->train.skip_train >= 0};
    for (int i = 0; i < 3; i++) {
        if (!set[i]) continue;
        char keys[96], hint[128];
        TR_FAIL(TR_FMT(keys, "%s,%s", f[i].key, f[i].repl),
                TR_FMT(hint, "set %s instead", f[i].repl),
                "%s is deprecated; its value was copied to %s", f[i].key, f[i].repl);
    }
}
