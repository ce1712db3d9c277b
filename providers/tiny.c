/* Tiny models for tests and the README's first job: small enough to train for a few hundred steps
 * in seconds on two CPU cores, with the 256-symbol byte vocabulary so they can read any text file
 * through the ByteLevelTokenizer. Weights stay fp32 (the CPU backend's native type). */
#include "providers/common.h"
#include "providers/provider.h"

static void tiny_dims(tr_model_config *m) {
    m->num_layers = 2;
    m->hidden_size = 64;
    m->num_attention_heads = 4;
    m->ffn_hidden_size = 256;
    m->seq_length = 64;
    m->vocab_size = 256;
    m->make_vocab_size_divisible_by = tr_vocab_pad_multiple(256);
    m->hidden_dropout = 0.0;
    m->attention_dropout = 0.0;
}

tr_status tr_provide_gpt_tiny(tr_config *c) {
    TR_TRY(tr_provide_gpt(c));
    tiny_dims(&c->model);
    return TR_OK;
}

static void llama_tiny_layers(tr_model_config *m) {
    tr_provider_llama_layers(m);
    m->params_dtype = TR_DTYPE_FP32;
    m->bf16 = false;
    tiny_dims(m);
    m->num_query_groups = 2;
    m->ffn_hidden_size = 192;
    m->share_embeddings_and_output_weights = true;
    m->layernorm_epsilon = 1e-5;
}

tr_status tr_provide_llama_tiny(tr_config *c) {
    llama_tiny_layers(&c->model);
    return TR_OK;
}

tr_status tr_provide_moe_tiny(tr_config *c) {
    tr_model_config *m = &c->model;
    llama_tiny_layers(m);
    m->num_moe_experts = 4;
    m->moe_router_topk = 2;
    m->moe_ffn_hidden_size = 128;
    m->moe_router_load_balancing_type = TR_MOELB_AUX_LOSS;
    m->moe_aux_loss_coeff = 1e-2;
    return TR_OK;
}

/* Mixtral's MoE at tiny size: 8 experts top-2, softmax over the selected logits, aux loss. */
tr_status tr_provide_mixtral_tiny(tr_config *c) {
    tr_model_config *m = &c->model;
    llama_tiny_layers(m);
    m->num_moe_experts = 8;
    m->moe_router_topk = 2;
    m->moe_ffn_hidden_size = 64;
    m->moe_router_load_balancing_type = TR_MOELB_AUX_LOSS;
    m->moe_aux_loss_coeff = 2e-2;
    return TR_OK;
}

/* Qwen3-MoE's layer at tiny size: QK layernorm, 8 experts top-2 (the top-k probabilities
 * renormalised: a softmax over the selected logits), no shared expert, aux loss and z-loss. */
tr_status tr_provide_qwen3_moe_tiny(tr_config *c) {
    tr_model_config *m = &c->model;
    llama_tiny_layers(m);
    m->qk_layernorm = true;
    m->kv_channels = 16;
    m->num_moe_experts = 8;
    m->moe_router_topk = 2;
    m->moe_ffn_hidden_size = 32;
    m->moe_router_load_balancing_type = TR_MOELB_AUX_LOSS;
    m->moe_aux_loss_coeff = 1e-3;
    m->moe_z_loss_coeff = 1e-3;
    return TR_OK;
}

/* DeepSeek-V3 at tiny size: multi-latent attention (query and key-value latents of rank 8, YaRN
 * rotary part of 4 channels), a dense first layer, sigmoid scores with the aux-loss-free expert
 * bias, group-limited top-k (4 groups, 2 picked), scaled probabilities, a shared expert, the
 * sequence aux loss, an fp32 router, and one MTP depth (an MoE layer, like the last decoder
 * layer, as Megatron builds it). */
tr_status tr_provide_deepseek_tiny(tr_config *c) {
    tr_model_config *m = &c->model;
    llama_tiny_layers(m);
    m->num_layers = 3;
    m->multi_latent_attention = true;
    m->qk_layernorm = true;
    m->q_lora_rank = 8;
    m->kv_lora_rank = 8;
    m->qk_head_dim = 8;
    m->qk_pos_emb_head_dim = 4;
    m->v_head_dim = 6;
    m->rope_type = TR_ROPE_YARN;
    m->rotary_scaling_factor = 4.0;
    m->original_max_position_embeddings = 8;
    m->mscale = 0.7;
    m->mscale_all_dim = 0.5;
    m->mtp_num_layers = 1;
    m->mtp_loss_scaling_factor = 0.3;
    m->num_moe_experts = 8;
    m->moe_router_topk = 2;
    m->moe_ffn_hidden_size = 32;
    m->moe_shared_expert_intermediate_size = 64;
    m->moe_router_score_function = TR_SCORE_SIGMOID;
    m->moe_router_enable_expert_bias = true;
    m->moe_router_bias_update_rate = 1e-3;
    m->moe_router_num_groups = 4;
    m->moe_router_group_topk = 2;
    m->moe_router_topk_scaling_factor = 2.5;
    m->moe_router_load_balancing_type = TR_MOELB_SEQ_AUX_LOSS;
    m->moe_aux_loss_coeff = 1e-4;
    m->moe_router_dtype = TR_RDTYPE_FP32;
    static const int64_t freq[] = {0, 1, 1};
    return tr_config_set_intlist(c, TR_FID_model_moe_layer_freq, freq, 3);
}
