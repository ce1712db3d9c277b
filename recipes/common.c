/* The Megatron-Bridge base templates (reference §6.3, src/megatron/bridge/recipes/common.py) as
 * C functions, and the plumbing every recipe shares. */
#include "recipes/common.h"

#include <stdlib.h>

#include "providers/provider.h"

/* distributed_fused_adam_with_cosine_annealing: Adam(W) with cosine decay and a constant weight
 * decay schedule of 0.033, as the templates configure it. */
static void adam_cosine(tr_config *c, int64_t warmup, double lr, double min_lr, double beta2) {
    tr_optimizer_config *o = &c->optimizer;
    o->optimizer = TR_OPTIM_ADAM;
    o->lr = lr;
    o->min_lr = min_lr;
    o->adam_beta1 = 0.9;
    o->adam_beta2 = beta2;
    o->adam_eps = 1e-8;
    o->weight_decay = 0.1;
    o->clip_grad = 1.0;
    o->use_distributed_optimizer = true;
    tr_scheduler_config *s = &c->scheduler;
    s->lr_decay_style = TR_SCHED_COSINE;
    s->lr_warmup_iters = warmup;
    s->lr_decay_iters = TR_NULL_INT;
    s->start_weight_decay = 0.033;
    s->end_weight_decay = 0.033;
    s->weight_decay_incr_style = TR_WDINC_CONSTANT;
}

tr_status tr_pretrain_common(tr_config *c) {
    tr_train_config *t = &c->train;
    t->train_iters = 300000;
    t->global_batch_size = 32;
    t->micro_batch_size = 2;
    t->manual_gc = true;
    t->manual_gc_interval = 100;
    t->manual_gc_eval = true;
    c->validation.eval_interval = 500;
    c->validation.eval_iters = 32;
    adam_cosine(c, 500, 3e-4, 3e-5, 0.95);

    tr_ddp_config *p = &c->ddp;
    p->check_for_nan_in_grad = true;
    p->grad_reduce_in_fp32 = true;
    p->overlap_grad_reduce = true;
    p->overlap_param_gather = true;
    p->average_in_collective = true;
    p->use_distributed_optimizer = true;
    c->optimizer.overlap_param_gather = true;

    /* Mock GPTDatasetConfig: no data_path means synthetic tokens. */
    tr_dataset_config *ds = &c->dataset;
    ds->type = TR_DS_GPT;
    ds->random_seed = 1234;
    ds->reset_attention_mask = 0;
    ds->reset_position_ids = 0;
    ds->eod_mask_loss = 0;
    ds->seq_length = 4096;
    ds->num_dataset_builder_threads = 1;
    TR_TRY(tr_config_set_str(c, TR_FID_dataset_split, "9999,8,2"));
    ds->data_sharding = true;
    ds->dataloader_type = TR_DL_SINGLE;
    ds->skip_getting_attention_mask_from_dataset = true;

    c->logger.log_interval = 10;
    /* The template names a Hugging Face tokenizer whose model the recipe must set; concrete
     * pretraining recipes switch to the NullTokenizer. */
    c->tokenizer.tokenizer_type = TR_TOKENIZER_HUGGINGFACE;
    c->tokenizer.use_tokenizer_vocab_size = true;
    /* Megatron-Bridge saves under <cwd>/nemo_experiments/default; Trestle writes checkpoints only
     * where checkpoint.save says, so a dry run or a first try never litters the disk. */
    c->checkpoint.save_interval = 500;
    c->checkpoint.ckpt_format = TR_CKPTFMT_TORCH_DIST;
    c->checkpoint.fully_parallel_save = true;
    c->rng.seed = 1234;
    c->mixed_precision.preset = TR_MPRESET_BF16_MIXED;
    return TR_OK;
}

/* default_squad_config's shape for local JSONL data (Trestle has no hub download: the data is
 * named by dataset.dataset_root at launch). Offline packing to the sequence length. */
static void squad_like_dataset(tr_config *c, int64_t seq) {
    tr_dataset_config *ds = &c->dataset;
    ds->type = TR_DS_SFT;
    ds->seq_length = seq;
    ds->enable_offline_packing = true;
    ds->packed_sequence_size = seq;
    ds->pad_seq_to_mult = 1;
    ds->pad_to_max_length = true;
    ds->do_validation = true;
    ds->do_test = false;
    ds->seed = 5678;
    ds->dataloader_type = TR_DL_BATCH;
    ds->num_workers = 1;
    ds->data_sharding = true;
    ds->pin_memory = true;
    ds->persistent_workers = false;
}

static tr_status finetune_common(tr_config *c, double lr) {
    tr_train_config *t = &c->train;
    t->train_iters = 1000;
    t->global_batch_size = 128;
    t->micro_batch_size = 1;
    c->validation.eval_interval = 100;
    c->validation.eval_iters = 32;
    adam_cosine(c, 50, lr, 0.0, 0.98);
    c->ddp.check_for_nan_in_grad = true;
    c->ddp.grad_reduce_in_fp32 = true;
    /* The template leaves ddp's flag off but the optimizer's on, and Megatron-Bridge's validate()
     * then turns both on; Trestle writes the value that takes effect. */
    c->ddp.use_distributed_optimizer = true;
    squad_like_dataset(c, 2048);
    c->logger.log_interval = 1;
    c->tokenizer.tokenizer_type = TR_TOKENIZER_HUGGINGFACE;
    c->tokenizer.use_tokenizer_vocab_size = false;
    c->checkpoint.save_interval = 100;
    c->rng.seed = 5678;
    c->mixed_precision.preset = TR_MPRESET_BF16_MIXED;
    c->peft.scheme = -1;
    return TR_OK;
}

tr_status tr_sft_common(tr_config *c) {
    return finetune_common(c, 5e-6);
}

/* LoRA with its defaults (targets linear_qkv, linear_proj, linear_fc1, linear_fc2; dim 32,
 * alpha 32, dropout 0 "pre", A xavier, B zero), which are the table defaults of peft.*. */
tr_status tr_peft_common(tr_config *c) {
    TR_TRY(finetune_common(c, 1e-4));
    c->peft.scheme = TR_PEFT_LORA;
    c->peft.dim = 32;
    c->peft.alpha = 32;
    c->peft.dropout = 0.0;
    c->peft.dropout_position = TR_LORADROP_PRE;
    c->peft.lora_A_init_method = TR_LORAINIT_XAVIER;
    c->peft.lora_B_init_method = TR_LORAINIT_ZERO;
    /* PEFT recipes turn the distributed optimizer off (the adapters are tiny). */
    c->optimizer.use_distributed_optimizer = false;
    c->ddp.use_distributed_optimizer = false;
    return TR_OK;
}

void tr_recipe_layout(tr_model_config *m, int64_t tp, int64_t pp, int64_t vpp, int64_t cp,
                      int64_t ep, int64_t etp, bool sp) {
    m->tensor_model_parallel_size = tp;
    m->pipeline_model_parallel_size = pp;
    m->virtual_pipeline_model_parallel_size = vpp;
    m->context_parallel_size = cp;
    m->expert_model_parallel_size = ep;
    m->expert_tensor_parallel_size = etp;
    m->sequence_parallel = sp;
}

void tr_recipe_seq_length(tr_config *c, int64_t seq) {
    c->model.seq_length = seq;
    c->dataset.seq_length = seq;
    if (c->dataset.packed_sequence_size != TR_NULL_INT) c->dataset.packed_sequence_size = seq;
}

void tr_recipe_null_tokenizer(tr_config *c, int64_t vocab) {
    c->tokenizer.tokenizer_type = TR_TOKENIZER_NULL;
    c->tokenizer.vocab_size = vocab;
    c->tokenizer.use_tokenizer_vocab_size = true;
}

tr_status tr_recipe_hf_tokenizer(tr_config *c, const char *hub_id) {
    c->tokenizer.tokenizer_type = TR_TOKENIZER_HUGGINGFACE;
    return tr_config_set_str(c, TR_FID_tokenizer_tokenizer_model, hub_id);
}

tr_status tr_recipe_build(tr_config *c, const char *recipe, const char *provider,
                          tr_recipe_body body) {
    TR_TRY(tr_provider_apply_named(c, provider));
    tr_config *before = malloc(sizeof *before);
    if (!before) return TR_ERR_NOMEM;
    tr_status s = tr_config_copy(before, c);
    if (s != TR_OK) {
        free(before);
        return s;
    }
    s = body(c);
    if (s == TR_OK) {
        tr_origin o = tr_origin_make(TR_ORIGIN_RECIPE, recipe);
        s = tr_config_mark_changes(c, before, &o);
    }
    tr_config_free(before);
    free(before);
    if (s == TR_OK) c->recipe_name = recipe;
    return s;
}
