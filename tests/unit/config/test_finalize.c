/* finalize(): derived values against hand computations from the reference formulas, origins,
 * presets and overlap defaults; validate(): several violations in one pass, catalog mode,
 * --strict promotion, and the rule table's own invariants (every rule has a test). */
#include <ctype.h>
#include <stdlib.h>

#include "core/config.h"
#include "core/rules/rule.h"
#include "tests/unit/harness.h"
#include "tests/unit/config/rules_fixture.h"

typedef struct env {
    tr_config c;
    tr_diags d;
} env;

static void setup(env *e, int moe, const char *overrides) {
    tr_diags_init(&e->d);
    CHECK_INT_EQ(moe ? fixture_moe(&e->c, &e->d) : fixture_dense(&e->c, &e->d), TR_OK);
    CHECK_INT_EQ(fixture_apply(&e->c, overrides, &e->d), TR_OK);
}
static void finalize(env *e, int world) {
    tr_world w = {world, 8};
    CHECK_INT_EQ(tr_config_finalize(&e->c, &w, &e->d), TR_OK);
}
static void teardown(env *e) {
    tr_config_free(&e->c);
    tr_diags_free(&e->d);
}

static void test_scheduler_iteration_mode(void) {
    env e;
    /* lr_decay_iters := train_iters = 1000; steps are samples: x GBS 32. */
    setup(&e, 0, "train.train_iters=1000;train.global_batch_size=32;scheduler.lr_warmup_iters=100");
    finalize(&e, 1);
    CHECK_INT_EQ(e.c.scheduler.lr_decay_iters, 1000);
    CHECK_INT_EQ(e.c.derived.lr_decay_steps, 32000);
    CHECK_INT_EQ(e.c.derived.lr_warmup_steps, 3200);
    CHECK_INT_EQ(e.c.derived.wd_incr_steps, 32000);
    CHECK_INT_EQ(e.c.derived.wsd_decay_steps, TR_NULL_INT);
    CHECK_INT_EQ(e.c.origin[TR_FID_derived_lr_warmup_steps].kind, TR_ORIGIN_DERIVED);
    CHECK_INT_EQ(e.c.origin[TR_FID_scheduler_lr_decay_iters].kind, TR_ORIGIN_DERIVED);
    teardown(&e);
    /* max_steps drives decay and wd; WSD decay defaults to the decay; warmup fraction. */
    setup(&e, 0,
          "train.train_iters=100;train.global_batch_size=8;scheduler.max_steps=400;"
          "scheduler.lr_decay_style=WSD;scheduler.lr_warmup_fraction=0.25");
    finalize(&e, 1);
    CHECK_INT_EQ(e.c.scheduler.lr_decay_iters, 400);
    CHECK_INT_EQ(e.c.scheduler.lr_wsd_decay_iters, 400);
    CHECK_INT_EQ(e.c.derived.lr_decay_steps, 3200);
    CHECK_INT_EQ(e.c.derived.wd_incr_steps, 3200);
    CHECK_INT_EQ(e.c.derived.wsd_decay_steps, 3200);
    CHECK_INT_EQ(e.c.derived.lr_warmup_steps, 800);
    teardown(&e);
}

static void test_scheduler_sample_mode(void) {
    env e;
    /* train_iters = 10000 // 32 = 312; decay = train_samples; warmup in samples. */
    setup(&e, 0,
          "train.train_iters=null;train.train_samples=10000;train.global_batch_size=32;"
          "scheduler.lr_warmup_samples=500;scheduler.lr_wsd_decay_samples=2000");
    finalize(&e, 1);
    CHECK_INT_EQ(e.c.train.train_iters, 312);
    CHECK_INT_EQ(e.c.origin[TR_FID_train_train_iters].kind, TR_ORIGIN_DERIVED);
    CHECK_INT_EQ(e.c.scheduler.lr_decay_samples, 10000);
    CHECK_INT_EQ(e.c.derived.lr_decay_steps, 10000);
    CHECK_INT_EQ(e.c.derived.wd_incr_steps, 10000);
    CHECK_INT_EQ(e.c.derived.wsd_decay_steps, 2000);
    CHECK_INT_EQ(e.c.derived.lr_warmup_steps, 500);
    CHECK_INT_EQ(tr_config_validate(&e.c, NULL, &e.d), TR_OK);
    teardown(&e);
}

static void test_warmup_cap(void) {
    env e;
    setup(&e, 0, "train.train_iters=10;train.global_batch_size=4;scheduler.lr_warmup_iters=20");
    finalize(&e, 1);
    CHECK_INT_EQ(e.c.derived.lr_decay_steps, 40);
    CHECK_INT_EQ(e.c.derived.lr_warmup_steps, 39);
    const tr_diag *g = tr_diags_find(&e.d, "scheduler.warmup_capped");
    CHECK(g && g->severity == TR_SEV_WARNING);
    teardown(&e);
}

static void test_vocab_padding(void) {
    env e;
    setup(&e, 0,
          "tokenizer.vocab_size=50257;model.make_vocab_size_divisible_by=128;"
          "model.tensor_model_parallel_size=2");
    finalize(&e, 2);
    CHECK_INT_EQ(e.c.model.vocab_size, 50257);
    CHECK_INT_EQ(e.c.derived.padded_vocab_size, 50432);
    teardown(&e);
    setup(&e, 0, "tokenizer.vocab_size=32000;model.tensor_model_parallel_size=2");
    finalize(&e, 2);
    CHECK_INT_EQ(e.c.derived.padded_vocab_size, 32000);
    teardown(&e);
    /* An explicit model vocab is kept unpadded unless should_pad_vocab asks. */
    setup(&e, 0, "model.vocab_size=50257");
    finalize(&e, 1);
    CHECK_INT_EQ(e.c.derived.padded_vocab_size, 50257);
    teardown(&e);
    setup(&e, 0, "model.vocab_size=50257;model.should_pad_vocab=true");
    finalize(&e, 1);
    CHECK_INT_EQ(e.c.derived.padded_vocab_size, 50304);
    teardown(&e);
    /* use_tokenizer_vocab_size replaces the model's size by the tokenizer's. */
    setup(&e, 0, "model.vocab_size=50257;tokenizer.use_tokenizer_vocab_size=true");
    finalize(&e, 1);
    CHECK_INT_EQ(e.c.model.vocab_size, 1024);
    CHECK_INT_EQ(e.c.derived.padded_vocab_size, 1024);
    teardown(&e);
}

static void test_parallel_sizes_moe_folding(void) {
    env e;
    setup(&e, 1,
          "model.tensor_model_parallel_size=2;model.context_parallel_size=2;"
          "model.pipeline_model_parallel_size=2;model.expert_model_parallel_size=4;"
          "model.expert_tensor_parallel_size=1;model.sequence_parallel=true");
    finalize(&e, 16);
    CHECK_INT_EQ(e.c.derived.data_parallel_size, 2);
    CHECK_INT_EQ(e.c.derived.expert_data_parallel_size, 2);
    CHECK_INT_EQ(e.c.derived.eval_data_parallel_size, 2);
    CHECK_INT_EQ(e.c.derived.num_microbatches, 4); /* 8 / (1 * 2) */
    teardown(&e);
    /* ETP null: 1 with EP > 1 (MBridge), TP otherwise; DP for a non-divisible world stays 1. */
    setup(&e, 1, "model.tensor_model_parallel_size=2;model.sequence_parallel=true");
    finalize(&e, 4);
    CHECK_INT_EQ(e.c.model.expert_tensor_parallel_size, 1);
    CHECK_INT_EQ(e.c.derived.expert_data_parallel_size, 2);
    teardown(&e);
    setup(&e, 0, "model.tensor_model_parallel_size=2");
    finalize(&e, 3);
    CHECK_INT_EQ(e.c.model.expert_tensor_parallel_size, 2);
    CHECK_INT_EQ(e.c.derived.data_parallel_size, 1);
    teardown(&e);
    setup(&e, 0, "dist.eval_context_parallel_size=2;train.global_batch_size=16");
    finalize(&e, 4);
    CHECK_INT_EQ(e.c.derived.data_parallel_size, 4);
    CHECK_INT_EQ(e.c.derived.eval_data_parallel_size, 2);
    CHECK_INT_EQ(e.c.derived.num_microbatches, 4);
    CHECK_INT_EQ(e.c.derived.world_size, 4);
    CHECK_INT_EQ(e.c.derived.gpus_per_node, 8);
    teardown(&e);
}

static void test_model_defaults(void) {
    env e;
    setup(&e, 1, "model.pipeline_model_parallel_size=2;mixed_precision.preset=bf16_mixed");
    finalize(&e, 2);
    CHECK_INT_EQ(e.c.model.ffn_hidden_size, 256);
    CHECK_INT_EQ(e.c.model.kv_channels, 16);
    CHECK_INT_EQ(e.c.model.num_query_groups, 4);
    CHECK_INT_EQ(e.c.model.moe_ffn_hidden_size, 256);
    CHECK_INT_EQ(e.c.model.microbatch_group_size_per_vp_stage, 2);
    CHECK_INT_EQ(e.c.model.pipeline_dtype, TR_DTYPE_BF16);
    CHECK_INT_EQ(e.c.model.autocast_dtype, TR_DTYPE_BF16);
    CHECK(tr_strlist_has(&e.c.model.recompute_modules, "core_attn"));
    CHECK_INT_EQ(e.c.origin[TR_FID_model_ffn_hidden_size].kind, TR_ORIGIN_DERIVED);
    CHECK_INT_EQ(e.c.derived.mode, TR_MODE_PRETRAIN);
    /* model_stats ran on the finalized model: MoE has more parameters than it activates. */
    CHECK(e.c.derived.num_params > e.c.derived.num_active_params);
    CHECK(e.c.derived.num_active_params > 0);
    teardown(&e);
    setup(&e, 0, "peft.scheme=dora");
    finalize(&e, 1);
    CHECK_INT_EQ(e.c.derived.mode, TR_MODE_DORA);
    teardown(&e);
    setup(&e, 0, "dataset.type=sft;model.pipeline_model_parallel_size=2");
    finalize(&e, 2);
    CHECK_INT_EQ(e.c.derived.mode, TR_MODE_SFT);
    CHECK(e.c.dataset.pad_to_max_length);
    CHECK_INT_EQ(e.c.dataset.dataloader_type, TR_DL_BATCH);
    teardown(&e);
}

static void test_mixed_precision_presets(void) {
    env e;
    setup(&e, 0, "mixed_precision.preset=bf16_mixed");
    finalize(&e, 1);
    CHECK(e.c.model.bf16 && e.c.optimizer.bf16 && !e.c.model.fp16);
    CHECK_INT_EQ(e.c.model.params_dtype, TR_DTYPE_BF16);
    CHECK_INT_EQ(e.c.optimizer.params_dtype, TR_DTYPE_BF16);
    CHECK(e.c.ddp.grad_reduce_in_fp32);
    CHECK_INT_EQ(e.c.origin[TR_FID_model_bf16].kind, TR_ORIGIN_DERIVED);
    teardown(&e);
    setup(&e, 0, "mixed_precision.preset=fp16_mixed;ddp.grad_reduce_in_fp32=true");
    finalize(&e, 1);
    CHECK(e.c.model.fp16 && e.c.optimizer.fp16 && !e.c.model.bf16);
    CHECK_INT_EQ(e.c.model.params_dtype, TR_DTYPE_FP16);
    CHECK(!e.c.ddp.grad_reduce_in_fp32);
    teardown(&e);
    /* Explicit mixed_precision fields win over the preset. */
    setup(&e, 0,
          "mixed_precision.preset=bf16_mixed;mixed_precision.grad_reduce_in_fp32=false;"
          "mixed_precision.params_dtype=fp32");
    finalize(&e, 1);
    CHECK(e.c.model.bf16);
    CHECK(!e.c.ddp.grad_reduce_in_fp32);
    CHECK_INT_EQ(e.c.model.params_dtype, TR_DTYPE_FP32);
    teardown(&e);
    /* No preset and nothing explicit: model and optimizer keep their own values. */
    setup(&e, 0, "model.bf16=true;optimizer.bf16=true;ddp.grad_reduce_in_fp32=true");
    finalize(&e, 1);
    CHECK(e.c.model.bf16 && e.c.optimizer.bf16 && e.c.ddp.grad_reduce_in_fp32);
    CHECK_INT_EQ(e.c.model.params_dtype, TR_DTYPE_FP32);
    teardown(&e);
}

static void test_comm_overlap_defaults(void) {
    env e;
    /* PP 2 with VPP 2 at DP 2 with the distributed optimizer. */
    setup(&e, 0,
          "comm_overlap.tp_comm_overlap=false;model.pipeline_model_parallel_size=2;"
          "model.virtual_pipeline_model_parallel_size=2;ddp.use_distributed_optimizer=true;"
          "optimizer.use_distributed_optimizer=true");
    finalize(&e, 4);
    CHECK(e.c.model.overlap_p2p_comm && !e.c.model.batch_p2p_comm);
    CHECK(e.c.ddp.overlap_grad_reduce && e.c.ddp.overlap_param_gather);
    CHECK(e.c.optimizer.overlap_param_gather && e.c.ddp.align_param_gather);
    CHECK_INT_EQ(e.c.ddp.bucket_size, 128 * 1024 * 1024);
    CHECK_INT_EQ(tr_config_validate(&e.c, NULL, &e.d), TR_OK);
    teardown(&e);
    /* PP 2 without VPP, DP 1: batched p2p, no DP overlap; user values win. */
    setup(&e, 0,
          "comm_overlap.tp_comm_overlap=false;model.pipeline_model_parallel_size=2;"
          "ddp.use_distributed_optimizer=true;optimizer.use_distributed_optimizer=true;"
          "comm_overlap.bucket_size=1000;comm_overlap.batch_p2p_comm=false");
    finalize(&e, 2);
    CHECK(!e.c.model.overlap_p2p_comm && !e.c.model.batch_p2p_comm);
    CHECK(!e.c.ddp.overlap_grad_reduce && !e.c.ddp.overlap_param_gather);
    CHECK_INT_EQ(e.c.ddp.bucket_size, 1000);
    teardown(&e);
    /* No comm_overlap section: the model's own p2p flags stay. */
    setup(&e, 0,
          "model.pipeline_model_parallel_size=2;model.virtual_pipeline_model_parallel_size=2");
    finalize(&e, 2);
    CHECK(!e.c.model.overlap_p2p_comm && e.c.model.batch_p2p_comm);
    teardown(&e);
}

static void test_distributed_optimizer_sync_and_deprecated_copy(void) {
    env e;
    setup(&e, 0,
          "optimizer.use_distributed_optimizer=true;train.eval_interval=50;"
          "train.skip_train=true");
    finalize(&e, 1);
    CHECK(e.c.ddp.use_distributed_optimizer);
    CHECK_INT_EQ(e.c.origin[TR_FID_ddp_use_distributed_optimizer].kind, TR_ORIGIN_DERIVED);
    const tr_diag *g = tr_diags_find(&e.d, "finalize.distributed_optimizer_synced");
    CHECK(g && g->severity == TR_SEV_NOTE);
    CHECK_INT_EQ(e.c.validation.eval_interval, 50);
    CHECK(e.c.validation.skip_train);
    teardown(&e);
}

static void test_batch_derivations(void) {
    env e;
    setup(&e, 0,
          "train.global_batch_size=10;train.micro_batch_size=2;"
          "train.decrease_batch_size_if_needed=true");
    finalize(&e, 2);
    CHECK_INT_EQ(e.c.train.global_batch_size, 8);
    CHECK_INT_EQ(e.c.derived.num_microbatches, 2);
    CHECK_INT_EQ(e.c.validation.eval_global_batch_size, 8);
    CHECK_INT_EQ(e.c.validation.eval_micro_batch_size, 2);
    teardown(&e);
}

static void test_finalize_is_idempotent(void) {
    env e;
    setup(&e, 1, "mixed_precision.preset=bf16_mixed;tokenizer.vocab_size=50257");
    finalize(&e, 2);
    tr_config first;
    CHECK_INT_EQ(tr_config_copy(&first, &e.c), TR_OK);
    finalize(&e, 2);
    for (int i = 0; i < tr_field_count; i++)
        if (!tr_config_field_equal(&first, &e.c, &tr_fields[i])) {
            fprintf(stderr, "  changed on refinalize: %s\n", tr_fields[i].path);
            CHECK(0);
        }
    tr_config_free(&first);
    teardown(&e);
}

static void test_all_violations_in_one_pass(void) {
    env e;
    setup(&e, 0,
          "model.num_attention_heads=6;model.hidden_size=96;model.tensor_model_parallel_size=4;"
          "train.global_batch_size=7;model.sequence_parallel=false;optimizer.lr=null;"
          "dataset.seq_length=64");
    finalize(&e, 8);
    CHECK_INT_EQ(tr_config_validate(&e.c, NULL, &e.d), TR_ERR_CONFIG);
    CHECK(tr_diags_find(&e.d, "parallel.heads_divisible_by_tp") != NULL);
    CHECK(tr_diags_find(&e.d, "batch.global_divisible_by_micro_dp") != NULL);
    CHECK(tr_diags_find(&e.d, "optimizer.lr_set") != NULL);
    CHECK(tr_diags_find(&e.d, "data.seq_length_matches_model") != NULL);
    CHECK(e.d.n_errors >= 4);
    /* The origin of the offending value travels with the diagnostic. */
    const tr_diag *g = tr_diags_find(&e.d, "parallel.heads_divisible_by_tp");
    CHECK(g && strcmp(g->origin_text, "default") != 0);
    teardown(&e);
}

static void test_catalog_mode_and_strict(void) {
    env e;
    setup(&e, 0, "peft.scheme=lora");
    finalize(&e, 1);
    tr_validate_opts catalog = {.catalog_mode = true};
    CHECK_INT_EQ(tr_config_validate(&e.c, &catalog, &e.d), TR_OK);
    const tr_diag *g = tr_diags_find(&e.d, "launch.checkpoint.peft_needs_pretrained");
    CHECK(g && g->severity == TR_SEV_NOTE);
    CHECK(tr_diags_find(&e.d, "checkpoint.peft_needs_pretrained") == NULL);
    tr_diags_clear(&e.d);
    CHECK_INT_EQ(tr_config_validate(&e.c, NULL, &e.d), TR_ERR_CONFIG);
    CHECK(tr_diags_find(&e.d, "checkpoint.peft_needs_pretrained") != NULL);
    teardown(&e);
    /* --strict: a warning-only config passes until warnings are promoted. */
    setup(&e, 0, "model.pipeline_model_parallel_size=2");
    finalize(&e, 2);
    CHECK_INT_EQ(tr_config_validate(&e.c, NULL, &e.d), TR_OK);
    CHECK_INT_EQ(e.d.n_errors, 0);
    CHECK(e.d.n_warnings >= 1);
    tr_diags_promote_warnings(&e.d);
    CHECK(e.d.n_errors >= 1);
    CHECK_INT_EQ(tr_diags_find(&e.d, "parallel.pp_without_vpp")->severity, TR_SEV_ERROR);
    teardown(&e);
}

static void test_layout_grammar(void) {
    env e;
    setup(&e, 0,
          "model.pipeline_model_parallel_size=3;model.num_layers=6;"
          "model.pipeline_model_parallel_layout=E(tt|)*2t*2L");
    finalize(&e, 3);
    tr_config_validate(&e.c, NULL, &e.d);
    CHECK(tr_diags_find(&e.d, "pipeline.layout_valid") == NULL);
    teardown(&e);
    setup(&e, 0,
          "model.pipeline_model_parallel_size=2;model.pipeline_model_parallel_layout=Ett|(ttL");
    finalize(&e, 2);
    tr_config_validate(&e.c, NULL, &e.d);
    const tr_diag *g = tr_diags_find(&e.d, "pipeline.layout_valid");
    CHECK(g != NULL);
    if (g) CHECK_CONTAINS(g->message, "unclosed");
    teardown(&e);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static void test_rule_table_invariants_and_coverage(void) {
    CHECK(tr_rule_count > 80);
    char *tests = read_text(TRESTLE_SOURCE_DIR "/tests/unit/config/test_rules_table.c");
    char *self = read_text(TRESTLE_SOURCE_DIR "/tests/unit/config/test_finalize.c");
    char *capability = read_text(TRESTLE_SOURCE_DIR "/tests/unit/train/test_train_capability.c");
    char *effects = read_text(TRESTLE_SOURCE_DIR "/tests/unit/config/test_effects.c");
    char *follow = read_text(TRESTLE_SOURCE_DIR "/tests/unit/config/test_finalize_follow.c");
    CHECK(tests && self && capability && effects && follow);
    for (int i = 0; i < tr_rule_count; i++) {
        const tr_rule *r = &tr_rules[i];
        const char *dot = strchr(r->id, '.');
        CHECK(dot && dot > r->id && dot[1]);
        bool well_formed = dot != NULL;
        for (const char *p = r->id; *p; p++)
            well_formed &= islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_' ||
                           (*p == '.' && p == dot);
        if (!well_formed) fprintf(stderr, "  malformed rule id %s\n", r->id);
        CHECK(well_formed);
        CHECK(strncmp(r->id, "launch.", 7) != 0);
        CHECK(r->summary && strlen(r->summary) > 10);
        CHECK(r->severity == TR_SEV_ERROR || r->severity == TR_SEV_WARNING ||
              r->severity == TR_SEV_NOTE);
        for (int j = 0; j < i; j++) CHECK(strcmp(tr_rules[j].id, r->id) != 0);
        char quoted[200];
        snprintf(quoted, sizeof quoted, "\"%s\"", r->id);
        bool covered = (tests && strstr(tests, quoted)) || (self && strstr(self, quoted)) ||
                       (capability && strstr(capability, quoted)) ||
                       (effects && strstr(effects, quoted)) || (follow && strstr(follow, quoted));
        if (!covered) fprintf(stderr, "  rule %s has no test\n", r->id);
        CHECK(covered);
    }
    free(tests);
    free(self);
    free(capability);
    free(effects);
    free(follow);
}

TR_TEST_MAIN(TR_TEST(test_scheduler_iteration_mode), TR_TEST(test_scheduler_sample_mode),
             TR_TEST(test_warmup_cap), TR_TEST(test_vocab_padding),
             TR_TEST(test_parallel_sizes_moe_folding), TR_TEST(test_model_defaults),
             TR_TEST(test_mixed_precision_presets), TR_TEST(test_comm_overlap_defaults),
             TR_TEST(test_distributed_optimizer_sync_and_deprecated_copy),
             TR_TEST(test_batch_derivations), TR_TEST(test_finalize_is_idempotent),
             TR_TEST(test_all_violations_in_one_pass), TR_TEST(test_catalog_mode_and_strict),
             TR_TEST(test_layout_grammar), TR_TEST(test_rule_table_invariants_and_coverage))
