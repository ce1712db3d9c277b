/* Llama recipes: Megatron-Bridge's recipes/llama/h100/llama3.py and llama2.py, value for value
 * (recipes/megatron_bridge_values.md lists them with their source functions; a test holds the
 * resolved recipes to that table). Where Trestle differs on purpose the catalog line says so. */
#include "recipes/common.h"

/* ---- pretraining ---- */

/* Shared by every Llama 3.x pretraining recipe: the 8192-token mock-data run of §6.4a. */
static tr_status llama3_pretrain_values(tr_config *c) {
    TR_TRY(tr_pretrain_common(c));
    tr_recipe_null_tokenizer(c, 32000);
    tr_recipe_seq_length(c, 8192);
    c->train.train_iters = 1168251;
    c->train.global_batch_size = 512;
    c->train.micro_batch_size = 1;
    c->validation.eval_interval = 2000;
    c->validation.eval_iters = 32;
    c->scheduler.lr_warmup_iters = 2000;
    c->dataset.num_workers = 8;
    c->model.cross_entropy_loss_fusion = true;
    c->model.cross_entropy_fusion_impl = TR_CEFUSE_TE;
    return TR_OK;
}

/* A layout with its pipeline dtype: bf16 once the model is pipelined, as the recipes write it. */
static void pretrain_layout(tr_config *c, int64_t tp, int64_t pp, int64_t vpp, int64_t cp,
                            bool sp) {
    tr_recipe_layout(&c->model, tp, pp, vpp, cp, 1, TR_NULL_INT, sp);
    if (pp > 1) c->model.pipeline_dtype = TR_DTYPE_BF16;
}

/* TP communication overlap with a userbuffers preset (the comm_overlap section). */
static tr_status tp_overlap(tr_config *c, const char *preset) {
    c->comm_overlap.tp_comm_overlap = 1;
    if (!preset) return TR_OK;
    return tr_config_set_str(c, TR_FID_comm_overlap_tp_comm_overlap_cfg, preset);
}

static const char h8192[] = "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192";

static tr_status llama32_pretrain(tr_config *c) {
    TR_TRY(llama3_pretrain_values(c));
    pretrain_layout(c, 1, 1, TR_NULL_INT, 1, false);
    return TR_OK;
}

/* llama3_8b_pretrain_2gpu_h100_bf16_config (and llama31_8b's): context parallelism 2. */
static tr_status llama_8b_pretrain(tr_config *c) {
    TR_TRY(llama3_pretrain_values(c));
    pretrain_layout(c, 1, 1, TR_NULL_INT, 2, false);
    return TR_OK;
}

/* The long-context 8B runs: TP 4, PP 2, SP, and CP growing with the sequence. */
static tr_status llama3_8b_long(tr_config *c, int64_t seq, int64_t cp) {
    TR_TRY(llama3_pretrain_values(c));
    tr_recipe_seq_length(c, seq);
    pretrain_layout(c, 4, 2, TR_NULL_INT, cp, true);
    return TR_OK;
}
static tr_status llama3_8b_16k(tr_config *c) {
    return llama3_8b_long(c, 16384, 2);
}
static tr_status llama3_8b_64k(tr_config *c) {
    return llama3_8b_long(c, 65536, 4);
}
static tr_status llama3_8b_128k(tr_config *c) {
    return llama3_8b_long(c, 131072, 8);
}

/* llama3_70b_pretrain_32gpu_h100_bf16_config: TP 4, PP 4 x VPP 5, CP 2, SP, TP overlap. */
static tr_status llama3_70b_pretrain(tr_config *c) {
    TR_TRY(llama3_pretrain_values(c));
    pretrain_layout(c, 4, 4, 5, 2, true);
    return tp_overlap(c, h8192);
}
static tr_status llama3_70b_16k(tr_config *c) {
    TR_TRY(llama3_pretrain_values(c));
    tr_recipe_seq_length(c, 16384);
    pretrain_layout(c, 8, 2, TR_NULL_INT, 2, true);
    return tp_overlap(c, h8192);
}
static tr_status llama3_70b_64k(tr_config *c) {
    TR_TRY(llama3_pretrain_values(c));
    tr_recipe_seq_length(c, 65536);
    pretrain_layout(c, 8, 4, TR_NULL_INT, 8, true);
    return tp_overlap(c, h8192);
}
static tr_status llama3_70b_deterministic(tr_config *c) {
    TR_TRY(llama3_70b_pretrain(c));
    tr_recipe_deterministic(c);
    return TR_OK;
}

/* Llama 3.1 70B pretrains at its full 128k context with the 70B layout. */
static tr_status llama31_70b_pretrain(tr_config *c) {
    TR_TRY(llama3_70b_pretrain(c));
    tr_recipe_seq_length(c, 131072);
    return TR_OK;
}

/* llama31_405b_pretrain_256gpu_h100_bf16_config: 128k tokens on TP 8, PP 8 x VPP 2, CP 4, with
 * the embedding and the loss each counted as a layer (126 + 2 = 128 slots, 8 a chunk). */
static tr_status llama31_405b_pretrain(tr_config *c) {
    TR_TRY(llama3_pretrain_values(c));
    tr_recipe_seq_length(c, 131072);
    pretrain_layout(c, 8, 8, 2, 4, true);
    c->model.account_for_embedding_in_pipeline_split = true;
    c->model.account_for_loss_in_pipeline_split = true;
    return tp_overlap(c, "userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192");
}
static tr_status llama31_405b_deterministic(tr_config *c) {
    TR_TRY(llama31_405b_pretrain(c));
    tr_recipe_deterministic(c);
    return TR_OK;
}

/* llama2_7b_pretrain_2gpu_h100_bf16_config: TP 2 without sequence parallelism at the native
 * 4096-token context, native cross entropy, a comm_overlap section without TP overlap. */
static tr_status llama2_7b_pretrain(tr_config *c) {
    TR_TRY(llama3_pretrain_values(c));
    tr_recipe_seq_length(c, 4096);
    pretrain_layout(c, 2, 1, TR_NULL_INT, 1, false);
    c->model.cross_entropy_fusion_impl = TR_CEFUSE_NATIVE;
    c->checkpoint.save_interval = 2000;
    c->comm_overlap.tp_comm_overlap = 0;
    return TR_OK;
}

/* ---- fine-tuning ---- */

/* Shared by the Llama SFT and LoRA recipes: packed SQuAD-style data, GBS 8. */
static tr_status llama_finetune_values(tr_config *c, const char *hub_id, int64_t seq) {
    TR_TRY(tr_recipe_hf_tokenizer(c, hub_id));
    tr_recipe_seq_length(c, seq);
    c->train.global_batch_size = 8; /* offline packing on; 128 without */
    c->train.micro_batch_size = 1;
    c->train.manual_gc = true;
    c->train.manual_gc_interval = 100;
    c->train.manual_gc_eval = true;
    c->validation.eval_interval = 30;
    c->validation.eval_iters = 32;
    c->model.cross_entropy_fusion_impl = TR_CEFUSE_NATIVE;
    c->checkpoint.save_interval = 50;
    c->ddp.overlap_grad_reduce = false;
    c->ddp.overlap_param_gather = false;
    c->optimizer.overlap_param_gather = false;
    return TR_OK;
}

static tr_status llama_sft(tr_config *c, const char *hub_id, int64_t seq) {
    TR_TRY(tr_sft_common(c));
    return llama_finetune_values(c, hub_id, seq);
}

/* LoRA with the adapter size of the model (dim/alpha 32/32 for 1B and 3B, 8/16 for 8B, 16/32
 * for 70B and 405B). */
static tr_status llama_lora(tr_config *c, const char *hub_id, int64_t seq, int64_t dim,
                            int64_t alpha) {
    TR_TRY(tr_peft_common(c));
    TR_TRY(llama_finetune_values(c, hub_id, seq));
    c->peft.dim = dim;
    c->peft.alpha = alpha;
    c->model.cross_entropy_loss_fusion = false;
    return TR_OK;
}

static void ft_layout(tr_config *c, int64_t tp, int64_t pp, int64_t vpp, bool sp) {
    tr_recipe_layout(&c->model, tp, pp, vpp, 1, 1, TR_NULL_INT, sp);
}

static tr_status llama32_1b_sft(tr_config *c) {
    return llama_sft(c, "meta-llama/Llama-3.2-1B", 4096);
}
static tr_status llama32_1b_lora(tr_config *c) {
    return llama_lora(c, "meta-llama/Llama-3.2-1B", 4096, 32, 32);
}
static tr_status llama32_3b_sft(tr_config *c) {
    return llama_sft(c, "meta-llama/Llama-3.2-3B", 4096);
}
static tr_status llama32_3b_lora(tr_config *c) {
    return llama_lora(c, "meta-llama/Llama-3.2-3B", 4096, 32, 32);
}

/* 8B: SFT on 2 GPUs (TP 2 without SP), LoRA on 1. */
static tr_status llama3_8b_sft(tr_config *c) {
    TR_TRY(llama_sft(c, "meta-llama/Meta-Llama-3-8B", 4096));
    ft_layout(c, 2, 1, TR_NULL_INT, false);
    return TR_OK;
}
static tr_status llama3_8b_lora(tr_config *c) {
    return llama_lora(c, "meta-llama/Meta-Llama-3-8B", 4096, 8, 16);
}
static tr_status llama31_8b_sft(tr_config *c) {
    TR_TRY(llama_sft(c, "meta-llama/Meta-Llama-3.1-8B", 4096));
    ft_layout(c, 2, 1, TR_NULL_INT, false);
    return TR_OK;
}
static tr_status llama31_8b_lora(tr_config *c) {
    return llama_lora(c, "meta-llama/Meta-Llama-3.1-8B", 4096, 8, 16);
}

/* 70B: SFT on 32 GPUs (TP 8, PP 4, no SP), LoRA on 8 (TP 8, no SP). */
static tr_status llama3_70b_sft(tr_config *c) {
    TR_TRY(llama_sft(c, "meta-llama/Meta-Llama-3-70B", 4096));
    ft_layout(c, 8, 4, TR_NULL_INT, false);
    return TR_OK;
}
static tr_status llama3_70b_lora(tr_config *c) {
    TR_TRY(llama_lora(c, "meta-llama/Meta-Llama-3-70B", 4096, 16, 32));
    ft_layout(c, 8, 1, TR_NULL_INT, false);
    return TR_OK;
}
static tr_status llama31_70b_sft(tr_config *c) {
    TR_TRY(llama_sft(c, "meta-llama/Meta-Llama-3.1-70B", 4096));
    ft_layout(c, 8, 4, TR_NULL_INT, false);
    return TR_OK;
}
static tr_status llama31_70b_lora(tr_config *c) {
    TR_TRY(llama_lora(c, "meta-llama/Meta-Llama-3.1-70B", 4096, 16, 32));
    ft_layout(c, 8, 1, TR_NULL_INT, false);
    return TR_OK;
}

/* 405B at 2048 tokens, embedding and loss counted as layers; bf16 gradient reduction. SFT on
 * 128 GPUs (TP 8, PP 16, SP, TP overlap with deferred embedding gradients), LoRA on 32 (TP 4,
 * PP 8 x VPP 8, SP, adapters on linear_qkv only, GBS 32). */
static void llama31_405b_ft(tr_config *c, int64_t tp, int64_t pp, int64_t vpp) {
    ft_layout(c, tp, pp, vpp, true);
    c->model.account_for_embedding_in_pipeline_split = true;
    c->model.account_for_loss_in_pipeline_split = true;
    c->mixed_precision.grad_reduce_in_fp32 = 0;
}
static tr_status llama31_405b_sft(tr_config *c) {
    TR_TRY(llama_sft(c, "meta-llama/Meta-Llama-3.1-405B", 2048));
    llama31_405b_ft(c, 8, 16, TR_NULL_INT);
    c->train.global_batch_size = 16;
    /* The template leaves the ddp overlaps at MCore's defaults (off); the comm_overlap section
     * derives them from the data-parallel size. */
    tr_comm_overlap_config *o = &c->comm_overlap;
    o->tp_comm_overlap = 1;
    o->defer_embedding_wgrad_compute = 1;
    o->wgrad_deferral_limit = 22;
    return TR_OK;
}
static tr_status llama31_405b_lora(tr_config *c) {
    TR_TRY(llama_lora(c, "meta-llama/Meta-Llama-3.1-405B", 2048, 16, 32));
    llama31_405b_ft(c, 4, 8, 8);
    c->train.global_batch_size = 32;
    const char *targets[] = {"linear_qkv"};
    TR_TRY(tr_config_set_strlist(c, TR_FID_peft_target_modules, targets, 1));
    c->comm_overlap.tp_comm_overlap = 0;
    return TR_OK;
}

/* ---- entry points ---- */
TR_DEFINE_RECIPE(llama2_7b_pretrain, "llama2_7b", llama2_7b_pretrain)
TR_DEFINE_RECIPE(llama32_1b_pretrain, "llama32_1b", llama32_pretrain)
TR_DEFINE_RECIPE(llama32_1b_sft, "llama32_1b", llama32_1b_sft)
TR_DEFINE_RECIPE(llama32_1b_lora, "llama32_1b", llama32_1b_lora)
TR_DEFINE_RECIPE(llama32_3b_pretrain, "llama32_3b", llama32_pretrain)
TR_DEFINE_RECIPE(llama32_3b_sft, "llama32_3b", llama32_3b_sft)
TR_DEFINE_RECIPE(llama32_3b_lora, "llama32_3b", llama32_3b_lora)
TR_DEFINE_RECIPE(llama3_8b_pretrain, "llama3_8b", llama_8b_pretrain)
TR_DEFINE_RECIPE(llama3_8b_16k_pretrain, "llama3_8b", llama3_8b_16k)
TR_DEFINE_RECIPE(llama3_8b_64k_pretrain, "llama3_8b", llama3_8b_64k)
TR_DEFINE_RECIPE(llama3_8b_128k_pretrain, "llama3_8b", llama3_8b_128k)
TR_DEFINE_RECIPE(llama3_8b_sft, "llama3_8b", llama3_8b_sft)
TR_DEFINE_RECIPE(llama3_8b_lora, "llama3_8b", llama3_8b_lora)
TR_DEFINE_RECIPE(llama3_70b_pretrain, "llama3_70b", llama3_70b_pretrain)
TR_DEFINE_RECIPE(llama3_70b_16k_pretrain, "llama3_70b", llama3_70b_16k)
TR_DEFINE_RECIPE(llama3_70b_64k_pretrain, "llama3_70b", llama3_70b_64k)
TR_DEFINE_RECIPE(llama3_70b_pretrain_deterministic, "llama3_70b", llama3_70b_deterministic)
TR_DEFINE_RECIPE(llama3_70b_sft, "llama3_70b", llama3_70b_sft)
TR_DEFINE_RECIPE(llama3_70b_lora, "llama3_70b", llama3_70b_lora)
TR_DEFINE_RECIPE(llama31_8b_pretrain, "llama31_8b", llama_8b_pretrain)
TR_DEFINE_RECIPE(llama31_8b_sft, "llama31_8b", llama31_8b_sft)
TR_DEFINE_RECIPE(llama31_8b_lora, "llama31_8b", llama31_8b_lora)
TR_DEFINE_RECIPE(llama31_70b_pretrain, "llama31_70b", llama31_70b_pretrain)
TR_DEFINE_RECIPE(llama31_70b_sft, "llama31_70b", llama31_70b_sft)
TR_DEFINE_RECIPE(llama31_70b_lora, "llama31_70b", llama31_70b_lora)
TR_DEFINE_RECIPE(llama31_405b_pretrain, "llama31_405b", llama31_405b_pretrain)
TR_DEFINE_RECIPE(llama31_405b_pretrain_deterministic, "llama31_405b", llama31_405b_deterministic)
TR_DEFINE_RECIPE(llama31_405b_sft, "llama31_405b", llama31_405b_sft)
TR_DEFINE_RECIPE(llama31_405b_lora, "llama31_405b", llama31_405b_lora)
