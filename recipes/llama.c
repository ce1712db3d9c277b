/* Llama recipes. Values follow Megatron-Bridge's library recipes (reference §6.4 a-e); where the
 * reference gives only a hardware name (e.g. llama3_70b_sft_32gpu_h100_bf16_config), the layout
 * is Trestle's choice for that GPU count and says so. */
#include "recipes/common.h"

/* ---- pretraining (reference §6.4a, d, e) ---- */

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
    c->model.cross_entropy_fusion_impl = TR_CEFUSE_TE;
    return TR_OK;
}

/* Llama 3 70B / 3.1 70B on 32 GPUs: TP 4, PP 4 with 5 virtual stages (4 layers a chunk), CP 2,
 * sequence parallel, TP communication overlap with the h8192 userbuffers preset. */
static tr_status llama_70b_pretrain_values(tr_config *c) {
    TR_TRY(llama3_pretrain_values(c));
    tr_recipe_layout(&c->model, 4, 4, 5, 2, 1, TR_NULL_INT, true);
    c->model.pipeline_dtype = TR_DTYPE_BF16;
    c->comm_overlap.tp_comm_overlap = 1;
    return tr_config_set_str(c, TR_FID_comm_overlap_tp_comm_overlap_cfg,
                             "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192");
}

static tr_status llama32_pretrain(tr_config *c) {
    TR_TRY(llama3_pretrain_values(c));
    tr_recipe_layout(&c->model, 1, 1, TR_NULL_INT, 1, 1, TR_NULL_INT, false);
    return TR_OK;
}

/* Llama 3 8B: the same run with context parallelism 2 (min 2 GPUs). */
static tr_status llama_8b_pretrain(tr_config *c) {
    TR_TRY(llama3_pretrain_values(c));
    tr_recipe_layout(&c->model, 1, 1, TR_NULL_INT, 2, 1, TR_NULL_INT, false);
    return TR_OK;
}

/* Llama 3.1 405B on 256 GPUs (Trestle's layout; the reference names only the GPU count):
 * TP 8, PP 8 x VPP 8 with the embedding and the loss each counted as a layer, so the
 * 126 + 2 = 128 slots give 2 per chunk; CP 4. */
static tr_status llama_405b_pretrain(tr_config *c) {
    TR_TRY(llama3_pretrain_values(c));
    tr_recipe_layout(&c->model, 8, 8, 8, 4, 1, TR_NULL_INT, true);
    c->model.account_for_embedding_in_pipeline_split = true;
    c->model.account_for_loss_in_pipeline_split = true;
    c->model.pipeline_dtype = TR_DTYPE_BF16;
    c->comm_overlap.tp_comm_overlap = 1;
    return TR_OK;
}

/* Llama 2 7B on 2 GPUs (hardware name llama2_7b_pretrain_2gpu_h100_bf16_config): TP 2 at its
 * native 4096-token context. */
static tr_status llama2_7b_pretrain(tr_config *c) {
    TR_TRY(llama3_pretrain_values(c));
    tr_recipe_seq_length(c, 4096);
    tr_recipe_layout(&c->model, 2, 1, TR_NULL_INT, 1, 1, TR_NULL_INT, true);
    return TR_OK;
}

/* ---- fine-tuning (reference §6.4b, c) ---- */

/* Shared by the Llama SFT and LoRA recipes: packed 4096-token SQuAD-style data, GBS 8. */
static tr_status llama_finetune_values(tr_config *c, const char *hub_id) {
    TR_TRY(tr_recipe_hf_tokenizer(c, hub_id));
    tr_recipe_seq_length(c, 4096);
    c->train.global_batch_size = 8; /* offline packing on; 128 without */
    c->train.micro_batch_size = 1;
    c->train.manual_gc = true;
    c->train.manual_gc_interval = 100;
    c->train.manual_gc_eval = true;
    c->validation.eval_interval = 30;
    c->validation.eval_iters = 32;
    c->model.cross_entropy_fusion_impl = TR_CEFUSE_NATIVE;
    c->checkpoint.save_interval = 50;
    return TR_OK;
}

static tr_status llama_sft(tr_config *c, const char *hub_id) {
    TR_TRY(tr_sft_common(c));
    return llama_finetune_values(c, hub_id);
}

static tr_status llama_lora(tr_config *c, const char *hub_id) {
    TR_TRY(tr_peft_common(c));
    TR_TRY(llama_finetune_values(c, hub_id));
    c->model.cross_entropy_loss_fusion = false;
    return TR_OK;
}

static void layout(tr_config *c, int64_t tp, int64_t pp) {
    tr_recipe_layout(&c->model, tp, pp, TR_NULL_INT, 1, 1, TR_NULL_INT, tp > 1);
}

static tr_status llama32_1b_sft(tr_config *c) {
    return llama_sft(c, "meta-llama/Llama-3.2-1B");
}
static tr_status llama32_1b_lora(tr_config *c) {
    return llama_lora(c, "meta-llama/Llama-3.2-1B");
}
static tr_status llama32_3b_sft(tr_config *c) {
    return llama_sft(c, "meta-llama/Llama-3.2-3B");
}
static tr_status llama32_3b_lora(tr_config *c) {
    return llama_lora(c, "meta-llama/Llama-3.2-3B");
}

/* 8B: SFT on 2 GPUs (TP 2), LoRA on 1 (hardware names *_sft_2gpu_*, *_peft_1gpu_*). */
static tr_status llama3_8b_sft(tr_config *c) {
    TR_TRY(llama_sft(c, "meta-llama/Meta-Llama-3-8B"));
    layout(c, 2, 1);
    return TR_OK;
}
static tr_status llama3_8b_lora(tr_config *c) {
    return llama_lora(c, "meta-llama/Meta-Llama-3-8B");
}
static tr_status llama31_8b_sft(tr_config *c) {
    TR_TRY(llama_sft(c, "meta-llama/Llama-3.1-8B"));
    layout(c, 2, 1);
    return TR_OK;
}
static tr_status llama31_8b_lora(tr_config *c) {
    return llama_lora(c, "meta-llama/Llama-3.1-8B");
}

/* 70B: SFT on 32 GPUs (TP 8, PP 4), LoRA on 8 (TP 8). */
static tr_status llama3_70b_sft(tr_config *c) {
    TR_TRY(llama_sft(c, "meta-llama/Meta-Llama-3-70B"));
    layout(c, 8, 4);
    return TR_OK;
}
static tr_status llama3_70b_lora(tr_config *c) {
    TR_TRY(llama_lora(c, "meta-llama/Meta-Llama-3-70B"));
    layout(c, 8, 1);
    return TR_OK;
}
static tr_status llama31_70b_sft(tr_config *c) {
    TR_TRY(llama_sft(c, "meta-llama/Llama-3.1-70B"));
    layout(c, 8, 4);
    return TR_OK;
}
static tr_status llama31_70b_lora(tr_config *c) {
    TR_TRY(llama_lora(c, "meta-llama/Llama-3.1-70B"));
    layout(c, 8, 1);
    return TR_OK;
}

/* 405B: SFT on 128 GPUs (TP 8, PP 16), LoRA on 32 (TP 8, PP 4); embedding and loss count as
 * layers so 128 slots split evenly. */
static tr_status llama31_405b_ft_layout(tr_config *c, int64_t pp) {
    layout(c, 8, pp);
    c->model.account_for_embedding_in_pipeline_split = true;
    c->model.account_for_loss_in_pipeline_split = true;
    return TR_OK;
}
static tr_status llama31_405b_sft(tr_config *c) {
    TR_TRY(llama_sft(c, "meta-llama/Llama-3.1-405B"));
    return llama31_405b_ft_layout(c, 16);
}
static tr_status llama31_405b_lora(tr_config *c) {
    TR_TRY(llama_lora(c, "meta-llama/Llama-3.1-405B"));
    return llama31_405b_ft_layout(c, 4);
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
TR_DEFINE_RECIPE(llama3_8b_sft, "llama3_8b", llama3_8b_sft)
TR_DEFINE_RECIPE(llama3_8b_lora, "llama3_8b", llama3_8b_lora)
TR_DEFINE_RECIPE(llama3_70b_pretrain, "llama3_70b", llama_70b_pretrain_values)
TR_DEFINE_RECIPE(llama3_70b_sft, "llama3_70b", llama3_70b_sft)
TR_DEFINE_RECIPE(llama3_70b_lora, "llama3_70b", llama3_70b_lora)
TR_DEFINE_RECIPE(llama31_8b_pretrain, "llama31_8b", llama_8b_pretrain)
TR_DEFINE_RECIPE(llama31_8b_sft, "llama31_8b", llama31_8b_sft)
TR_DEFINE_RECIPE(llama31_8b_lora, "llama31_8b", llama31_8b_lora)
TR_DEFINE_RECIPE(llama31_70b_pretrain, "llama31_70b", llama_70b_pretrain_values)
TR_DEFINE_RECIPE(llama31_70b_sft, "llama31_70b", llama31_70b_sft)
TR_DEFINE_RECIPE(llama31_70b_lora, "llama31_70b", llama31_70b_lora)
TR_DEFINE_RECIPE(llama31_405b_pretrain, "llama31_405b", llama_405b_pretrain)
TR_DEFINE_RECIPE(llama31_405b_sft, "llama31_405b", llama31_405b_sft)
TR_DEFINE_RECIPE(llama31_405b_lora, "llama31_405b", llama31_405b_lora)
