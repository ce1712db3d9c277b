/* Derived values that follow their sources, and the warning for a replaced user value. */
#include "core/finalize_follow.h"

#include <string.h>

#include "core/config_query.h"

bool tr_user_set(const tr_config *c, int fid) {
    tr_origin_kind k = c->origin[fid].kind;
    return k == TR_ORIGIN_FILE || k == TR_ORIGIN_CLI || k == TR_ORIGIN_API;
}

/* Megatron-Bridge's runner copies dataset.seq_length over model.seq_length; here whichever of
 * the two the user wrote wins, so `model.seq_length=N` alone is not silently undone. */
static void follow_seq_length(tr_config *c) {
    int64_t *ms = &c->model.seq_length, *ds = &c->dataset.seq_length;
    bool user_m = tr_user_set(c, TR_FID_model_seq_length);
    bool user_d = tr_user_set(c, TR_FID_dataset_seq_length);
    if (user_m && !user_d && *ms > 0) *ds = *ms;
    if (user_d && !user_m && *ds > 0) *ms = *ds;
    /* The recipes pack to the sequence length. */
    tr_dataset_config *d = &c->dataset;
    if ((user_m || user_d) && d->packed_sequence_size != TR_NULL_INT && *ds > 0 &&
        !tr_user_set(c, TR_FID_dataset_packed_sequence_size))
        d->packed_sequence_size = *ds;
}

/* Packed examples are split in 2*CP chunks across CP ranks and, with SP, across TP*CP ranks
 * (rule data.offline_packing checks it); the recipes' own multiple is kept when it already
 * fits. */
static void follow_pad_multiple(tr_config *c) {
    tr_dataset_config *d = &c->dataset;
    const tr_model_config *m = &c->model;
    int64_t cp = m->context_parallel_size, tp = m->tensor_model_parallel_size;
    /* packed examples, and every fine-tuning example under CP (each document is split into
     * 2 x CP pieces), pad to what the final layout needs */
    bool pads = d->enable_offline_packing || (d->type == TR_DS_SFT && cp > 1);
    if (!pads || tr_user_set(c, TR_FID_dataset_pad_seq_to_mult)) return;
    if (cp < 1 || tp < 1 || d->pad_seq_to_mult < 1) return; /* validate() says why */
    int64_t need = cp > 1 ? 2 * cp : 1;
    if (m->sequence_parallel && tp > 1) need = tr_lcm(need, cp * tp);
    int64_t pad = d->pad_seq_to_mult;
    d->pad_seq_to_mult = tr_lcm(pad, need);
}

void tr_finalize_follow(tr_config *c) {
    follow_seq_length(c);
    follow_pad_multiple(c);
}

void tr_finalize_replacing(const tr_config *c, int fid, bool differs, const char *now,
                           const char *why, tr_diags *d) {
    if (!differs || !tr_user_set(c, fid)) return;
    const tr_field *f = &tr_fields[fid];
    char was[256], hint[320];
    tr_config_field_format(c, f, was, sizeof was);
    tr_diag_add(d, TR_SEV_WARNING, "finalize.user_value_replaced", &c->origin[fid], f->path,
                TR_FMT(hint, "drop %s=%s, or change what requires %s", f->path, was, now),
                "%s=%s is replaced by %s: %s", f->path, was, now, why);
}

static const struct {
    int fid;
    const char *doc;
} effects[] = {
    {TR_FID_model_sequence_parallel,
     "finalize() leaves it as given; validate() rejects true at TP 1 "
     "(parallel.sequence_parallel_needs_tp)"},
    {TR_FID_model_seq_length,
     "finalize() sets it to dataset.seq_length when you set only that one"},
    {TR_FID_dataset_seq_length,
     "finalize() sets it to model.seq_length when you set only that one"},
    {TR_FID_dataset_packed_sequence_size,
     "finalize() sets it to the sequence length you override, unless you set it too"},
    {TR_FID_dataset_pad_seq_to_mult,
     "finalize() raises it to a multiple of 2*CP (and TP*CP with sequence_parallel) unless you "
     "set it; validate() rejects a value you set that does not fit "
     "(data.offline_packing)"},
    {TR_FID_dataset_pad_to_max_length,
     "finalize() sets it true for SFT data with PP > 1 or EP > 1 (a warning when you set it "
     "false)"},
    {TR_FID_dataset_persistent_workers,
     "finalize() sets it false when num_workers is 0 (a warning when you set it true)"},
    {TR_FID_model_use_cpu_initialization,
     "finalize() sets it true with dist.lazy_mpu_init (a warning when you set it false)"},
    {TR_FID_model_attention_softmax_in_fp32,
     "finalize() sets it true with apply_query_key_layer_scaling (a warning when you set it "
     "false)"},
    {TR_FID_model_use_te_rng_tracker,
     "finalize() turns it and rng.te_rng_tracker on when either is on (a warning when you set "
     "it false)"},
    {TR_FID_rng_te_rng_tracker,
     "finalize() turns it and model.use_te_rng_tracker on when either is on (a warning when you "
     "set it false)"},
    {TR_FID_model_should_pad_vocab,
     "finalize() sets it true when the model takes the tokenizer's vocabulary (a warning when "
     "you set it false)"},
    {TR_FID_ddp_grad_reduce_in_fp32,
     "finalize() copies mixed_precision.grad_reduce_in_fp32 (or the preset's) over it (a "
     "warning when you set another value)"},
    {TR_FID_ddp_overlap_grad_reduce,
     "with a comm_overlap section and the distributed optimizer, finalize() derives it from "
     "the data-parallel size unless comm_overlap.overlap_grad_reduce is set (a warning when "
     "it replaces your value)"},
    {TR_FID_ddp_overlap_param_gather,
     "with a comm_overlap section and the distributed optimizer, finalize() derives it from "
     "the data-parallel size unless comm_overlap.overlap_param_gather is set (a warning when "
     "it replaces your value); the optimizer's flag is synced to it"},
    {TR_FID_model_tp_comm_overlap,
     "finalize() copies comm_overlap.tp_comm_overlap over it when that is set (a warning when "
     "it replaces your value); validate() rejects it without TP > 1 and sequence_parallel"},
    {TR_FID_ddp_use_distributed_optimizer,
     "finalize() turns it and optimizer.use_distributed_optimizer on when either is on (note "
     "finalize.distributed_optimizer_synced)"},
    {TR_FID_optimizer_use_distributed_optimizer,
     "finalize() turns it and ddp.use_distributed_optimizer on when either is on (note "
     "finalize.distributed_optimizer_synced)"},
    {TR_FID_train_global_batch_size,
     "with train.decrease_batch_size_if_needed, finalize() lowers it to a multiple of MBS * DP "
     "(note finalize.batch_size_decreased)"},
    {TR_FID_scheduler_lr_warmup_iters,
     "finalize() caps the warmup below the decay length (warning scheduler.warmup_capped)"},
};

const char *tr_finalize_effect_doc(int fid) {
    for (size_t i = 0; i < sizeof effects / sizeof effects[0]; i++)
        if (effects[i].fid == fid) return effects[i].doc;
    return NULL;
}
