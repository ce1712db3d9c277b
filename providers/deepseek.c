/* DeepSeek-V3 as Megatron-Bridge's DeepSeek-V3 bridge maps the HF config (reference §6.4h).
 * Multi-latent attention and multi-token prediction are recorded and validated but the runtime
 * does not implement them, so the capability rules (runtime.mla, runtime.mtp) refuse recipes
 * built on this provider. */
#include "providers/common.h"
#include "providers/provider.h"

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
    tr_provider_llama_layers(&c->model);
    TR_TRY(tr_provider_set_hf_dims(c, &x));
    tr_model_config *m = &c->model;
    m->make_vocab_size_divisible_by = 1280; /* the bridge's override of the HF rule */

    m->multi_latent_attention = true;
    m->q_lora_rank = 1536;
    m->kv_lora_rank = 512;
    m->qk_head_dim = 128;
    m->qk_pos_emb_head_dim = 64;
    m->v_head_dim = 128;
    m->rope_type = TR_ROPE_YARN;
    m->rotary_scaling_factor = 40.0;
    m->original_max_position_embeddings = 4096;
    m->beta_fast = 32.0;
    m->beta_slow = 1.0;
    m->mscale = 1.0;
    m->mscale_all_dim = 1.0;

    /* first_k_dense_replace = 3: three dense layers, then 58 MoE layers. */
    int64_t freq[61];
    for (int i = 0; i < 61; i++) freq[i] = i < 3 ? 0 : 1;
    TR_TRY(tr_config_set_intlist(c, TR_FID_model_moe_layer_freq, freq, 61));
    m->num_moe_experts = 256;
    m->moe_router_topk = 8;
    m->moe_ffn_hidden_size = 2048;
    m->moe_shared_expert_intermediate_size = 2048;
    m->moe_router_score_function = TR_SCORE_SIGMOID;
    m->moe_router_enable_expert_bias = true;
    m->moe_router_num_groups = 8;
    m->moe_router_group_topk = 4;
    m->moe_router_topk_scaling_factor = 2.5;
    m->moe_router_load_balancing_type = TR_MOELB_SEQ_AUX_LOSS;
    m->moe_aux_loss_coeff = 1e-4;
    m->moe_router_pre_softmax = true;
    m->moe_router_dtype = TR_RDTYPE_FP32;
    m->moe_grouped_gemm = true;
    m->moe_token_dispatcher_type = TR_DISPATCH_ALLTOALL;
    m->mtp_num_layers = 1;
    m->mtp_loss_scaling_factor = 0.1;
    return TR_OK;
}
