/* MoE recipes outside the Qwen family: Mixtral (Trestle-only: Megatron-Bridge has no Mixtral
 * recipe), DeepSeek-V3 (reference §6.4h) and Kimi-K2 on the same architecture (config only until
 * the runtime has MoE layers). */
#include "recipes/common.h"

/* Mixtral layouts and batch follow NeMo's public Mixtral recipes: experts spread over EP 8, a
 * pipeline with one layer per virtual chunk, GBS 512 of MBS 1 (enough microbatches for the
 * interleaved schedule at any data-parallel size up to 128). */
static tr_status mixtral_pretrain(tr_config *c) {
    TR_TRY(tr_pretrain_common(c));
    tr_recipe_null_tokenizer(c, 32000);
    tr_recipe_seq_length(c, 4096);
    c->train.global_batch_size = 512;
    c->train.micro_batch_size = 1;
    return TR_OK;
}

/* 8x7B: TP 1, PP 4 x VPP 8 (32 layers), EP 8: 32 GPUs. */
static tr_status mixtral_8x7b(tr_config *c) {
    TR_TRY(mixtral_pretrain(c));
    tr_recipe_layout(&c->model, 1, 4, 8, 1, 8, 1, false);
    c->model.pipeline_dtype = TR_DTYPE_BF16;
    return TR_OK;
}

/* 8x22B: TP 2, PP 4 x VPP 14 (56 layers), EP 8, SP: 32 GPUs. */
static tr_status mixtral_8x22b(tr_config *c) {
    TR_TRY(mixtral_pretrain(c));
    tr_recipe_layout(&c->model, 2, 4, 14, 1, 8, 1, true);
    c->model.pipeline_dtype = TR_DTYPE_BF16;
    return TR_OK;
}

/* The 61 layers on 16 stages: embedding + 4 layers, 14 stages of 4, and 1 layer + MTP + loss. */
static const char deepseek_v3_layout[] = "Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|"
                                         "tttt|tttt|tttt|tttt|tttt|tmL";

/* Kimi-K2 has no MTP depth: the last stage holds one layer and the loss. */
static const char kimi_k2_layout[] = "Etttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|tttt|"
                                     "tttt|tttt|tttt|tttt|tttt|tL";

/* The DeepSeek-V3 architecture's pretraining at scale: TP 2, PP 16 (the layout), EP `ep`, ETP 1,
 * SP; 1M steps of GBS 4096 at 4096 tokens; bf16 with the precision-aware optimizer keeping bf16
 * moments. */
static tr_status deepseek_family(tr_config *c, int64_t ep, const char *layout) {
    TR_TRY(tr_pretrain_common(c));
    tr_recipe_null_tokenizer(c, 32000);
    tr_recipe_seq_length(c, 4096);
    tr_model_config *m = &c->model;
    tr_recipe_layout(m, 2, 16, TR_NULL_INT, 1, ep, 1, true);
    m->pipeline_dtype = TR_DTYPE_BF16;
    TR_TRY(tr_config_set_str(c, TR_FID_model_pipeline_model_parallel_layout, layout));
    m->init_method_std = 0.006;
    m->moe_token_dispatcher_type = TR_DISPATCH_FLEX;
    m->moe_flex_dispatcher_backend = TR_FLEX_HYBRIDEP;
    m->moe_permute_fusion = true;
    m->moe_grouped_gemm = true;
    m->moe_router_fusion = false;
    m->moe_shared_expert_overlap = true;
    m->cross_entropy_fusion_impl = TR_CEFUSE_TE;
    c->train.train_iters = 1000000;
    c->train.global_batch_size = 4096;
    c->train.micro_batch_size = 1;
    c->train.manual_gc_interval = 5;
    c->validation.eval_interval = 2000;
    c->scheduler.lr_warmup_iters = 2000;
    c->mixed_precision.preset = -1;
    c->mixed_precision.bf16 = true;
    c->mixed_precision.params_dtype = TR_DTYPE_BF16;
    c->mixed_precision.pipeline_dtype = TR_DTYPE_BF16;
    c->mixed_precision.autocast_enabled = false;
    c->mixed_precision.grad_reduce_in_fp32 = 0;
    tr_optimizer_config *o = &c->optimizer;
    o->use_precision_aware_optimizer = true;
    o->main_grads_dtype = TR_DTYPE_BF16;
    o->exp_avg_dtype = TR_DTYPE_BF16;
    o->exp_avg_sq_dtype = TR_DTYPE_BF16;
    o->main_params_dtype = TR_DTYPE_FP32;
    c->comm_overlap.tp_comm_overlap = 0;
    c->comm_overlap.delay_wgrad_compute = 0;
    c->comm_overlap.overlap_moe_expert_parallel_comm = 0;
    c->ddp.grad_reduce_in_fp32 = false;
    c->checkpoint.save_interval = 2000;
    c->checkpoint.async_save = false;
    return TR_OK;
}

/* deepseek_v3_pretrain_1024gpu_h100_bf16_config: EP 64, one MTP depth (weight 0.1), YaRN 40. */
static tr_status deepseek_v3(tr_config *c) {
    TR_TRY(deepseek_family(c, 64, deepseek_v3_layout));
    c->model.mtp_num_layers = 1;
    c->model.mtp_loss_scaling_factor = 0.1;
    c->model.rotary_scaling_factor = 40.0;
    return TR_OK;
}

/* Kimi-K2 (the project brief's shape: TP 2, PP 16, EP 32 on 512 GPUs), otherwise DeepSeek-V3's
 * recipe; its own YaRN factor 32 (the provider's) and no MTP. */
static tr_status kimi_k2(tr_config *c) {
    return deepseek_family(c, 32, kimi_k2_layout);
}

/* The 61 layers on 8 stages: embedding + 8 layers, 6 stages of 8, and 5 layers + MTP + loss. */
static const char deepseek_v3_32nodes_layout[] = "Etttttttt|tttttttt|tttttttt|tttttttt|tttttttt|"
                                                 "tttttttt|tttttttt|tttttmL";

/* deepseek_v3_pretrain_256gpu_h100_bf16_32nodes_config: the same run on 256 GPUs (TP 2, PP 8,
 * EP 32) with full recomputation of every layer. */
static tr_status deepseek_v3_32nodes(tr_config *c) {
    TR_TRY(deepseek_v3(c));
    tr_recipe_layout(&c->model, 2, 8, TR_NULL_INT, 1, 32, 1, true);
    TR_TRY(tr_config_set_str(c, TR_FID_model_pipeline_model_parallel_layout,
                             deepseek_v3_32nodes_layout));
    c->model.recompute_granularity = TR_RECG_FULL;
    c->model.recompute_method = TR_RECM_UNIFORM;
    c->model.recompute_num_layers = 1;
    return TR_OK;
}

TR_DEFINE_RECIPE(mixtral_8x7b_pretrain, "mixtral_8x7b", mixtral_8x7b)
TR_DEFINE_RECIPE(mixtral_8x22b_pretrain, "mixtral_8x22b", mixtral_8x22b)
TR_DEFINE_RECIPE(deepseek_v3_pretrain, "deepseek_v3", deepseek_v3)
TR_DEFINE_RECIPE(kimi_k2_pretrain, "kimi_k2", kimi_k2)
TR_DEFINE_RECIPE(deepseek_v3_pretrain_32nodes, "deepseek_v3", deepseek_v3_32nodes)
