/* What the family files of providers/ share: the Hugging Face dimensions as Megatron-Bridge maps
 * them, the fixed settings of Llama-style layers, Llama 3's rotary scaling and the HF vocabulary
 * padding rule. */
#ifndef TR_PROVIDERS_COMMON_H
#define TR_PROVIDERS_COMMON_H

#include "core/config.h"

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
/* GPT layers, GPTModelProvider's defaults (written out although they are the table's, so the
 * family stays right if a default changes): LayerNorm, GeLU, learned absolute positions, tied
 * embeddings, biases on every linear layer, the vocabulary padded to a multiple of 128. */
void tr_provider_gpt_layers(tr_model_config *m);
/* Llama 3.1/3.2 frequency scaling of the rotary embedding (HF rope_type "llama3"). */
void tr_provider_llama3_rope_scaling(tr_model_config *m, double factor);

/* Megatron-Bridge's make_vocab_size_divisible_by for a Hugging Face vocabulary: the largest
 * power of two up to 128 that divides it (32000 -> 128, 50257 -> 1). */
int64_t tr_vocab_pad_multiple(int64_t hf_vocab);

#endif
