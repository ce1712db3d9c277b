/* Tiny recipes: seconds-long CPU runs for tests and the README's first job. Mock data by default;
 * train on a text file with dataset.type=text dataset.data_path=<file> (byte-level tokens). */
#include "recipes/common.h"

static void tiny_common(tr_config *c) {
    c->tokenizer.tokenizer_type = TR_TOKENIZER_BYTE_LEVEL;
    c->tokenizer.use_tokenizer_vocab_size = true;
    tr_recipe_seq_length(c, 64);
    tr_recipe_layout(&c->model, 1, 1, TR_NULL_INT, 1, 1, TR_NULL_INT, false);
    c->mixed_precision.preset = TR_MPRESET_FP32;
    c->train.manual_gc = false;
    c->optimizer.use_distributed_optimizer = false;
    c->optimizer.overlap_param_gather = false;
    tr_ddp_config *p = &c->ddp;
    p->use_distributed_optimizer = false;
    p->overlap_grad_reduce = false;
    p->overlap_param_gather = false;
    p->average_in_collective = false;
    p->grad_reduce_in_fp32 = false;
    c->dataset.num_workers = 0;
    c->dataset.pin_memory = false;
    c->dataset.persistent_workers = false;
    c->checkpoint.save_interval = TR_NULL_INT;
    c->logger.log_interval = 10;
    c->optimizer.lr = 1e-3;
    c->optimizer.min_lr = 1e-4;
}

static tr_status tiny_pretrain(tr_config *c) {
    TR_TRY(tr_pretrain_common(c));
    tiny_common(c);
    c->train.train_iters = 200;
    c->train.global_batch_size = 8;
    c->train.micro_batch_size = 2;
    c->validation.eval_interval = 100;
    c->validation.eval_iters = 4;
    c->scheduler.lr_warmup_iters = 10;
    return TR_OK;
}

/* Fine-tuning: JSONL under dataset.dataset_root, packed into 64-token sequences (MBS 1). */
static void tiny_finetune(tr_config *c) {
    tiny_common(c);
    c->train.train_iters = 50;
    c->train.global_batch_size = 8;
    c->train.micro_batch_size = 1;
    c->validation.eval_interval = 25;
    c->validation.eval_iters = 2;
    c->scheduler.lr_warmup_iters = 5;
    c->optimizer.min_lr = 0.0;
}

static tr_status tiny_sft(tr_config *c) {
    TR_TRY(tr_sft_common(c));
    tiny_finetune(c);
    return TR_OK;
}

static tr_status tiny_lora(tr_config *c) {
    TR_TRY(tr_peft_common(c));
    tiny_finetune(c);
    c->peft.dim = 8;
    c->peft.alpha = 16;
    return TR_OK;
}

TR_DEFINE_RECIPE(gpt_tiny_pretrain, "gpt_tiny", tiny_pretrain)
TR_DEFINE_RECIPE(llama_tiny_pretrain, "llama_tiny", tiny_pretrain)
TR_DEFINE_RECIPE(llama_tiny_sft, "llama_tiny", tiny_sft)
TR_DEFINE_RECIPE(llama_tiny_lora, "llama_tiny", tiny_lora)
TR_DEFINE_RECIPE(moe_tiny_pretrain, "moe_tiny", tiny_pretrain)
TR_DEFINE_RECIPE(mixtral_tiny_pretrain, "mixtral_tiny", tiny_pretrain)
TR_DEFINE_RECIPE(qwen3_moe_tiny_pretrain, "qwen3_moe_tiny", tiny_pretrain)
TR_DEFINE_RECIPE(deepseek_tiny_pretrain, "deepseek_tiny", tiny_pretrain)
