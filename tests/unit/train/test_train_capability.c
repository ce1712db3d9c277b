/* The dry run and the launch agree on what the runtime can run: every capability rule
 * (runtime.*) refuses a setting in validation, and tr_train_run refuses the same setting in a
 * config nobody validated (as a library caller may pass) under the same id, keys, message and
 * fix. A capability rule added without a case here fails the coverage check. */
#include <stdlib.h>
#include <string.h>

#include "recipes/resolve.h"
#include "runtime/train/train.h"
#include "tests/unit/harness.h"

typedef struct capability_case {
    const char *id;
    int world;
    const char *ov[5]; /* applied as overrides to the dry run, set by hand for the launch */
} capability_case;

static const capability_case cases[] = {
    {"runtime.context_parallel",
     2,
     {"model.context_parallel_size=2", "model.cp_comm_type=[a2a+p2p]",
      "model.hierarchical_context_parallel_sizes=[2,1]"}},
    {"runtime.cp_dropout",
     2,
     {"model.context_parallel_size=2", "peft.scheme=lora", "peft.dropout=0.1"}},
    {"runtime.cp_packed",
     2,
     {"model.context_parallel_size=2", "dataset.type=sft", "dataset.pad_seq_to_mult=2"}},
    {"runtime.moe_layers", 1, {"model.num_moe_experts=4", "model.num_layers=300"}},
    {"runtime.moe_tp",
     2,
     {"model.num_moe_experts=4", "model.tensor_model_parallel_size=2",
      "model.sequence_parallel=true", "model.moe_input_jitter_eps=0.01"}},
    {"runtime.moe_tp",
     2,
     {"model.num_moe_experts=4", "model.moe_ffn_hidden_size=63",
      "model.expert_tensor_parallel_size=2"}},
    {"runtime.moe_allgather",
     2,
     {"model.num_moe_experts=4", "model.expert_model_parallel_size=2",
      "model.moe_expert_capacity_factor=1.0", "model.moe_pad_expert_input_to_capacity=true"}},
    {"runtime.moe_peft", 1, {"model.num_moe_experts=4", "peft.scheme=dora"}},
    {"runtime.moe_peft",
     2,
     {"model.num_moe_experts=4", "peft.scheme=lora", "model.expert_tensor_parallel_size=2"}},
    {"runtime.moe_bias", 1, {"model.num_moe_experts=4", "model.add_bias_linear=true"}},
    {"runtime.moe_router", 1, {"model.num_moe_experts=4", "model.moe_router_dtype=fp64"}},
    {"runtime.moe_global_aux_dp",
     2,
     {"model.num_moe_experts=4", "model.moe_router_load_balancing_type=global_aux_loss"}},
    {"runtime.dropout_below_one", 1, {"model.attention_dropout=1"}},
    {"runtime.rotary_interleaved", 1, {"model.rotary_interleaved=true"}},
    {"runtime.yarn", 1, {"model.position_embedding_type=yarn"}},
    {"runtime.sliding_window", 1, {"model.window_size=[16,0]"}},
    {"runtime.fsdp", 1, {"dist.use_megatron_fsdp=true"}},
    {"runtime.mla_context_parallel",
     2,
     {"model.multi_latent_attention=true", "model.context_parallel_size=2"}},
    {"runtime.mla_peft", 1, {"model.multi_latent_attention=true", "peft.scheme=lora"}},
    {"runtime.mla_layernorm",
     1,
     {"model.multi_latent_attention=true", "model.normalization=LayerNorm"}},
    {"runtime.mla_rope_dim",
     1,
     {"model.multi_latent_attention=true", "model.qk_pos_emb_head_dim=3"}},
    {"runtime.mtp_context_parallel",
     2,
     {"model.mtp_num_layers=1", "model.context_parallel_size=2"}},
    {"runtime.mtp_peft", 1, {"model.mtp_num_layers=1", "peft.scheme=lora"}},
    {"runtime.mtp_defer_wgrad",
     2,
     {"model.mtp_num_layers=1", "model.pipeline_model_parallel_size=2",
      "model.defer_embedding_wgrad_compute=true"}},
    {"runtime.mtp_positions",
     1,
     {"model.mtp_num_layers=1", "model.position_embedding_type=learned_absolute"}},
    {"runtime.mtp_packing", 1, {"model.mtp_num_layers=1", "dataset.packed_sequence_size=64"}},
    {"runtime.mtp_layout",
     2,
     {"model.mtp_num_layers=1", "model.pipeline_model_parallel_size=2",
      "model.pipeline_model_parallel_layout=\"Etm|tL\""}},
    {"runtime.params_dtype", 1, {"mixed_precision.preset=null", "model.params_dtype=bf16"}},
    {"runtime.fp16_cross_entropy", 1, {"model.fp16_lm_cross_entropy=true"}},
    {"runtime.activation", 1, {"model.activation_func=gelu"}},
    {"runtime.tp_split", 2, {"model.tensor_model_parallel_size=2", "model.ffn_hidden_size=171"}},
    {"runtime.vocab",
     1,
     {"dataset.type=text", "model.vocab_size=100", "tokenizer.use_tokenizer_vocab_size=false"}},
    {"runtime.train_iters", 1, {"train.train_iters=null"}},
    {"runtime.batch_rampup", 1, {"train.rampup_batch_size=[4,4,64]"}},
    {"runtime.document_resets", 1, {"dataset.reset_position_ids=true"}},
    {"runtime.not_logged", 1, {"logger.log_memory=true"}},
    {"runtime.indexed_masks",
     1,
     {"dataset.data_path=[/nonexistent/prefix]", "dataset.split=\"1,0,0\"",
      "dataset.eod_mask_loss=true"}},
    {"runtime.optimizer", 1, {"optimizer.decoupled_weight_decay=false"}},
    {"runtime.optimizer_precision", 1, {"mixed_precision.preset=null", "model.bf16=true"}},
    {"runtime.autocast", 1, {"mixed_precision.autocast_enabled=true"}},
    {"runtime.loss_scale",
     1,
     {"mixed_precision.preset=fp16_mixed", "optimizer.fp16=true", "optimizer.loss_scale=0"}},
    {"runtime.distopt_instances", 2, {"ddp.num_distributed_optimizer_instances=2"}},
    {"runtime.lora", 1, {"peft.scheme=dora", "peft.dropout=0.1"}},
    {"runtime.lora_modules", 1, {"peft.scheme=lora", "peft.target_modules=[*.linear_qkv]"}},
    {"runtime.ckpt_format",
     1,
     {"checkpoint.save=/nonexistent/ckpt", "checkpoint.ckpt_format=torch"}},
    /* keys whose effect the runtime lacks (core/rules/effects.c) */
    {"runtime.p2p_warmup_flush",
     2,
     {"model.pipeline_model_parallel_size=2", "model.virtual_pipeline_model_parallel_size=1",
      "model.overlap_p2p_comm=true", "model.batch_p2p_comm=false",
      "model.overlap_p2p_comm_warmup_flush=true"}},
    {"runtime.dataloader_type", 1, {"dataset.dataloader_type=cyclic"}},
    {"runtime.num_epochs",
     1,
     {"train.train_iters=null", "train.num_epochs=1", "dataset.dataloader_type=batch"}},
    {"runtime.drop_last", 1, {"dataset.drop_last=false"}},
    {"runtime.gradient_checks", 1, {"ddp.check_for_large_grads=true"}},
    {"runtime.grad_norm_across_mp", 1, {"train.skip_sync_grad_norm_across_mp=true"}},
    {"runtime.rerun_state_machine", 1, {"rerun_state_machine.rerun_mode=validate_results"}},
    {"runtime.validation_sets", 1, {"validation.multiple_validation_sets=true"}},
    {"runtime.checkpoint_scheduler", 1, {"scheduler.use_checkpoint_opt_param_scheduler=true"}},
    {"runtime.non_persistent_checkpoints", 1, {"checkpoint.non_persistent_save_interval=10"}},
    {"runtime.tokenizer_options", 1, {"tokenizer.vocab_extra_ids=4"}},
    {"runtime.init_and_adapter_dtype", 1, {"rng.data_parallel_random_init=true"}},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

static int n_overrides(const capability_case *k) {
    int n = 0;
    while (n < 5 && k->ov[n]) n++;
    return n;
}

static bool same(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_case(const capability_case *k) {
    tr_diags dry, launch;
    tr_diags_init(&dry);
    tr_diags_init(&launch);
    tr_config c, base;
    tr_resolve_opts o = {.recipe = "llama_tiny_pretrain",
                         .overrides = k->ov,
                         .n_overrides = n_overrides(k),
                         .world = {k->world, k->world}};
    tr_status s = tr_resolve(&o, &c, &dry);
    tr_config_free(&c);
    const tr_diag *g = tr_diags_find(&dry, k->id);
    if (!g) fprintf(stderr, "  dry run: no %s for %s\n", k->id, k->ov[0]);
    CHECK(g != NULL);
    if (g && g->severity == TR_SEV_ERROR) CHECK_INT_EQ(s, TR_ERR_CONFIG);
    /* The launch side: the same config, finalized but never validated, as a library caller may
     * hand it to tr_train_run (one iteration where it trains). */
    const char *ov[6] = {"train.train_iters=1"};
    for (int i = 0; i < n_overrides(k); i++) ov[i + 1] = k->ov[i];
    tr_resolve_opts bo = o;
    bo.overrides = ov;
    bo.n_overrides = n_overrides(k) + 1;
    bo.skip_validate = true;
    CHECK_INT_EQ(tr_resolve(&bo, &base, &launch), TR_OK);
    CHECK_INT_EQ(launch.n_errors, 0);
    tr_train_opts to = {0};
    tr_train_result r;
    s = tr_train_run(&base, &to, &r, &launch);
    const tr_diag *h = tr_diags_find(&launch, k->id);
    if (!h) fprintf(stderr, "  launch: no %s for %s\n", k->id, k->ov[0]);
    CHECK(h != NULL);
    if (g && h) {
        CHECK_INT_EQ(h->severity, g->severity);
        CHECK(same(h->keys, g->keys));
        CHECK(same(h->hint, g->hint));
        CHECK(same(h->message, g->message));
        if (h->severity == TR_SEV_ERROR) CHECK_INT_EQ(s, TR_ERR_CONFIG);
    }
    tr_config_free(&base);
    tr_diags_free(&dry);
    tr_diags_free(&launch);
}

static void test_dry_run_and_launch_refuse_alike(void) {
    for (int i = 0; i < N_CASES; i++) check_case(&cases[i]);
}

/* Every capability rule of the table has a case above. */
static void test_every_capability_rule_has_a_case(void) {
    int n = 0;
    for (int i = 0; i < tr_rule_count; i++) {
        if (!tr_rule_is_capability(&tr_rules[i]) || !tr_rules[i].check) continue;
        n++;
        bool found = false;
        for (int k = 0; k < N_CASES; k++) found |= strcmp(cases[k].id, tr_rules[i].id) == 0;
        if (!found) fprintf(stderr, "  no case for %s\n", tr_rules[i].id);
        CHECK(found);
    }
    int ids = 0; /* a rule may have several cases */
    for (int k = 0; k < N_CASES; k++) {
        bool seen = false;
        for (int j = 0; j < k; j++) seen |= strcmp(cases[j].id, cases[k].id) == 0;
        ids += !seen;
    }
    CHECK_INT_EQ(n, ids);
}

/* A launch whose validation already reported a capability error refuses without repeating it. */
static void test_heard_error_still_refuses_once(void) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    const char *ov[] = {"train.train_iters=1", "model.multi_latent_attention=true",
                        "model.normalization=LayerNorm"};
    tr_resolve_opts o = {
        .recipe = "llama_tiny_pretrain", .overrides = ov, .n_overrides = 3, .world = {1, 1}};
    CHECK_INT_EQ(tr_resolve(&o, &c, &d), TR_ERR_CONFIG);
    int n = d.n;
    CHECK_INT_EQ(tr_runtime_check(&c, &d), TR_ERR_CONFIG);
    CHECK_INT_EQ(d.n, n);
    tr_config_free(&c);
    tr_diags_free(&d);
}

/* TP larger than the query groups (llama_tiny has 2) is run, not refused: KV heads are copied
 * to the TP ranks sharing a group. TP must still divide the heads. */
static void test_tp_above_query_groups_runs(void) {
    const char *ov[] = {"model.tensor_model_parallel_size=4"};
    tr_resolve_opts o = {
        .recipe = "llama_tiny_pretrain", .overrides = ov, .n_overrides = 1, .world = {4, 4}};
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_resolve(&o, &c, &d), TR_OK);
    CHECK_INT_EQ(c.model.num_query_groups, 2);
    CHECK(tr_diags_find(&d, "runtime.tp_split") == NULL);
    CHECK_INT_EQ(tr_runtime_check(&c, &d), TR_OK);
    tr_config_free(&c);
    tr_diags_free(&d);
    const char *ov8[] = {"model.tensor_model_parallel_size=8"};
    o.overrides = ov8;
    o.world = (tr_world){8, 8};
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_resolve(&o, &c, &d), TR_ERR_CONFIG);
    CHECK(tr_diags_find(&d, "runtime.tp_split") != NULL);
    tr_config_free(&c);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_tp_above_query_groups_runs),
             TR_TEST(test_dry_run_and_launch_refuse_alike),
             TR_TEST(test_every_capability_rule_has_a_case),
             TR_TEST(test_heard_error_still_refuses_once))
