/* Model providers: a function per architecture that fills the model section (and nothing else)
 * with the family's layer structure, its public dimensions and the Megatron defaults the family
 * relies on. Recipes start from a provider and then choose parallelism, batch and optimizer. */
#ifndef TR_PROVIDERS_PROVIDER_H
#define TR_PROVIDERS_PROVIDER_H

#include "core/config.h"

typedef struct tr_provider {
    const char *name;   /* "llama32_1b" */
    const char *source; /* where the dimensions come from (model card / HF config) */
    /* Write the model fields of c directly; the caller records the changes. */
    tr_status (*fill)(tr_config *c);
} tr_provider;

/* All providers, in catalog order. */
const tr_provider *tr_provider_list(int *n);
const tr_provider *tr_provider_find(const char *name);

/* Fill c's model section with p and record every changed field with origin "provider <name>",
 * so --explain tells provider values from recipe values. */
tr_status tr_provider_apply(tr_config *c, const tr_provider *p);
/* Same, by name; TR_ERR_NOTFOUND for an unknown provider (a programming error in a recipe). */
tr_status tr_provider_apply_named(tr_config *c, const char *name);

/* Family fill functions (providers/<family>.c). */
tr_status tr_provide_gpt(tr_config *c);
tr_status tr_provide_gpt2_124m(tr_config *c);
tr_status tr_provide_gpt3_175b(tr_config *c);

tr_status tr_provide_llama2_7b(tr_config *c);
tr_status tr_provide_llama2_13b(tr_config *c);
tr_status tr_provide_llama2_70b(tr_config *c);
tr_status tr_provide_llama3_8b(tr_config *c);
tr_status tr_provide_llama3_70b(tr_config *c);
tr_status tr_provide_llama31_8b(tr_config *c);
tr_status tr_provide_llama31_70b(tr_config *c);
tr_status tr_provide_llama31_405b(tr_config *c);
tr_status tr_provide_llama32_1b(tr_config *c);
tr_status tr_provide_llama32_3b(tr_config *c);

tr_status tr_provide_qwen3_600m(tr_config *c);
tr_status tr_provide_qwen3_8b(tr_config *c);
tr_status tr_provide_qwen3_30b_a3b(tr_config *c);
tr_status tr_provide_qwen3_235b_a22b(tr_config *c);

tr_status tr_provide_mixtral_8x7b(tr_config *c);
tr_status tr_provide_mixtral_8x22b(tr_config *c);

tr_status tr_provide_deepseek_v3(tr_config *c);

tr_status tr_provide_gpt_tiny(tr_config *c);
tr_status tr_provide_llama_tiny(tr_config *c);
tr_status tr_provide_moe_tiny(tr_config *c);

/* The dimensions a Hugging Face config.json gives, mapped as Megatron-Bridge maps them
 * (num_hidden_layers -> num_layers, intermediate_size -> ffn_hidden_size, num_key_value_heads ->
 * num_query_groups, head_dim -> kv_channels, max_position_embeddings -> seq_length, ...). */
typedef struct tr_hf_dims {
    int64_t layers, hidden, ffn, heads, kv_heads;
    int64_t head_dim; /* 0: hidden / heads, left for finalize() */
    int64_t vocab, max_positions;
    double rope_theta, norm_eps;
    bool tied;
    const char *hf_id;
} tr_hf_dims;

/* Write the dimensions, the HF vocabulary padding rule and the HF id. */
tr_status tr_provider_set_hf_dims(tr_config *c, const tr_hf_dims *x);
/* Llama-style decoder layers (the Megatron-Bridge Llama bridge's fixed settings): RMSNorm,
 * SwiGLU, rotary positions, no linear biases, no dropout, the fused kernels on, bf16 weights. */
void tr_provider_llama_layers(tr_model_config *m);
/* Llama 3.1/3.2 frequency scaling of the rotary embedding (HF rope_type "llama3"). */
void tr_provider_llama3_rope_scaling(tr_model_config *m, double factor);

/* Megatron-Bridge's make_vocab_size_divisible_by for a Hugging Face vocabulary: the largest
 * power of two up to 128 that divides it (32000 -> 128, 50257 -> 1). */
int64_t tr_vocab_pad_multiple(int64_t hf_vocab);

#endif
