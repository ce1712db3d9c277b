/* Qwen3 recipes: Megatron-Bridge's recipes/qwen/h100/qwen3.py and qwen3_moe.py, taken from the
 * functions its short names alias (recipes/megatron_bridge_values.md names each one; a test
 * holds the resolved recipes to that table). */
#include "recipes/common.h"

/* The short Qwen3 fine-tuning schedule of the larger models: 100 steps of GBS 32, 10 warmup
 * steps decaying over 100, beta2 0.95, the distributed optimizer, fp32 gradient reduction.
 * The 8B and 30B-A3B recipes also seed their data with 1234. */
static void short_finetune(tr_config *c, double lr) {
    c->train.train_iters = 100;
    c->train.global_batch_size = 32;
    c->train.micro_batch_size = 1;
    c->optimizer.lr = lr;
    c->optimizer.min_lr = 0.0;
    c->optimizer.adam_beta2 = 0.95;
    c->scheduler.lr_warmup_iters = 10;
    c->scheduler.lr_decay_iters = 100;
    c->optimizer.use_distributed_optimizer = true;
    c->ddp.use_distributed_optimizer = true;
    c->ddp.grad_reduce_in_fp32 = true;
    c->mixed_precision.grad_reduce_in_fp32 = 1;
}

/* The dense recipes' fine-tuning values (qwen3.py): GBS 8 at 2048 tokens, evaluation every 30
 * steps, no manual GC, native cross entropy. */
static tr_status dense_finetune(tr_config *c, const char *hub_id) {
    TR_TRY(tr_recipe_hf_tokenizer(c, hub_id));
    tr_recipe_seq_length(c, 2048);
    c->train.global_batch_size = 8;
    c->validation.eval_interval = 30;
    c->train.manual_gc = false;
    c->train.manual_gc_interval = 0;
    c->model.cross_entropy_loss_fusion = true;
    c->model.cross_entropy_fusion_impl = TR_CEFUSE_NATIVE;
    c->checkpoint.save_interval = 50;
    /* The recipes turn ddp's flag off and leave the optimizer's on; Megatron-Bridge's validate()
     * then runs both distributed, so Trestle writes the value that takes effect. */
    c->optimizer.use_distributed_optimizer = true;
    c->ddp.use_distributed_optimizer = true;
    return TR_OK;
}

static tr_status dense_sft(tr_config *c, const char *hub_id) {
    TR_TRY(tr_sft_common(c));
    return dense_finetune(c, hub_id);
}

static tr_status dense_lora(tr_config *c, const char *hub_id) {
    TR_TRY(tr_peft_common(c));
    return dense_finetune(c, hub_id);
}

/* Adapters on the attention projections only, dim 8 alpha 16 (the larger Qwen3 LoRA recipes). */
static tr_status small_adapters(tr_config *c) {
    c->peft.dim = 8;
    c->peft.alpha = 16;
    const char *targets[] = {"linear_qkv", "linear_proj"};
    return tr_config_set_strlist(c, TR_FID_peft_target_modules, targets, 2);
}

static tr_status dense_pretrain(tr_config *c, const char *hub_id) {
    TR_TRY(tr_pretrain_common(c));
    TR_TRY(tr_recipe_hf_tokenizer(c, hub_id));
    tr_recipe_seq_length(c, 4096);
    tr_recipe_layout(&c->model, 1, 1, TR_NULL_INT, 1, 1, TR_NULL_INT, false);
    c->dataset.num_workers = 8;
    c->model.init_method_std = 0.02;
    c->model.cross_entropy_loss_fusion = true;
    c->model.cross_entropy_fusion_impl = TR_CEFUSE_TE;
    return TR_OK;
}

/* ---- Qwen3-0.6B: one GPU for everything ---- */
static tr_status q600m_pretrain(tr_config *c) {
    return dense_pretrain(c, "Qwen/Qwen3-0.6B");
}
static tr_status q600m_sft(tr_config *c) {
    return dense_sft(c, "Qwen/Qwen3-0.6B");
}
static tr_status q600m_lora(tr_config *c) {
    return dense_lora(c, "Qwen/Qwen3-0.6B");
}

/* Megatron-Bridge's long-context SFT recipes: context parallelism with the a2a exchange, the
 * loss normalized per token, no fused cross entropy, no averaging inside the collective. */
static tr_status long_context_sft(tr_config *c, int64_t seq, int64_t cp) {
    c->model.context_parallel_size = cp;
    const char *a2a[] = {"a2a"};
    TR_TRY(tr_config_set_strlist(c, TR_FID_model_cp_comm_type, a2a, 1));
    tr_recipe_seq_length(c, seq);
    c->model.cross_entropy_loss_fusion = false;
    c->model.calculate_per_token_loss = true;
    c->ddp.average_in_collective = false;
    return TR_OK;
}

/* qwen3_600m_sft_8gpu_h100_bf16_128k_config: 128k tokens over CP 8, GBS 2, a flat lr of 1e-6
 * after 10 warmup steps from 1e-11, no distributed optimizer. */
static tr_status q600m_sft_128k(tr_config *c) {
    TR_TRY(q600m_sft(c));
    TR_TRY(long_context_sft(c, 131072, 8));
    c->dataset.pad_seq_to_mult = 16;
    c->train.global_batch_size = 2;
    c->optimizer.lr = 1e-6;
    c->optimizer.min_lr = 1e-6;
    c->optimizer.use_distributed_optimizer = false;
    c->ddp.use_distributed_optimizer = false;
    c->scheduler.lr_warmup_iters = 10;
    c->scheduler.lr_warmup_init = 1e-11;
    return TR_OK;
}

/* ---- Qwen3-8B ---- */

/* qwen3_8b_pretrain_16gpu_h100_bf16_config: nothing split, a 100-step run of GBS 1024, bf16
 * gradient reduction and the precision-aware optimizer (fp32 states). */
static tr_status q8b_pretrain(tr_config *c) {
    TR_TRY(dense_pretrain(c, "Qwen/Qwen3-8B"));
    c->train.train_iters = 100;
    c->train.global_batch_size = 1024;
    c->train.micro_batch_size = 1;
    c->scheduler.lr_warmup_iters = 40;
    c->scheduler.lr_decay_iters = 100;
    c->mixed_precision.grad_reduce_in_fp32 = 0;
    c->ddp.grad_reduce_in_fp32 = false;
    c->optimizer.use_precision_aware_optimizer = true;
    c->checkpoint.save_interval = 50;
    return TR_OK;
}
/* qwen3_8b_sft_4gpu_h100_bf16_config: TP 4 without SP on the short schedule. */
static tr_status q8b_sft(tr_config *c) {
    TR_TRY(dense_sft(c, "Qwen/Qwen3-8B"));
    tr_recipe_layout(&c->model, 4, 1, TR_NULL_INT, 1, 1, TR_NULL_INT, false);
    short_finetune(c, 5e-6);
    c->dataset.seed = 1234;
    c->checkpoint.save_interval = 100;
    return TR_OK;
}
/* qwen3_8b_sft_8gpu_h100_bf16_32k_config: the TP 4 run at 32k tokens over CP 2 with SP, GBS 8. */
static tr_status q8b_sft_32k(tr_config *c) {
    TR_TRY(q8b_sft(c));
    TR_TRY(long_context_sft(c, 32768, 2));
    c->model.sequence_parallel = true;
    c->dataset.pad_seq_to_mult = 8;
    c->train.global_batch_size = 8;
    return TR_OK;
}
/* qwen3_8b_pretrain_4gpu_h100_bf16_config: the pretraining template on TP 4 without SP. */
static tr_status q8b_4gpu_pretrain(tr_config *c) {
    TR_TRY(dense_pretrain(c, "Qwen/Qwen3-8B"));
    tr_recipe_layout(&c->model, 4, 1, TR_NULL_INT, 1, 1, TR_NULL_INT, false);
    return TR_OK;
}
/* qwen3_8b_peft_1gpu_h100_bf16_config: attention adapters, packed examples padded to 4. */
static tr_status q8b_lora(tr_config *c) {
    TR_TRY(dense_lora(c, "Qwen/Qwen3-8B"));
    TR_TRY(small_adapters(c));
    short_finetune(c, 1e-4);
    c->dataset.seed = 1234;
    c->dataset.pad_seq_to_mult = 4;
    c->checkpoint.save_interval = 100;
    return TR_OK;
}

/* ---- Qwen3 MoE (qwen3_moe.py) ---- */

/* The MoE fine-tuning values: evaluation every 50 steps over 10, log every 10 steps, TE cross
 * entropy, grouped GEMM and permute fusion, the data-parallel overlaps on. */
static tr_status moe_finetune(tr_config *c, const char *hub_id) {
    TR_TRY(tr_recipe_hf_tokenizer(c, hub_id));
    tr_recipe_seq_length(c, 2048);
    short_finetune(c, c->optimizer.lr);
    c->validation.eval_interval = 50;
    c->validation.eval_iters = 10;
    c->train.manual_gc = true;
    c->train.manual_gc_interval = 100;
    c->train.manual_gc_eval = true;
    c->logger.log_interval = 10;
    tr_model_config *m = &c->model;
    m->moe_router_fusion = false;
    m->moe_permute_fusion = true;
    m->moe_grouped_gemm = true;
    m->moe_shared_expert_overlap = false;
    m->cross_entropy_loss_fusion = true;
    m->cross_entropy_fusion_impl = TR_CEFUSE_TE;
    c->checkpoint.save_interval = 100;
    c->ddp.overlap_grad_reduce = true;
    c->ddp.overlap_param_gather = true;
    c->optimizer.overlap_param_gather = true;
    c->ddp.average_in_collective = true;
    return TR_OK;
}

/* EP on its own TP of 1, with the flex dispatcher on DeepEP (what apply_flex_dispatcher_backend
 * picks on an H100). */
static void moe_layout(tr_config *c, int64_t tp, int64_t pp, int64_t cp, int64_t ep, bool sp) {
    tr_recipe_layout(&c->model, tp, pp, TR_NULL_INT, cp, ep, 1, sp);
    c->model.moe_token_dispatcher_type = TR_DISPATCH_FLEX;
    c->model.moe_flex_dispatcher_backend = TR_FLEX_DEEPEP;
}

static void count_embedding_and_loss(tr_config *c) {
    c->model.account_for_embedding_in_pipeline_split = true;
    c->model.account_for_loss_in_pipeline_split = true;
}

/* qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config: EP 16 and nothing else split; a short 100-step
 * run with GBS 1024, bf16 without fp32 gradient reduction, the precision-aware optimizer, the
 * flex dispatcher on HybridEP, and the router/rope/bias fusions. */
static tr_status q30b_pretrain(tr_config *c) {
    TR_TRY(tr_pretrain_common(c));
    TR_TRY(tr_recipe_hf_tokenizer(c, "Qwen/Qwen3-30B-A3B"));
    tr_recipe_seq_length(c, 4096);
    tr_model_config *m = &c->model;
    tr_recipe_layout(m, 1, 1, TR_NULL_INT, 1, 16, 1, false);
    c->dataset.num_workers = 8;
    m->init_method_std = 0.02;
    m->moe_token_dispatcher_type = TR_DISPATCH_FLEX;
    m->moe_flex_dispatcher_backend = TR_FLEX_HYBRIDEP;
    m->moe_permute_fusion = true;
    m->moe_grouped_gemm = true;
    m->moe_shared_expert_overlap = false;
    m->cross_entropy_loss_fusion = true;
    m->cross_entropy_fusion_impl = TR_CEFUSE_TE;
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
    c->ddp.grad_reduce_in_fp32 = false;
    /* Megatron-Bridge asks for TP overlap and then disables it because TP is 1; Trestle writes
     * the value that takes effect. */
    c->comm_overlap.tp_comm_overlap = 0;
    c->checkpoint.save_interval = 50;
    return TR_OK;
}

/* qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config: the pretraining template on TP 4, PP 2, EP 4 with
 * SP and full recomputation of every layer. */
static tr_status q30b_8gpu_pretrain(tr_config *c) {
    TR_TRY(tr_pretrain_common(c));
    TR_TRY(tr_recipe_hf_tokenizer(c, "Qwen/Qwen3-30B-A3B"));
    tr_recipe_seq_length(c, 4096);
    moe_layout(c, 4, 2, 1, 4, true);
    tr_model_config *m = &c->model;
    m->pipeline_dtype = TR_DTYPE_BF16;
    m->init_method_std = 0.02;
    m->moe_router_fusion = false;
    m->moe_permute_fusion = true;
    m->moe_grouped_gemm = true;
    m->moe_shared_expert_overlap = false;
    m->cross_entropy_loss_fusion = true;
    m->cross_entropy_fusion_impl = TR_CEFUSE_TE;
    m->recompute_granularity = TR_RECG_FULL;
    m->recompute_method = TR_RECM_UNIFORM;
    m->recompute_num_layers = 1;
    c->dataset.num_workers = 8;
    return TR_OK;
}
/* qwen3_30b_a3b_sft_8gpu_h100_bf16_config: TP 4, PP 2, EP 4 with SP, packed to a multiple of 4. */
static tr_status q30b_8gpu_sft(tr_config *c) {
    TR_TRY(tr_sft_common(c));
    c->optimizer.lr = 5e-6;
    TR_TRY(moe_finetune(c, "Qwen/Qwen3-30B-A3B"));
    moe_layout(c, 4, 2, 1, 4, true);
    c->dataset.seed = 1234;
    c->dataset.pad_seq_to_mult = 4;
    return TR_OK;
}

/* qwen3_30b_a3b_sft_16gpu_h100_bf16_config: EP 16 alone, the all-to-all dispatcher, the bias,
 * rope and router fusions, no comm_overlap section. */
static tr_status q30b_sft(tr_config *c) {
    TR_TRY(tr_sft_common(c));
    c->optimizer.lr = 5e-6;
    TR_TRY(moe_finetune(c, "Qwen/Qwen3-30B-A3B"));
    tr_recipe_layout(&c->model, 1, 1, TR_NULL_INT, 1, 16, 1, false);
    tr_model_config *m = &c->model;
    m->moe_token_dispatcher_type = TR_DISPATCH_ALLTOALL;
    m->bias_activation_fusion = true;
    m->apply_rope_fusion = true;
    m->moe_router_fusion = true;
    c->dataset.seed = 1234;
    return TR_OK;
}
/* qwen3_30b_a3b_peft_4gpu_h100_bf16_config: TP 4 with SP and EP 4, attention adapters. */
static tr_status q30b_lora(tr_config *c) {
    TR_TRY(tr_peft_common(c));
    TR_TRY(moe_finetune(c, "Qwen/Qwen3-30B-A3B"));
    moe_layout(c, 4, 1, 1, 4, true);
    TR_TRY(small_adapters(c));
    c->dataset.seed = 1234;
    c->dataset.pad_seq_to_mult = 4;
    return TR_OK;
}

/* qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config: TP 4, PP 16, CP 2, EP 8, SP; 94 layers +
 * embedding + loss = 96 pipeline slots. */
static tr_status q235b_pretrain(tr_config *c) {
    TR_TRY(tr_pretrain_common(c));
    TR_TRY(tr_recipe_hf_tokenizer(c, "Qwen/Qwen3-235B-A22B"));
    tr_recipe_seq_length(c, 4096);
    moe_layout(c, 4, 16, 2, 8, true);
    count_embedding_and_loss(c);
    tr_model_config *m = &c->model;
    m->pipeline_dtype = TR_DTYPE_BF16;
    m->init_method_std = 0.02;
    m->moe_router_fusion = false;
    m->moe_permute_fusion = true;
    m->moe_grouped_gemm = true;
    m->moe_shared_expert_overlap = false;
    m->cross_entropy_loss_fusion = true;
    m->cross_entropy_fusion_impl = TR_CEFUSE_TE;
    c->dataset.num_workers = 8;
    c->train.micro_batch_size = 1;
    return TR_OK;
}
/* qwen3_235b_a22b_sft_64gpu_h100_bf16_config: TP 4, PP 16, EP 4, SP. */
static tr_status q235b_sft(tr_config *c) {
    TR_TRY(tr_sft_common(c));
    TR_TRY(moe_finetune(c, "Qwen/Qwen3-235B-A22B"));
    moe_layout(c, 4, 16, 1, 4, true);
    count_embedding_and_loss(c);
    return TR_OK;
}
/* qwen3_235b_a22b_peft_16gpu_h100_bf16_config: TP 4, PP 4, EP 4, SP, attention adapters. */
static tr_status q235b_lora(tr_config *c) {
    TR_TRY(tr_peft_common(c));
    TR_TRY(moe_finetune(c, "Qwen/Qwen3-235B-A22B"));
    moe_layout(c, 4, 4, 1, 4, true);
    count_embedding_and_loss(c);
    return small_adapters(c);
}

TR_DEFINE_RECIPE(qwen3_600m_pretrain, "qwen3_600m", q600m_pretrain)
TR_DEFINE_RECIPE(qwen3_600m_sft, "qwen3_600m", q600m_sft)
TR_DEFINE_RECIPE(qwen3_600m_lora, "qwen3_600m", q600m_lora)
TR_DEFINE_RECIPE(qwen3_600m_sft_128k, "qwen3_600m", q600m_sft_128k)
TR_DEFINE_RECIPE(qwen3_8b_4gpu_pretrain, "qwen3_8b", q8b_4gpu_pretrain)
TR_DEFINE_RECIPE(qwen3_8b_sft_32k, "qwen3_8b", q8b_sft_32k)
TR_DEFINE_RECIPE(qwen3_8b_pretrain, "qwen3_8b", q8b_pretrain)
TR_DEFINE_RECIPE(qwen3_8b_sft, "qwen3_8b", q8b_sft)
TR_DEFINE_RECIPE(qwen3_8b_lora, "qwen3_8b", q8b_lora)
TR_DEFINE_RECIPE(qwen3_30b_a3b_pretrain, "qwen3_30b_a3b", q30b_pretrain)
TR_DEFINE_RECIPE(qwen3_30b_a3b_sft, "qwen3_30b_a3b", q30b_sft)
TR_DEFINE_RECIPE(qwen3_30b_a3b_lora, "qwen3_30b_a3b", q30b_lora)
TR_DEFINE_RECIPE(qwen3_30b_a3b_8gpu_pretrain, "qwen3_30b_a3b", q30b_8gpu_pretrain)
TR_DEFINE_RECIPE(qwen3_30b_a3b_8gpu_sft, "qwen3_30b_a3b", q30b_8gpu_sft)
TR_DEFINE_RECIPE(qwen3_235b_a22b_pretrain, "qwen3_235b_a22b", q235b_pretrain)
TR_DEFINE_RECIPE(qwen3_235b_a22b_sft, "qwen3_235b_a22b", q235b_sft)
TR_DEFINE_RECIPE(qwen3_235b_a22b_lora, "qwen3_235b_a22b", q235b_lora)
