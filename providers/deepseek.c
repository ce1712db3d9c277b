/* DeepSeek-V3 as Megatron-Bridge's DeepSeek-V3 bridge maps the HF config (reference §6.4h), and
 * Kimi-K2, the same architecture: multi-latent attention (runtime/mla), multi-token prediction
 * (runtime/mtp) and the MoE layers (runtime/moe). */
#include "providers/common.h"
#include "providers/provider.h"

/* The DeepSeek-V3 architecture's settings shared by its models: MLA (q rank 1536, kv rank 512,
 * head 128 + 64 rotary, value 128, the latent norms) with YaRN from a 4096-token original
 * context, dense layers then MoE layers of 2048-wide experts with one shared expert, sigmoid
 * scores with an expert bias, untied embeddings. */
static tr_status deepseek_arch(tr_config *c, const tr_hf_dims *x, int first_dense, int64_t experts,
                               double yarn_factor, double beta_fast, int64_t groups,
                               int64_t group_topk, double routed_scale) {
    tr_provider_llama_layers(&c->model);
    TR_TRY(tr_provider_set_hf_dims(c, x));
    tr_model_config *m = &c->model;
    m->make_vocab_size_divisible_by = 1280; /* the bridge's override of the HF rule */

    m->multi_latent_attention = true;
    m->qk_layernorm = true; /* q_a_layernorm / kv_a_layernorm */
    m->q_lora_rank = 1536;
    m->kv_lora_rank = 512;
    m->qk_head_dim = 128;
    m->qk_pos_emb_head_dim = 64;
    m->v_head_dim = 128;
    m->rope_type = TR_ROPE_YARN;
    m->rotary_scaling_factor = yarn_factor;
    m->original_max_position_embeddings = 4096;
    m->beta_fast = beta_fast;
    m->beta_slow = 1.0;
    m->mscale = 1.0;
    m->mscale_all_dim = 1.0;

    int64_t freq[61];
    for (int i = 0; i < 61; i++) freq[i] = i < first_dense ? 0 : 1;
    TR_TRY(tr_config_set_intlist(c, TR_FID_model_moe_layer_freq, freq, 61));
    m->num_moe_experts = experts;
    m->moe_router_topk = 8;
    m->moe_ffn_hidden_size = 2048;
    m->moe_shared_expert_intermediate_size = 2048;
    m->moe_router_score_function = TR_SCORE_SIGMOID;
    m->moe_router_enable_expert_bias = true;
    m->moe_router_num_groups = groups;
    m->moe_router_group_topk = group_topk;
    m->moe_router_topk_scaling_factor = routed_scale;
    m->moe_router_load_balancing_type = TR_MOELB_SEQ_AUX_LOSS;
    m->moe_aux_loss_coeff = 1e-4;
    m->moe_router_pre_softmax = true;
    m->moe_router_dtype = TR_RDTYPE_FP32;
    m->moe_grouped_gemm = true;
    m->moe_token_dispatcher_type = TR_DISPATCH_ALLTOALL;
    return TR_OK;
}

tr_status tr_provide_deepseek_v3(tr_config *c) {
    static const tr_hf_dims x = {.layers = 61,
                                 .hidden = 7168,
                                 .ffn = 18432,
                                 .heads = 128,
                                 .kv_heads = 128,
                                 .vocab = 129280,
                                 .max_positions = 163840,
                                 .rope_theta = 10000.0,
                                 .norm_eps = 1e-6,
                                 .hf_id = "deepseek-ai/DeepSeek-V3"};
    /* first_k_dense_replace = 3: three dense layers, then 58 MoE layers of 256 experts, routed
     * in 8 groups of which 4 are kept, scaled by 2.5. */
    TR_TRY(deepseek_arch(c, &x, 3, 256, 40.0, 32.0, 8, 4, 2.5));
    c->model.mtp_num_layers = 1;
    c->model.mtp_loss_scaling_factor = 0.1;
    return TR_OK;
}

/* Kimi-K2 (HF moonshotai/Kimi-K2-Instruct, DeepseekV3ForCausalLM): the same architecture with
 * 64 heads, one dense layer then 60 MoE layers of 384 experts (one routing group, scale 2.827),
 * a 163840-token vocabulary, rope theta 50000 with YaRN factor 32 (beta_fast 1), no MTP. */
tr_status tr_provide_kimi_k2(tr_config *c) {
    static const tr_hf_dims x = {.layers = 61,
                                 .hidden = 7168,
                                 .ffn = 18432,
                                 .heads = 64,
                                 .kv_heads = 64,
                                 .vocab = 163840,
                                 .max_positions = 131072,
                                 .rope_theta = 50000.0,
                                 .norm_eps = 1e-6,
                                 .hf_id = "moonshotai/Kimi-K2-Instruct"};
    return deepseek_arch(c, &x, 1, 384, 32.0, 1.0, 1, 1, 2.827);
}
