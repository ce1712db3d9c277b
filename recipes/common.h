/* Building blocks shared by the recipe families: the Megatron-Bridge base templates
 * (_pretrain_common, _sft_common, _peft_common of reference §6.3) and the helper that runs a
 * provider and a recipe body with the right origins. Private to recipes/. */
#ifndef TR_RECIPES_COMMON_H
#define TR_RECIPES_COMMON_H

#include "core/config.h"
#include "core/diag.h"

/* The §6.3 templates. They write every section except the model's dimensions. */
tr_status tr_pretrain_common(tr_config *c);
tr_status tr_sft_common(tr_config *c);
tr_status tr_peft_common(tr_config *c);

typedef tr_status (*tr_recipe_body)(tr_config *c);

/* Run provider `provider` (changes recorded as "provider <name>"), then `body` (changes
 * recorded as "recipe <recipe>"), and remember the recipe's name in c->recipe_name. `recipe`
 * must be a static string. */
tr_status tr_recipe_build(tr_config *c, const char *recipe, const char *provider,
                          tr_recipe_body body);

/* Parallel layout in one call; vpp and etp take TR_NULL_INT for "none". */
void tr_recipe_layout(tr_model_config *m, int64_t tp, int64_t pp, int64_t vpp, int64_t cp,
                      int64_t ep, int64_t etp, bool sp);
/* Sequence length of the model and the dataset together (and the SFT packing length). */
void tr_recipe_seq_length(tr_config *c, int64_t seq);
/* The NullTokenizer with a fixed vocabulary that the model adopts (pretraining on mock data). */
void tr_recipe_null_tokenizer(tr_config *c, int64_t vocab);
/* apply_determinism_overrides (recipes/utils/determinism_utils.py): deterministic kernels, no
 * fused cross entropy, no TP communication overlap. */
void tr_recipe_deterministic(tr_config *c);
/* A Hugging Face tokenizer named by its hub id (a launch input: the files must exist then). */
tr_status tr_recipe_hf_tokenizer(tr_config *c, const char *hub_id);

/* Recipe entry points, one per registry row (recipes/<family>.c). */
#define TR_RECIPE_FN(name) tr_status tr_recipe_##name(tr_config *c, tr_diags *d)
/* Define entry point tr_recipe_<name>: provider, then body, with origins recorded. */
#define TR_DEFINE_RECIPE(name, provider, body)                                                     \
    TR_RECIPE_FN(name) {                                                                           \
        (void)d;                                                                                   \
        return tr_recipe_build(c, #name, provider, body);                                          \
    }

TR_RECIPE_FN(vanilla_gpt_pretrain);
TR_RECIPE_FN(gpt2_124m_pretrain);
TR_RECIPE_FN(gpt3_175b_pretrain);
TR_RECIPE_FN(llama2_7b_pretrain);
TR_RECIPE_FN(llama32_1b_pretrain);
TR_RECIPE_FN(llama32_1b_sft);
TR_RECIPE_FN(llama32_1b_lora);
TR_RECIPE_FN(llama32_3b_pretrain);
TR_RECIPE_FN(llama32_3b_sft);
TR_RECIPE_FN(llama32_3b_lora);
TR_RECIPE_FN(llama3_8b_pretrain);
TR_RECIPE_FN(llama3_8b_16k_pretrain);
TR_RECIPE_FN(llama3_8b_64k_pretrain);
TR_RECIPE_FN(llama3_8b_128k_pretrain);
TR_RECIPE_FN(llama3_8b_sft);
TR_RECIPE_FN(llama3_8b_lora);
TR_RECIPE_FN(llama3_70b_pretrain);
TR_RECIPE_FN(llama3_70b_16k_pretrain);
TR_RECIPE_FN(llama3_70b_64k_pretrain);
TR_RECIPE_FN(llama3_70b_pretrain_deterministic);
TR_RECIPE_FN(llama3_70b_sft);
TR_RECIPE_FN(llama3_70b_lora);
TR_RECIPE_FN(llama31_8b_pretrain);
TR_RECIPE_FN(llama31_8b_sft);
TR_RECIPE_FN(llama31_8b_lora);
TR_RECIPE_FN(llama31_70b_pretrain);
TR_RECIPE_FN(llama31_70b_sft);
TR_RECIPE_FN(llama31_70b_lora);
TR_RECIPE_FN(llama31_405b_pretrain);
TR_RECIPE_FN(llama31_405b_pretrain_deterministic);
TR_RECIPE_FN(llama31_405b_sft);
TR_RECIPE_FN(llama31_405b_lora);
TR_RECIPE_FN(qwen3_600m_pretrain);
TR_RECIPE_FN(qwen3_600m_sft);
TR_RECIPE_FN(qwen3_600m_lora);
TR_RECIPE_FN(qwen3_600m_sft_128k);
TR_RECIPE_FN(qwen3_8b_4gpu_pretrain);
TR_RECIPE_FN(qwen3_8b_sft_32k);
TR_RECIPE_FN(qwen3_8b_pretrain);
TR_RECIPE_FN(qwen3_8b_sft);
TR_RECIPE_FN(qwen3_8b_lora);
TR_RECIPE_FN(qwen3_30b_a3b_pretrain);
TR_RECIPE_FN(qwen3_30b_a3b_sft);
TR_RECIPE_FN(qwen3_30b_a3b_lora);
TR_RECIPE_FN(qwen3_30b_a3b_8gpu_pretrain);
TR_RECIPE_FN(qwen3_30b_a3b_8gpu_sft);
TR_RECIPE_FN(qwen3_235b_a22b_pretrain);
TR_RECIPE_FN(qwen3_235b_a22b_sft);
TR_RECIPE_FN(qwen3_235b_a22b_lora);
TR_RECIPE_FN(mixtral_8x7b_pretrain);
TR_RECIPE_FN(mixtral_8x22b_pretrain);
TR_RECIPE_FN(deepseek_v3_pretrain);
TR_RECIPE_FN(deepseek_v3_pretrain_32nodes);
TR_RECIPE_FN(kimi_k2_pretrain);
TR_RECIPE_FN(gpt_tiny_pretrain);
TR_RECIPE_FN(llama_tiny_pretrain);
TR_RECIPE_FN(llama_tiny_sft);
TR_RECIPE_FN(llama_tiny_lora);
TR_RECIPE_FN(moe_tiny_pretrain);
TR_RECIPE_FN(mixtral_tiny_pretrain);
TR_RECIPE_FN(qwen3_moe_tiny_pretrain);
TR_RECIPE_FN(deepseek_tiny_pretrain);

#endif
