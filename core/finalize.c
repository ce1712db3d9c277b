/* finalize(): the values Megatron-Bridge derives from the rest of the config (reference §3.7),
 * applied in MBridge's order: mixed-precision preset, model defaults, parallel sizes, batch and
 * training length, vocabulary padding, dataset defaults, comm-overlap defaults, the
 * distributed-optimizer sync, then the scheduler steps. Every change is recorded with origin
 * "derived" so --explain shows where a value came from. Impossible inputs are left as they are
 * for validate() to report; the only diagnostics here describe values finalize itself changed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_query.h"
#include "core/finalize_follow.h"
#include "core/model_stats.h"
#include "core/validate.h"

/* Saturating product: schedule lengths in samples can exceed int64 only for absurd inputs, and
 * clamping keeps them ordered instead of wrapping. */
static int64_t mul_sat(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return INT64_MAX;
    return r;
}

static void set_if_null_int(int64_t *field, int64_t value) {
    if (*field == TR_NULL_INT) *field = value;
}

/* ---- mixed precision (reference §2.12) ---- */

typedef struct precision_plan {
    int8_t bf16, fp16;                                    /* -1: the preset does not define it */
    int32_t params_dtype, pipeline_dtype, autocast_dtype; /* -1: not defined */
    int8_t grad_reduce_in_fp32;                           /* -1: not defined */
} precision_plan;

static precision_plan preset_plan(int32_t preset) {
    precision_plan p = {-1, -1, -1, -1, -1, -1};
    switch (preset) {
    case TR_MPRESET_BF16_MIXED:
        p = (precision_plan){1, 0, TR_DTYPE_BF16, TR_DTYPE_BF16, -1, 1};
        break;
    case TR_MPRESET_FP16_MIXED:
        p = (precision_plan){0, 1, TR_DTYPE_FP16, TR_DTYPE_FP16, -1, 0};
        break;
    case TR_MPRESET_FP32:
        /* Not an MBridge recipe: plain fp32 everywhere, gradient reduction left alone. */
        p = (precision_plan){0, 0, TR_DTYPE_FP32, TR_DTYPE_FP32, -1, -1};
        break;
    default:
        break;
    }
    return p;
}

/* Explicit mixed_precision.* fields win over the preset: a nullable field counts when it is not
 * null, a precision flag when it is true (a false flag requests nothing, so a dumped config
 * that lists every flag reads back the same). The resolved values are written back into
 * mixed_precision.* so the section shows what was applied and re-finalizing is a no-op. */
/* Megatron-Bridge copies the mixed-precision dtypes over the model's, so a model.*_dtype the
 * user set themselves (file, command line, API) is replaced; say so instead of dropping it. */
static void warn_replaced_dtype(const tr_config *c, int fid, const char *key, int32_t user,
                                int32_t applied, tr_diags *d) {
    tr_origin_kind k = c->origin[fid].kind;
    if (user < 0 || user == applied) return;
    if (k != TR_ORIGIN_FILE && k != TR_ORIGIN_CLI && k != TR_ORIGIN_API) return;
    char keys[120], hint[160];
    const char *mp_key = strchr(key, '.') + 1;
    tr_diag_add(d, TR_SEV_WARNING, "finalize.precision_replaces_model", &c->origin[fid],
                TR_FMT(keys, "%s,mixed_precision.%s", key, mp_key),
                TR_FMT(hint, "set mixed_precision.%s=%s instead", mp_key,
                       tr_enum_str(&tr_enum_dtype, user)),
                "%s=%s is replaced by the mixed-precision setting (%s): mixed_precision.* is "
                "copied over the model's dtypes",
                key, tr_enum_str(&tr_enum_dtype, user), tr_enum_str(&tr_enum_dtype, applied));
}

static void apply_mixed_precision(tr_config *c, tr_diags *d) {
    tr_mixed_precision_config *mp = &c->mixed_precision;
    precision_plan p = preset_plan(mp->preset);
    bool any = mp->preset >= 0;
    if (mp->bf16) p.bf16 = 1, any = true;
    if (mp->fp16) p.fp16 = 1, any = true;
    if (mp->fp32) p.bf16 = p.fp16 = 0, any = true;
    if (mp->params_dtype >= 0) p.params_dtype = mp->params_dtype, any = true;
    if (mp->pipeline_dtype >= 0) p.pipeline_dtype = mp->pipeline_dtype, any = true;
    if (mp->autocast_dtype >= 0) p.autocast_dtype = mp->autocast_dtype, any = true;
    if (mp->grad_reduce_in_fp32 >= 0) p.grad_reduce_in_fp32 = mp->grad_reduce_in_fp32, any = true;
    if (!any) return;
    if (p.bf16 >= 0) c->model.bf16 = c->optimizer.bf16 = mp->bf16 = p.bf16;
    if (p.fp16 >= 0) c->model.fp16 = c->optimizer.fp16 = mp->fp16 = p.fp16;
    if (mp->preset == TR_MPRESET_FP32) mp->fp32 = true;
    if (p.params_dtype >= 0)
        warn_replaced_dtype(c, TR_FID_model_params_dtype, "model.params_dtype",
                            c->model.params_dtype, p.params_dtype, d);
    if (p.pipeline_dtype >= 0)
        warn_replaced_dtype(c, TR_FID_model_pipeline_dtype, "model.pipeline_dtype",
                            c->model.pipeline_dtype, p.pipeline_dtype, d);
    if (p.autocast_dtype >= 0)
        warn_replaced_dtype(c, TR_FID_model_autocast_dtype, "model.autocast_dtype",
                            c->model.autocast_dtype, p.autocast_dtype, d);
    if (p.params_dtype >= 0)
        c->model.params_dtype = c->optimizer.params_dtype = mp->params_dtype = p.params_dtype;
    if (p.pipeline_dtype >= 0) c->model.pipeline_dtype = mp->pipeline_dtype = p.pipeline_dtype;
    if (p.autocast_dtype >= 0) c->model.autocast_dtype = mp->autocast_dtype = p.autocast_dtype;
    if (p.grad_reduce_in_fp32 >= 0) {
        tr_finalize_replacing(c, TR_FID_ddp_grad_reduce_in_fp32,
                              c->ddp.grad_reduce_in_fp32 != (p.grad_reduce_in_fp32 != 0),
                              p.grad_reduce_in_fp32 ? "true" : "false",
                              "the mixed-precision setting decides gradient reduction", d);
        mp->grad_reduce_in_fp32 = p.grad_reduce_in_fp32;
        c->ddp.grad_reduce_in_fp32 = p.grad_reduce_in_fp32 != 0;
    }
    /* Loss scaling lives on the mixed-precision config in MBridge and is copied along. */
    if (!tr_is_null_float(mp->loss_scale)) c->optimizer.loss_scale = mp->loss_scale;
    c->optimizer.initial_loss_scale = mp->initial_loss_scale;
    c->optimizer.min_loss_scale = mp->min_loss_scale;
    c->optimizer.loss_scale_window = mp->loss_scale_window;
    c->optimizer.hysteresis = mp->hysteresis;
}

/* ---- model (reference §3.4 MBridge pre-steps and MCore __post_init__) ---- */

static tr_status derive_model(tr_config *c, tr_diags *d) {
    tr_model_config *m = &c->model;
    if (m->pipeline_model_parallel_size > 1 && m->pipeline_dtype < 0)
        m->pipeline_dtype = m->params_dtype;
    /* MBridge's default, not MCore's: experts get their own TP of 1 once they are sharded. */
    if (!tr_is_set(m->expert_tensor_parallel_size))
        m->expert_tensor_parallel_size =
            m->expert_model_parallel_size > 1 ? 1 : m->tensor_model_parallel_size;
    if (m->hidden_size > 0) set_if_null_int(&m->ffn_hidden_size, mul_sat(4, m->hidden_size));
    if (m->num_attention_heads > 0) {
        set_if_null_int(&m->kv_channels, m->hidden_size / m->num_attention_heads);
        set_if_null_int(&m->num_query_groups, m->num_attention_heads);
    }
    if (tr_is_moe(c) && tr_is_set(m->ffn_hidden_size))
        set_if_null_int(&m->moe_ffn_hidden_size, m->ffn_hidden_size);
    if (m->autocast_dtype < 0) m->autocast_dtype = m->params_dtype;
    set_if_null_int(&m->microbatch_group_size_per_vp_stage, m->pipeline_model_parallel_size);
    if (m->apply_query_key_layer_scaling) {
        tr_finalize_replacing(c, TR_FID_model_attention_softmax_in_fp32,
                              !m->attention_softmax_in_fp32, "true",
                              "model.apply_query_key_layer_scaling needs the fp32 softmax", d);
        m->attention_softmax_in_fp32 = true;
    }
    if (c->dist.lazy_mpu_init) {
        tr_finalize_replacing(c, TR_FID_model_use_cpu_initialization, !m->use_cpu_initialization,
                              "true", "dist.lazy_mpu_init initializes on the CPU", d);
        m->use_cpu_initialization = true;
    }
    if (c->rng.te_rng_tracker || m->use_te_rng_tracker) {
        const char *why = "the two tracker switches are one setting (either turns both on)";
        tr_finalize_replacing(c, TR_FID_rng_te_rng_tracker, !c->rng.te_rng_tracker, "true", why, d);
        tr_finalize_replacing(c, TR_FID_model_use_te_rng_tracker, !m->use_te_rng_tracker, "true",
                              why, d);
        c->rng.te_rng_tracker = m->use_te_rng_tracker = true;
    }
    if (m->recompute_modules.null) {
        const char *def[] = {"core_attn"};
        TR_TRY(tr_config_set_strlist(c, TR_FID_model_recompute_modules, def, 1));
    }
    return TR_OK;
}

/* ---- parallel sizes (reference §3.7, §7.3) ---- */

static int64_t divide_or_one(int64_t w, int64_t block) {
    return block > 0 && w % block == 0 ? w / block : 1;
}

static void derive_parallel(tr_config *c) {
    const tr_model_config *m = &c->model;
    tr_derived_config *g = &c->derived;
    int64_t tp = m->tensor_model_parallel_size, pp = m->pipeline_model_parallel_size;
    int64_t cp = m->context_parallel_size, ep = m->expert_model_parallel_size;
    int64_t etp = m->expert_tensor_parallel_size;
    g->data_parallel_size = divide_or_one(g->world_size, mul_sat(mul_sat(tp, pp), cp));
    g->expert_data_parallel_size = divide_or_one(g->world_size, mul_sat(mul_sat(etp, ep), pp));
    int64_t eval_cp = tr_or(c->dist.eval_context_parallel_size, cp);
    g->eval_data_parallel_size = divide_or_one(g->world_size, mul_sat(mul_sat(tp, pp), eval_cp));
}

/* ---- batch and training length ---- */

static void derive_train(tr_config *c, tr_diags *d) {
    tr_train_config *t = &c->train;
    int64_t dp = c->derived.data_parallel_size;
    if (tr_is_set(t->train_samples) && tr_is_set(t->global_batch_size) &&
        !tr_is_set(t->train_iters))
        t->train_iters = t->train_samples / t->global_batch_size;
    if (t->decrease_batch_size_if_needed && tr_is_set(t->global_batch_size) &&
        tr_is_set(t->micro_batch_size)) {
        int64_t step = mul_sat(t->micro_batch_size, dp);
        if (t->global_batch_size > step && t->global_batch_size % step) {
            int64_t was = t->global_batch_size;
            t->global_batch_size -= t->global_batch_size % step;
            char keys[96];
            tr_diag_add(d, TR_SEV_NOTE, "finalize.batch_size_decreased",
                        &c->origin[TR_FID_train_global_batch_size],
                        TR_FMT(keys, "train.global_batch_size,train.decrease_batch_size_if_needed"),
                        "give a global batch divisible by micro_batch_size * DP to keep it",
                        "train.global_batch_size %lld is lowered to %lld, a multiple of "
                        "micro_batch_size * DP (%lld), as decrease_batch_size_if_needed asks",
                        tr_ll(was), tr_ll(t->global_batch_size), tr_ll(step));
        }
    }
    tr_validation_config *v = &c->validation;
    set_if_null_int(&v->eval_global_batch_size, t->global_batch_size);
    set_if_null_int(&v->eval_micro_batch_size, t->micro_batch_size);
    if (tr_is_set(t->global_batch_size) && tr_is_set(t->micro_batch_size)) {
        int64_t n = t->global_batch_size / mul_sat(t->micro_batch_size, dp);
        c->derived.num_microbatches = n >= 1 ? n : 1;
    }
    /* MBridge copies the deprecated train.* evaluation fields over validation.* (validate()
     * warns about them). */
    if (tr_is_set(t->eval_iters)) v->eval_iters = t->eval_iters;
    if (tr_is_set(t->eval_interval)) v->eval_interval = t->eval_interval;
    if (t->skip_train >= 0) v->skip_train = t->skip_train;
}

/* ---- vocabulary (reference §3.6 "Vocab", §6.3) ----
 * As MBridge's _validate_and_set_vocab_size: when tokenizer.use_tokenizer_vocab_size is on or the
 * model has no vocab_size, the model takes the tokenizer's size and pads it; otherwise the model's
 * own size is kept and padded only when model.should_pad_vocab asks for it. The tokenizer's size
 * is known before launch only for the NullTokenizer (tokenizer.vocab_size) and the byte-level
 * tokenizer (256); for file-based tokenizers the padded size stays null until the runtime loads
 * them. */
static int64_t tokenizer_vocab(const tr_config *c) {
    switch (c->tokenizer.tokenizer_type) {
    case TR_TOKENIZER_NULL:
        return c->tokenizer.vocab_size;
    case TR_TOKENIZER_BYTE_LEVEL:
        return 256;
    default:
        return TR_NULL_INT;
    }
}

static void derive_vocab(tr_config *c, tr_diags *d) {
    tr_model_config *m = &c->model;
    int64_t tok = tokenizer_vocab(c);
    if ((c->tokenizer.use_tokenizer_vocab_size || !tr_is_set(m->vocab_size)) && tr_is_set(tok)) {
        tr_finalize_replacing(c, TR_FID_model_should_pad_vocab, !m->should_pad_vocab, "true",
                              "the model takes the tokenizer's vocabulary, padded", d);
        m->vocab_size = tok;
        m->should_pad_vocab = true;
    }
    if (!tr_is_set(m->vocab_size)) return;
    int64_t v = m->vocab_size;
    if (m->should_pad_vocab) {
        int64_t multiple = mul_sat(m->make_vocab_size_divisible_by, m->tensor_model_parallel_size);
        int64_t up;
        if (multiple > 0 && !__builtin_add_overflow(v, multiple - 1, &up))
            v = mul_sat(up / multiple, multiple);
    }
    c->derived.padded_vocab_size = v;
}

/* ---- dataset ---- */

static void derive_dataset(tr_config *c, tr_diags *d) {
    tr_dataset_config *ds = &c->dataset;
    if (ds->type == TR_DS_SFT &&
        (c->model.pipeline_model_parallel_size > 1 || c->model.expert_model_parallel_size > 1)) {
        tr_finalize_replacing(c, TR_FID_dataset_pad_to_max_length, !ds->pad_to_max_length, "true",
                              "pipeline and expert parallelism need equal-length SFT batches", d);
        ds->pad_to_max_length = true;
    }
    if (ds->num_workers == 0) {
        tr_finalize_replacing(c, TR_FID_dataset_persistent_workers, ds->persistent_workers, "false",
                              "dataset.num_workers is 0: there are no workers to keep", d);
        ds->persistent_workers = false;
    }
    tr_finalize_follow(c);
    if (ds->dataloader_type < 0)
        ds->dataloader_type = ds->type == TR_DS_SFT ? TR_DL_BATCH : TR_DL_SINGLE;
}

/* ---- comm overlap (reference §2.13); only when a comm_overlap section is present ---- */

static void take_bool(bool *dst, int8_t user, bool derived) {
    *dst = user >= 0 ? user : derived;
}

/* take_bool for a ddp flag, warning when the derived value replaces one the user wrote. */
static void take_ddp_bool(tr_config *c, bool *dst, int fid, int8_t user, bool derived,
                          tr_diags *d) {
    bool v = user >= 0 ? user : derived;
    tr_finalize_replacing(c, fid, *dst != v, v ? "true" : "false",
                          "the comm_overlap section derives it from the data-parallel size", d);
    *dst = v;
}

static tr_status derive_comm_overlap(tr_config *c, tr_diags *d) {
    const tr_comm_overlap_config *co = &c->comm_overlap;
    if (co->tp_comm_overlap < 0) return TR_OK;
    tr_model_config *m = &c->model;
    /* MBridge silently drops a TP overlap it cannot run; Trestle keeps the request so that
     * validate() reports it. */
    tr_finalize_replacing(c, TR_FID_model_tp_comm_overlap,
                          m->tp_comm_overlap != co->tp_comm_overlap,
                          co->tp_comm_overlap ? "true" : "false",
                          "comm_overlap.tp_comm_overlap is copied over it", d);
    m->tp_comm_overlap = co->tp_comm_overlap;
    if (co->tp_comm_overlap_cfg)
        TR_TRY(tr_config_set_str(c, TR_FID_model_tp_comm_overlap_cfg, co->tp_comm_overlap_cfg));
    m->tp_comm_bootstrap_backend = co->tp_comm_bootstrap_backend;
    bool pp = m->pipeline_model_parallel_size > 1, vpp = tr_vpp_chunks(c) > 1;
    take_bool(&m->overlap_p2p_comm, co->overlap_p2p_comm, pp && vpp);
    take_bool(&m->batch_p2p_comm, co->batch_p2p_comm, pp && !vpp);
    take_bool(&m->defer_embedding_wgrad_compute, co->defer_embedding_wgrad_compute, false);
    /* MBridge's derived limit is -1 (unused while deferral is off); our field is 0.., so the
     * model keeps its own value unless the user overrides it. */
    if (tr_is_set(co->wgrad_deferral_limit)) m->wgrad_deferral_limit = co->wgrad_deferral_limit;
    take_bool(&m->overlap_moe_expert_parallel_comm, co->overlap_moe_expert_parallel_comm, false);
    take_bool(&m->delay_wgrad_compute, co->delay_wgrad_compute, false);

    if (!c->ddp.use_distributed_optimizer) return TR_OK;
    int64_t dp = tr_or(co->data_parallel_size, c->derived.data_parallel_size);
    bool many = dp > 1;
    take_ddp_bool(c, &c->ddp.overlap_grad_reduce, TR_FID_ddp_overlap_grad_reduce,
                  co->overlap_grad_reduce, many, d);
    take_ddp_bool(c, &c->ddp.overlap_param_gather, TR_FID_ddp_overlap_param_gather,
                  co->overlap_param_gather, many, d);
    c->optimizer.overlap_param_gather = c->ddp.overlap_param_gather;
    take_bool(&c->optimizer.overlap_param_gather_with_optimizer_step,
              co->overlap_param_gather_with_optimizer_step, false);
    take_bool(&c->ddp.align_param_gather, co->align_param_gather, many && pp && vpp);
    if (tr_is_set(co->bucket_size))
        c->ddp.bucket_size = co->bucket_size;
    else
        c->ddp.bucket_size = many ? 128 * 1024 * 1024 : TR_NULL_INT;
    return TR_OK;
}

/* ---- ddp/optimizer sync (reference §3.1 step 17): an auto-fix, reported as a note ---- */

static void sync_flag(bool *a, bool *b, const char *key_a, const char *key_b, const char *id,
                      tr_diags *d) {
    if (*a == *b) return;
    char keys[160];
    tr_diag_add(d, TR_SEV_NOTE, id, NULL, TR_FMT(keys, "%s,%s", key_a, key_b),
                "set both keys to the same value to silence this note",
                "%s (%s) and %s (%s) disagreed; both are now true", key_a, *a ? "true" : "false",
                key_b, *b ? "true" : "false");
    *a = *b = true;
}

/* ---- scheduler (reference §3.7; units of the derived steps are samples) ---- */

static void derive_scheduler(tr_config *c, tr_diags *d) {
    tr_scheduler_config *s = &c->scheduler;
    tr_derived_config *g = &c->derived;
    const tr_train_config *t = &c->train;
    if (!tr_is_set(t->train_iters) || !tr_is_set(t->global_batch_size)) return;
    int64_t gbs = t->global_batch_size;
    int64_t warmup;
    if (tr_is_set(t->train_samples)) {
        set_if_null_int(&s->lr_decay_samples, t->train_samples);
        g->lr_decay_steps = s->lr_decay_samples;
        g->wd_incr_steps = t->train_samples;
        g->wsd_decay_steps = s->lr_wsd_decay_samples;
        warmup = s->lr_warmup_samples;
    } else {
        set_if_null_int(&s->lr_decay_iters, tr_or(s->max_steps, t->train_iters));
        if (s->lr_decay_style == TR_SCHED_WSD)
            set_if_null_int(&s->lr_wsd_decay_iters, s->lr_decay_iters);
        g->lr_decay_steps = mul_sat(s->lr_decay_iters, gbs);
        g->wd_incr_steps = mul_sat(tr_or(s->max_steps, t->train_iters), gbs);
        g->wsd_decay_steps =
            tr_is_set(s->lr_wsd_decay_iters) ? mul_sat(s->lr_wsd_decay_iters, gbs) : TR_NULL_INT;
        warmup = mul_sat(s->lr_warmup_iters, gbs);
    }
    if (!tr_is_null_float(s->lr_warmup_fraction)) {
        double w = s->lr_warmup_fraction * (double)g->lr_decay_steps;
        warmup = w >= 9.2e18 ? INT64_MAX : (int64_t)w;
    }
    if (g->lr_decay_steps > 0 && warmup >= g->lr_decay_steps) {
        char hint[200];
        tr_diag_add(
            d, TR_SEV_WARNING, "scheduler.warmup_capped",
            &c->origin[TR_FID_scheduler_lr_warmup_iters],
            "scheduler.lr_warmup_iters,scheduler.lr_warmup_samples,scheduler.lr_warmup_fraction",
            TR_FMT(hint,
                   "make the warmup shorter than the decay (%lld samples), e.g. "
                   "reduce scheduler.lr_warmup_iters",
                   tr_ll(g->lr_decay_steps)),
            "learning-rate warmup (%lld samples) is not shorter than the decay (%lld "
            "samples); capped to %lld",
            tr_ll(warmup), tr_ll(g->lr_decay_steps), tr_ll(g->lr_decay_steps - 1));
        warmup = g->lr_decay_steps - 1;
    }
    g->lr_warmup_steps = warmup < 0 ? 0 : warmup;
}

static tr_train_mode_t derive_mode(const tr_config *c) {
    if (c->peft.scheme == TR_PEFT_LORA) return TR_MODE_LORA;
    if (c->peft.scheme == TR_PEFT_DORA) return TR_MODE_DORA;
    if (c->dataset.type == TR_DS_SFT) return TR_MODE_SFT;
    return TR_MODE_PRETRAIN;
}

static tr_status finalize_into(tr_config *c, const tr_world *w, tr_diags *d) {
    c->derived.world_size = w && w->world_size >= 1 ? w->world_size : 1;
    c->derived.gpus_per_node = w && w->gpus_per_node >= 1 ? w->gpus_per_node : 1;
    c->derived.mode = derive_mode(c);
    apply_mixed_precision(c, d);
    TR_TRY(derive_model(c, d));
    derive_parallel(c);
    derive_train(c, d);
    derive_vocab(c, d);
    derive_dataset(c, d);
    TR_TRY(derive_comm_overlap(c, d));
    sync_flag(&c->ddp.use_distributed_optimizer, &c->optimizer.use_distributed_optimizer,
              "ddp.use_distributed_optimizer", "optimizer.use_distributed_optimizer",
              "finalize.distributed_optimizer_synced", d);
    sync_flag(&c->ddp.overlap_param_gather, &c->optimizer.overlap_param_gather,
              "ddp.overlap_param_gather", "optimizer.overlap_param_gather",
              "finalize.overlap_param_gather_synced", d);
    derive_scheduler(c, d);
    /* Needs the padded vocabulary and the derived model sizes above. */
    TR_TRY(tr_model_stats_fill(c));
    return TR_OK;
}

tr_status tr_config_finalize_against(tr_config *c, const tr_world *w, const tr_config *before,
                                     int *changed, int cap, int *n_changed, tr_diags *d) {
    tr_status s = finalize_into(c, w, d);
    if (s == TR_OK) {
        tr_origin o = tr_origin_make(TR_ORIGIN_DERIVED, NULL);
        s = tr_config_mark_changes_listed(c, before, &o, changed, cap, n_changed);
    }
    if (s == TR_OK) c->finalized = true;
    return s;
}

tr_status tr_config_finalize(tr_config *c, const tr_world *w, tr_diags *d) {
    tr_config *before = malloc(sizeof *before);
    if (!before) return TR_ERR_NOMEM;
    tr_status s = tr_config_copy(before, c);
    if (s != TR_OK) {
        free(before);
        return s;
    }
    s = tr_config_finalize_against(c, w, before, NULL, 0, NULL, d);
    tr_config_free(before);
    free(before);
    return s;
}
