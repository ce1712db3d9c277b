/* The provider table and the wrapper that records provider changes with their origin. */
#include "providers/provider.h"

#include <stdlib.h>
#include <string.h>

static const tr_provider providers[] = {
    {"gpt", "Megatron GPTModelProvider defaults (sizes left to the user)", tr_provide_gpt},
    {"gpt2_124m", "GPT-2 small (OpenAI, 2019): 12 x 768, 12 heads, vocab 50257",
     tr_provide_gpt2_124m},
    {"gpt3_175b", "GPT-3 paper (Brown et al., 2020) / Megatron-Bridge gpt3_175b recipe",
     tr_provide_gpt3_175b},
    {"llama2_7b", "HF meta-llama/Llama-2-7b-hf config.json", tr_provide_llama2_7b},
    {"llama2_13b", "HF meta-llama/Llama-2-13b-hf config.json", tr_provide_llama2_13b},
    {"llama2_70b", "HF meta-llama/Llama-2-70b-hf config.json", tr_provide_llama2_70b},
    {"llama3_8b", "HF meta-llama/Meta-Llama-3-8B config.json", tr_provide_llama3_8b},
    {"llama3_70b", "HF meta-llama/Meta-Llama-3-70B config.json", tr_provide_llama3_70b},
    {"llama31_8b", "HF meta-llama/Llama-3.1-8B config.json", tr_provide_llama31_8b},
    {"llama31_70b", "HF meta-llama/Llama-3.1-70B config.json", tr_provide_llama31_70b},
    {"llama31_405b", "HF meta-llama/Llama-3.1-405B config.json", tr_provide_llama31_405b},
    {"llama32_1b", "HF meta-llama/Llama-3.2-1B config.json", tr_provide_llama32_1b},
    {"llama32_3b", "HF meta-llama/Llama-3.2-3B config.json", tr_provide_llama32_3b},
    {"qwen3_600m", "HF Qwen/Qwen3-0.6B config.json", tr_provide_qwen3_600m},
    {"qwen3_8b", "HF Qwen/Qwen3-8B config.json", tr_provide_qwen3_8b},
    {"qwen3_30b_a3b", "HF Qwen/Qwen3-30B-A3B config.json", tr_provide_qwen3_30b_a3b},
    {"qwen3_235b_a22b", "HF Qwen/Qwen3-235B-A22B config.json", tr_provide_qwen3_235b_a22b},
    {"mixtral_8x7b", "HF mistralai/Mixtral-8x7B-v0.1 model card / config.json",
     tr_provide_mixtral_8x7b},
    {"mixtral_8x22b", "HF mistralai/Mixtral-8x22B-v0.1 model card / config.json",
     tr_provide_mixtral_8x22b},
    {"deepseek_v3", "HF deepseek-ai/DeepSeek-V3 config.json (as mapped by Megatron-Bridge)",
     tr_provide_deepseek_v3},
    {"gpt_tiny", "Trestle test model: GPT layers, 2 x 64, byte vocabulary", tr_provide_gpt_tiny},
    {"llama_tiny", "Trestle test model: Llama layers with GQA, 2 x 64, byte vocabulary",
     tr_provide_llama_tiny},
    {"moe_tiny", "Trestle test model: Llama layers with 4 experts top-2, byte vocabulary",
     tr_provide_moe_tiny},
};

const tr_provider *tr_provider_list(int *n) {
    *n = (int)(sizeof providers / sizeof providers[0]);
    return providers;
}

const tr_provider *tr_provider_find(const char *name) {
    int n;
    const tr_provider *p = tr_provider_list(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(p[i].name, name)) return &p[i];
    return NULL;
}

tr_status tr_provider_apply(tr_config *c, const tr_provider *p) {
    tr_config *before = malloc(sizeof *before);
    if (!before) return TR_ERR_NOMEM;
    tr_status s = tr_config_copy(before, c);
    if (s != TR_OK) {
        free(before);
        return s;
    }
    s = p->fill(c);
    if (s == TR_OK) {
        tr_origin o = tr_origin_make(TR_ORIGIN_PROVIDER, p->name);
        s = tr_config_mark_changes(c, before, &o);
    }
    tr_config_free(before);
    free(before);
    return s;
}

tr_status tr_provider_apply_named(tr_config *c, const char *name) {
    const tr_provider *p = tr_provider_find(name);
    if (!p) return TR_ERR_NOTFOUND;
    return tr_provider_apply(c, p);
}

int64_t tr_vocab_pad_multiple(int64_t hf_vocab) {
    int64_t m = 128;
    while (m > 1 && (hf_vocab <= 0 || hf_vocab % m != 0)) m /= 2;
    return m;
}

tr_status tr_provider_set_hf_dims(tr_config *c, const tr_hf_dims *x) {
    tr_model_config *m = &c->model;
    m->num_layers = x->layers;
    m->hidden_size = x->hidden;
    m->ffn_hidden_size = x->ffn;
    m->num_attention_heads = x->heads;
    m->num_query_groups = x->kv_heads;
    m->kv_channels = x->head_dim ? x->head_dim : TR_NULL_INT;
    m->vocab_size = x->vocab;
    m->make_vocab_size_divisible_by = tr_vocab_pad_multiple(x->vocab);
    m->seq_length = x->max_positions;
    m->rotary_base = x->rope_theta;
    m->layernorm_epsilon = x->norm_eps;
    m->share_embeddings_and_output_weights = x->tied;
    return tr_config_set_str(c, TR_FID_model_hf_model_id, x->hf_id);
}

void tr_provider_llama_layers(tr_model_config *m) {
    m->normalization = TR_NORM_RMSNORM;
    m->gated_linear_unit = true;
    m->activation_func = TR_ACT_SILU;
    m->add_bias_linear = false;
    m->add_qkv_bias = false;
    m->position_embedding_type = TR_POSEMB_ROPE;
    m->rotary_percent = 1.0;
    m->hidden_dropout = 0.0;
    m->attention_dropout = 0.0;
    m->bias_activation_fusion = true;
    m->masked_softmax_fusion = true;
    m->persist_layer_norm = true;
    m->bias_dropout_fusion = true;
    m->apply_rope_fusion = true;
    m->attention_softmax_in_fp32 = false;
    m->cross_entropy_loss_fusion = true;
    /* HF torch_dtype bfloat16 -> params_dtype/bf16, as the bridge maps it. */
    m->params_dtype = TR_DTYPE_BF16;
    m->bf16 = true;
}

void tr_provider_llama3_rope_scaling(tr_model_config *m, double factor) {
    m->rope_scaling = true;
    m->rope_scaling_factor = factor;
    m->rope_scaling_low_freq_factor = 1.0;
    m->rope_scaling_high_freq_factor = 4.0;
    m->rope_scaling_original_max_position_embeddings = 8192;
}
