/* Qwen3 recipes. Qwen3-30B-A3B pretraining follows reference §6.4i (the 16-GPU short alias); the
 * other Qwen3 recipes use the §6.3 templates with the Qwen tokenizer, and their layouts (which the
 * reference does not list) are Trestle's choice for the model size. */
#include "recipes/common.h"

static void layout(tr_config *c, int64_t tp, int64_t pp, int64_t ep) {
    tr_recipe_layout(&c->model, tp, pp, TR_NULL_INT, 1, ep, ep > 1 ? 1 : TR_NULL_INT, tp > 1);
    if (ep > 1) c->model.moe_token_dispatcher_type = TR_DISPATCH_ALLTOALL;
}

static tr_status dense_pretrain(tr_config *c, const char *hub_id, int64_t tp) {
    TR_TRY(tr_pretrain_common(c));
    TR_TRY(tr_recipe_hf_tokenizer(c, hub_id));
    tr_recipe_seq_length(c, 4096);
    layout(c, tp, 1, 1);
    return TR_OK;
}

static tr_status sft(tr_config *c, const char *hub_id) {
    TR_TRY(tr_sft_common(c));
    TR_TRY(tr_recipe_hf_tokenizer(c, hub_id));
    tr_recipe_seq_length(c, 2048);
    return TR_OK;
}

static tr_status lora(tr_config *c, const char *hub_id) {
    TR_TRY(tr_peft_common(c));
    TR_TRY(tr_recipe_hf_tokenizer(c, hub_id));
    tr_recipe_seq_length(c, 2048);
    c->model.cross_entropy_loss_fusion = false;
    return TR_OK;
}

/* ---- Qwen3-0.6B: one GPU for everything ---- */
static tr_status q600m_pretrain(tr_config *c) {
    return dense_pretrain(c, "Qwen/Qwen3-0.6B", 1);
}
static tr_status q600m_sft(tr_config *c) {
    return sft(c, "Qwen/Qwen3-0.6B");
}
static tr_status q600m_lora(tr_config *c) {
    return lora(c, "Qwen/Qwen3-0.6B");
}

/* ---- Qwen3-8B: pretrain TP 4, SFT TP 2, LoRA on one GPU ---- */
static tr_status q8b_pretrain(tr_config *c) {
    return dense_pretrain(c, "Qwen/Qwen3-8B", 4);
}
static tr_status q8b_sft(tr_config *c) {
    TR_TRY(sft(c, "Qwen/Qwen3-8B"));
    layout(c, 2, 1, 1);
    return TR_OK;
}
static tr_status q8b_lora(tr_config *c) {
    return lora(c, "Qwen/Qwen3-8B");
}

/* ---- Qwen3-30B-A3B ---- */

/* qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config: EP 16 and nothing else split; a short 100-step
 * run with GBS 1024, bf16 without fp32 gradient reduction, the precision-aware optimizer, the
 * flex dispatcher on HybridEP, and the router/rope/bias fusions. */
static tr_status q30b_pretrain(tr_config *c) {
    TR_TRY(tr_pretrain_common(c));
    TR_TRY(tr_recipe_hf_tokenizer(c, "Qwen/Qwen3-30B-A3B"));
    tr_recipe_seq_length(c, 4096);
    tr_model_config *m = &c->model;
    tr_recipe_layout(m, 1, 1, TR_NULL_INT, 1, 16, 1, false);
    m->moe_token_dispatcher_type = TR_DISPATCH_FLEX;
    m->moe_flex_dispatcher_backend = TR_FLEX_HYBRIDEP;
    m->bias_activation_fusion = true;
    m->apply_rope_fusion = true;
    m->moe_router_fusion = true;
    m->use_te_rng_tracker = true;
    c->rng.te_rng_tracker = true;
    c->train.train_iters = 100;
    c->train.global_batch_size = 1024;
    c->train.micro_batch_size = 1;
    c->scheduler.lr_warmup_iters = 40;
    c->scheduler.lr_decay_iters = 100;
    c->optimizer.use_precision_aware_optimizer = true;
    c->mixed_precision.grad_reduce_in_fp32 = 0;
    /* Megatron-Bridge asks for TP overlap and then disables it because TP is 1; Trestle writes
     * the value that takes effect. */
    c->comm_overlap.tp_comm_overlap = 0;
    c->checkpoint.save_interval = 50;
    return TR_OK;
}

/* SFT on 8 GPUs (EP 8), LoRA on 4 (EP 4), as the hardware names say. */
static tr_status q30b_sft(tr_config *c) {
    TR_TRY(sft(c, "Qwen/Qwen3-30B-A3B"));
    layout(c, 1, 1, 8);
    return TR_OK;
}
static tr_status q30b_lora(tr_config *c) {
    TR_TRY(lora(c, "Qwen/Qwen3-30B-A3B"));
    layout(c, 1, 1, 4);
    return TR_OK;
}

/* ---- Qwen3-235B-A22B: 94 layers + embedding + loss = 96 pipeline slots ---- */
static void big_moe_layout(tr_config *c, int64_t pp, int64_t ep) {
    layout(c, 4, pp, ep);
    c->model.account_for_embedding_in_pipeline_split = true;
    c->model.account_for_loss_in_pipeline_split = true;
    c->model.pipeline_dtype = TR_DTYPE_BF16;
}

/* 256 GPUs: TP 4, PP 8, EP 32. */
static tr_status q235b_pretrain(tr_config *c) {
    TR_TRY(tr_pretrain_common(c));
    TR_TRY(tr_recipe_hf_tokenizer(c, "Qwen/Qwen3-235B-A22B"));
    tr_recipe_seq_length(c, 4096);
    big_moe_layout(c, 8, 32);
    return TR_OK;
}
/* 64 GPUs: TP 4, PP 4, EP 16. */
static tr_status q235b_sft(tr_config *c) {
    TR_TRY(sft(c, "Qwen/Qwen3-235B-A22B"));
    big_moe_layout(c, 4, 16);
    return TR_OK;
}
/* 16 GPUs: TP 4, PP 4, EP 4. */
static tr_status q235b_lora(tr_config *c) {
    TR_TRY(lora(c, "Qwen/Qwen3-235B-A22B"));
    big_moe_layout(c, 4, 4);
    return TR_OK;
}

TR_DEFINE_RECIPE(qwen3_600m_pretrain, "qwen3_600m", q600m_pretrain)
TR_DEFINE_RECIPE(qwen3_600m_sft, "qwen3_600m", q600m_sft)
TR_DEFINE_RECIPE(qwen3_600m_lora, "qwen3_600m", q600m_lora)
TR_DEFINE_RECIPE(qwen3_8b_pretrain, "qwen3_8b", q8b_pretrain)
TR_DEFINE_RECIPE(qwen3_8b_sft, "qwen3_8b", q8b_sft)
TR_DEFINE_RECIPE(qwen3_8b_lora, "qwen3_8b", q8b_lora)
TR_DEFINE_RECIPE(qwen3_30b_a3b_pretrain, "qwen3_30b_a3b", q30b_pretrain)
TR_DEFINE_RECIPE(qwen3_30b_a3b_sft, "qwen3_30b_a3b", q30b_sft)
TR_DEFINE_RECIPE(qwen3_30b_a3b_lora, "qwen3_30b_a3b", q30b_lora)
TR_DEFINE_RECIPE(qwen3_235b_a22b_pretrain, "qwen3_235b_a22b", q235b_pretrain)
TR_DEFINE_RECIPE(qwen3_235b_a22b_sft, "qwen3_235b_a22b", q235b_sft)
TR_DEFINE_RECIPE(qwen3_235b_a22b_lora, "qwen3_235b_a22b", q235b_lora)
