/* Whether every key a run sets has its effect. Two kinds of rule live here:
 *
 * - refusals: keys the runtime has no code for, where honouring them would change the maths or
 *   the data trained on, so accepting them would train something else than was asked for;
 * - the note config.no_effect: keys the field table marks TR_F_NO_EFFECT or TR_F_UNBUILT
 *   (core/field.h) that the recipe, a file or the command line moved off their default.
 *
 * The refusals are launch-input rules: a catalog check describes configurations, and what this
 * runtime cannot run yet is a fact about a launch, so there they become launch notes. */
#include <stdlib.h>

#include "core/rules/rule.h"

TR_RULE_FN(tr_check_effect_p2p_warmup_flush) {
    if (!c->model.overlap_p2p_comm_warmup_flush) return;
    TR_FAIL("model.overlap_p2p_comm_warmup_flush", "set model.overlap_p2p_comm_warmup_flush=false",
            "the pipeline executor has no overlapped warmup and flush phases: it would run (and "
            "--print-schedule would show) another schedule than the one asked for");
}

TR_RULE_FN(tr_check_effect_dataloader) {
    int t = c->dataset.dataloader_type;
    if (t != TR_DL_CYCLIC && t != TR_DL_EXTERNAL) return;
    TR_FAIL("dataset.dataloader_type", "set dataset.dataloader_type=single (or batch for sft)",
            "dataset.dataloader_type %s is not implemented: samples are read in order by "
            "Megatron's pretraining sampler (single and batch read the same order)",
            tr_enum_str(&tr_enum_dataloader_type, t));
}

TR_RULE_FN(tr_check_effect_drop_last) {
    if (c->dataset.drop_last) return;
    TR_FAIL("dataset.drop_last", "set dataset.drop_last=true",
            "dataset.drop_last=false is not implemented: a short final batch is never trained");
}

TR_RULE_FN(tr_check_effect_num_epochs) {
    if (tr_is_null_float(c->train.num_epochs)) return;
    TR_FAIL("train.num_epochs", "give the length as train.train_iters (or train.train_samples)",
            "train.num_epochs is not implemented: the loop counts iterations");
}

TR_RULE_FN(tr_check_effect_grad_norm_mp) {
    if (!c->train.skip_sync_grad_norm_across_mp) return;
    TR_FAIL("train.skip_sync_grad_norm_across_mp", "set train.skip_sync_grad_norm_across_mp=false",
            "the gradient norm is always reduced over the model-parallel ranks: clipping would "
            "differ from the per-rank norm asked for");
}

TR_RULE_FN(tr_check_effect_grad_checks) {
    if (c->ddp.check_for_large_grads)
        TR_FAIL("ddp.check_for_large_grads", "set ddp.check_for_large_grads=false",
                "ddp.check_for_large_grads is not implemented: large gradients would not stop "
                "the run");
    if (tr_is_set(c->train.check_weight_hash_across_dp_replicas_interval))
        TR_FAIL("train.check_weight_hash_across_dp_replicas_interval",
                "set train.check_weight_hash_across_dp_replicas_interval=null",
                "comparing weight hashes across data-parallel replicas is not implemented");
}

TR_RULE_FN(tr_check_effect_rerun) {
    const tr_rerun_state_machine_config *r = &c->rerun_state_machine;
    if (r->rerun_mode != TR_RERUN_DISABLED)
        TR_FAIL("rerun_state_machine.rerun_mode", "set rerun_state_machine.rerun_mode=disabled",
                "the rerun state machine (%s) is not implemented",
                tr_enum_str(&tr_enum_rerun_mode, r->rerun_mode));
    if (r->check_for_spiky_loss)
        TR_FAIL("rerun_state_machine.check_for_spiky_loss",
                "set rerun_state_machine.check_for_spiky_loss=false",
                "spiky-loss detection is not implemented");
}

TR_RULE_FN(tr_check_effect_validation_sets) {
    const tr_validation_config *v = &c->validation;
    if (!v->multiple_validation_sets && v->validation_set_names.null) return;
    TR_FAIL(
        v->multiple_validation_sets ? "validation.multiple_validation_sets"
                                    : "validation.validation_set_names",
        "set validation.multiple_validation_sets=false and validation.validation_set_names=null",
        "separate validation sets are not implemented: one validation loss is computed over "
        "the validation split");
}

TR_RULE_FN(tr_check_effect_ckpt_scheduler) {
    if (!c->scheduler.use_checkpoint_opt_param_scheduler) return;
    TR_FAIL("scheduler.use_checkpoint_opt_param_scheduler",
            "set scheduler.use_checkpoint_opt_param_scheduler=false",
            "the learning-rate schedule always comes from the config, never from the checkpoint");
}

TR_RULE_FN(tr_check_effect_non_persistent) {
    const tr_checkpoint_config *k = &c->checkpoint;
    if (!tr_is_set(k->non_persistent_save_interval) && k->non_persistent_ckpt_type < 0) return;
    TR_FAIL(tr_is_set(k->non_persistent_save_interval) ? "checkpoint.non_persistent_save_interval"
                                                       : "checkpoint.non_persistent_ckpt_type",
            "use checkpoint.save and checkpoint.save_interval",
            "non-persistent checkpoints are not implemented: none would be written");
}

TR_RULE_FN(tr_check_effect_tokenizer) {
    const tr_tokenizer_config *t = &c->tokenizer;
    const char *what = NULL, *key = NULL;
    if (t->vocab_extra_ids > 0)
        key = "tokenizer.vocab_extra_ids", what = "extra vocabulary ids";
    else if (!t->special_tokens.null)
        key = "tokenizer.special_tokens", what = "added special tokens";
    else if (t->metadata_path)
        key = "tokenizer.metadata_path", what = "tokenizer metadata files";
    else if (t->tokenizer_hf_no_include_special_tokens)
        key = "tokenizer.tokenizer_hf_no_include_special_tokens",
        what = "leaving out a Hugging Face tokenizer's special tokens";
    else if (t->chat_template || t->chat_template_path)
        key = t->chat_template ? "tokenizer.chat_template" : "tokenizer.chat_template_path",
        what = "a chat template other than the built-in one";
    if (!key) return;
    char hint[160];
    TR_FAIL(key, TR_FMT(hint, "remove %s (back to its default)", key),
            "%s: %s are not implemented; the tokens trained on would differ", key, what);
}

TR_RULE_FN(tr_check_effect_init_and_dtype) {
    if (c->rng.data_parallel_random_init)
        TR_FAIL("rng.data_parallel_random_init", "set rng.data_parallel_random_init=false",
                "every data-parallel replica starts from the same weights (the initialisation "
                "depends only on the seed and the tensor)");
    if (c->peft.lora_dtype >= 0 && c->peft.lora_dtype != TR_DTYPE_FP32)
        TR_FAIL("peft.lora_dtype", "set peft.lora_dtype=null (adapters are fp32 main parameters)",
                "adapters in %s are not implemented",
                tr_enum_str(&tr_enum_dtype, c->peft.lora_dtype));
}

/* The note. Values finalize() derived are skipped: nobody set them, and the key they came from
 * is named itself when it is marked. */
static bool noted(const tr_config *c, const tr_config *def, const tr_field *f) {
    if (!(f->flags & (TR_F_NO_EFFECT | TR_F_UNBUILT))) return false;
    tr_origin_kind k = c->origin[f->id].kind;
    if (k == TR_ORIGIN_DEFAULT || k == TR_ORIGIN_DERIVED) return false;
    return !tr_config_field_equal(c, def, f);
}

typedef struct text {
    char *s;
    size_t n, cap;
} text;

static bool put(text *t, const char *s) {
    size_t add = strlen(s);
    if (t->n + add + 1 > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        while (cap < t->n + add + 1) cap *= 2;
        char *p = realloc(t->s, cap);
        if (!p) return false;
        t->s = p, t->cap = cap;
    }
    memcpy(t->s + t->n, s, add + 1);
    t->n += add;
    return true;
}

TR_RULE_FN(tr_note_no_effect) {
    /* Catalog checks ignore notes; they should not pay for a second config per check. */
    if (opts->catalog_mode) return;
    tr_config def;
    memset(&def, 0, sizeof def);
    tr_diags scratch;
    tr_diags_init(&scratch);
    bool ok = tr_config_init(&def, &scratch) == TR_OK;
    text keys = {0}, msg = {0};
    int n = 0;
    for (int i = 0; ok && i < tr_field_count; i++) {
        const tr_field *f = &tr_fields[i];
        if (!noted(c, &def, f)) continue;
        char value[96], where[160], item[400];
        tr_config_field_format(c, f, value, sizeof value);
        tr_origin_format(&c->origin[f->id], where, sizeof where);
        snprintf(item, sizeof item, "%s%s=%s (%s%s)", n ? "; " : "", f->path, value, where,
                 f->flags & TR_F_UNBUILT ? ", feature not built" : "");
        ok = (!n || put(&keys, ",")) && put(&keys, f->path) && put(&msg, item);
        n++;
    }
    if (ok && n > 0)
        TR_FAIL(keys.s,
                "nothing to fix: the run trains as with their defaults "
                "(docs/effects.md lists every such key)",
                "%d key%s set here change%s nothing in this runtime: %s", n, n == 1 ? "" : "s",
                n == 1 ? "s" : "", msg.s);
    free(keys.s);
    free(msg.s);
    tr_config_free(&def);
    tr_diags_free(&scratch);
}
