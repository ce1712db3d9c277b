/* Rules on batch sizes: microbatches must tile the global batch on every data-parallel rank. */
#include "core/rules/rule.h"

TR_RULE_FN(tr_check_batch_sizes_set) {
    if (!tr_is_set(c->train.micro_batch_size))
        TR_FAIL("train.micro_batch_size", "set train.micro_batch_size, e.g. 1",
                "train.micro_batch_size is not set");
    if (!tr_is_set(c->train.global_batch_size))
        TR_FAIL("train.global_batch_size",
                "set train.global_batch_size to a multiple of micro_batch_size * DP",
                "train.global_batch_size is not set");
}

static void check_divisible(const tr_config *c, const tr_validate_opts *opts, const tr_rule *self,
                            tr_diags *d, const char *keys, const char *what, int64_t gbs,
                            int64_t mbs, int64_t dp) {
    if (!tr_is_set(gbs) || !tr_is_set(mbs)) return;
    int64_t step = mbs * dp;
    if (gbs % step == 0) return;
    char hint[256];
    TR_FAIL(keys,
            TR_FMT(hint, "set %s to a multiple of %lld, e.g. %lld or %lld", what, tr_ll(step),
                   tr_ll(gbs / step > 0 ? gbs / step * step : step),
                   tr_ll((gbs / step + 1) * step)),
            "%s (%lld) must be divisible by micro batch size (%lld) * data-parallel size (%lld) "
            "= %lld",
            what, tr_ll(gbs), tr_ll(mbs), tr_ll(dp), tr_ll(step));
}

TR_RULE_FN(tr_check_global_batch_divisible) {
    if (c->train.decrease_batch_size_if_needed &&
        c->train.global_batch_size >= c->train.micro_batch_size * c->derived.data_parallel_size)
        return;
    check_divisible(c, opts, self, d,
                    "train.global_batch_size,train.micro_batch_size,derived.data_parallel_size",
                    "train.global_batch_size", c->train.global_batch_size,
                    c->train.micro_batch_size, c->derived.data_parallel_size);
}

TR_RULE_FN(tr_check_eval_batch_divisible) {
    check_divisible(c, opts, self, d,
                    "validation.eval_global_batch_size,validation.eval_micro_batch_size,"
                    "derived.eval_data_parallel_size",
                    "validation.eval_global_batch_size", c->validation.eval_global_batch_size,
                    c->validation.eval_micro_batch_size, c->derived.eval_data_parallel_size);
}

TR_RULE_FN(tr_check_rampup_format) {
    const tr_int_list *r = &c->train.rampup_batch_size;
    if (r->null) return;
    if (r->n != 3)
        TR_FAIL("train.rampup_batch_size", "write [start, increment, ramp samples]",
                "train.rampup_batch_size has %d values; it needs exactly 3", r->n);
    if (tr_is_set(c->train.train_samples) || !tr_is_null_float(c->train.num_epochs))
        TR_FAIL("train.rampup_batch_size,train.train_samples,train.num_epochs",
                "drop the batch-size ramp or train by train_iters",
                "train.rampup_batch_size is not supported with sample- or epoch-based training");
}

/* Counts the loop steps through: the microbatches of one step (an int in the schedules) and the
 * samples of the whole run (64 bits). finalize saturates them instead of wrapping; a saturated
 * or oversized count would spin for ever or wrap at launch, so it is refused here. */
TR_RULE_FN(tr_check_batch_counts_fit_runtime) {
    const tr_train_config *t = &c->train;
    if (!tr_is_set(t->global_batch_size) || !tr_is_set(t->micro_batch_size)) return;
    if (c->derived.num_microbatches > INT32_MAX)
        TR_FAIL("train.global_batch_size,train.micro_batch_size,derived.data_parallel_size",
                "reduce train.global_batch_size or raise train.micro_batch_size",
                "train.global_batch_size (%lld) gives %lld microbatches per step, more than the "
                "runtime's 32-bit count (2147483647)",
                tr_ll(t->global_batch_size), tr_ll(c->derived.num_microbatches));
    int64_t samples;
    if (tr_is_set(t->train_iters) &&
        __builtin_mul_overflow(t->train_iters, t->global_batch_size, &samples))
        TR_FAIL("train.train_iters,train.global_batch_size",
                "reduce train.train_iters or train.global_batch_size",
                "train.train_iters (%lld) x train.global_batch_size (%lld) samples overflow 64 "
                "bits",
                tr_ll(t->train_iters), tr_ll(t->global_batch_size));
}
