/* GPT recipes: Megatron-Bridge's vanilla_gpt and gpt3_175b (reference §6.4 f, g) and a GPT-2
 * small recipe for benchmarks. */
#include "recipes/common.h"

/* "Mirrors Megatron-LM pretrain_gpt.py defaults": the template, mock data at 1024 tokens, the
 * NullTokenizer, and no communication overlap. The model sizes stay 0 and must be given as
 * overrides (model.num_layers=... model.hidden_size=... model.num_attention_heads=...). */
static tr_status vanilla_gpt(tr_config *c) {
    TR_TRY(tr_pretrain_common(c));
    tr_recipe_null_tokenizer(c, 32000);
    tr_recipe_seq_length(c, 1024);
    tr_recipe_layout(&c->model, 1, 1, TR_NULL_INT, 1, 1, TR_NULL_INT, false);
    c->ddp.overlap_grad_reduce = false;
    c->ddp.overlap_param_gather = false;
    c->optimizer.overlap_param_gather = false;
    c->ddp.average_in_collective = false;
    /* TrainingConfig's own defaults: this recipe does not use _pretrain_common's train section. */
    c->train.manual_gc = false;
    c->train.manual_gc_interval = 0;
    return TR_OK;
}

/* GPT-3 175B on 32 GPUs: TP 4, PP 8 x VPP 6 (2 layers a chunk), SP, TP overlap with the h12288
 * userbuffers preset and deferred embedding weight gradients. */
static tr_status gpt3_175b(tr_config *c) {
    TR_TRY(tr_pretrain_common(c));
    tr_recipe_null_tokenizer(c, 32000);
    tr_recipe_seq_length(c, 2048);
    tr_model_config *m = &c->model;
    tr_recipe_layout(m, 4, 8, 6, 1, 1, TR_NULL_INT, true);
    m->pipeline_dtype = TR_DTYPE_BF16;
    m->bias_activation_fusion = true;
    m->bias_dropout_fusion = true;
    m->cross_entropy_fusion_impl = TR_CEFUSE_NATIVE;
    c->train.train_iters = 1168251;
    c->train.global_batch_size = 2048;
    c->train.micro_batch_size = 2;
    c->validation.eval_interval = 2000;
    c->optimizer.lr = 0.9e-4;
    c->optimizer.min_lr = 0.9e-5;
    c->scheduler.lr_warmup_iters = 2000;
    c->dataset.num_workers = 8;
    c->mixed_precision.grad_reduce_in_fp32 = 0;
    c->checkpoint.save_interval = 2000;
    tr_comm_overlap_config *o = &c->comm_overlap;
    o->tp_comm_overlap = 1;
    o->defer_embedding_wgrad_compute = 1;
    o->wgrad_deferral_limit = 50;
    o->overlap_param_gather_with_optimizer_step = 0;
    return tr_config_set_str(c, TR_FID_comm_overlap_tp_comm_overlap_cfg,
                             "userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048");
}

/* GPT-2 small at the llm.c reference settings (Trestle addition for benchmarks): 0.5M-token
 * batches of 1024-token sequences, lr 6e-4 with 700 warmup steps, 19073 steps (10B tokens). */
static tr_status gpt2_124m(tr_config *c) {
    TR_TRY(tr_pretrain_common(c));
    tr_recipe_null_tokenizer(c, 50257);
    tr_recipe_seq_length(c, 1024);
    tr_recipe_layout(&c->model, 1, 1, TR_NULL_INT, 1, 1, TR_NULL_INT, false);
    c->train.train_iters = 19073;
    c->train.global_batch_size = 512;
    c->train.micro_batch_size = 16;
    c->validation.eval_interval = 250;
    c->validation.eval_iters = 20;
    c->optimizer.lr = 6e-4;
    c->optimizer.min_lr = 6e-5;
    c->scheduler.lr_warmup_iters = 700;
    return TR_OK;
}

TR_DEFINE_RECIPE(vanilla_gpt_pretrain, "gpt", vanilla_gpt)
TR_DEFINE_RECIPE(gpt3_175b_pretrain, "gpt3_175b", gpt3_175b)
TR_DEFINE_RECIPE(gpt2_124m_pretrain, "gpt2_124m", gpt2_124m)
