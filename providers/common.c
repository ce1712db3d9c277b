/* See providers/common.h. */
#include "providers/common.h"

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

void tr_provider_gpt_layers(tr_model_config *m) {
    m->normalization = TR_NORM_LAYERNORM;
    m->activation_func = TR_ACT_GELU;
    m->gated_linear_unit = false;
    m->position_embedding_type = TR_POSEMB_LEARNED_ABSOLUTE;
    m->share_embeddings_and_output_weights = true;
    m->add_bias_linear = true;
    m->make_vocab_size_divisible_by = 128;
}
