/* Qwen3 dense and MoE. Dimensions from the public Hugging Face config.json files; layer settings
 * as Megatron-Bridge's Qwen3 bridges map them: Llama-style layers plus per-head query/key RMSNorm
 * (qk_layernorm), rope theta 1e6, RMSNorm eps 1e-6. */
#include "providers/common.h"
#include "providers/provider.h"

static tr_status qwen3(tr_config *c, const tr_hf_dims *x) {
    tr_provider_llama_layers(&c->model);
    c->model.qk_layernorm = true;
    return tr_provider_set_hf_dims(c, x);
}

/* Megatron-Bridge spells Qwen3-0.6B "qwen3_600m". */
tr_status tr_provide_qwen3_600m(tr_config *c) {
    static const tr_hf_dims x = {.layers = 28,
                                 .hidden = 1024,
                                 .ffn = 3072,
                                 .heads = 16,
                                 .kv_heads = 8,
                                 .head_dim = 128,
                                 .vocab = 151936,
                                 .max_positions = 40960,
                                 .rope_theta = 1000000.0,
                                 .norm_eps = 1e-6,
                                 .tied = true,
                                 .hf_id = "Qwen/Qwen3-0.6B"};
    return qwen3(c, &x);
}

tr_status tr_provide_qwen3_8b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 36,
                                 .hidden = 4096,
                                 .ffn = 12288,
                                 .heads = 32,
                                 .kv_heads = 8,
                                 .head_dim = 128,
                                 .vocab = 151936,
                                 .max_positions = 40960,
                                 .rope_theta = 1000000.0,
                                 .norm_eps = 1e-6,
                                 .hf_id = "Qwen/Qwen3-8B"};
    return qwen3(c, &x);
}

/* Qwen3-MoE: every layer is MoE (decoder_sparse_step 1), softmax routing over the selected experts
 * (norm_topk_prob), aux-loss balancing with coefficient 1e-3, no shared expert. */
static tr_status qwen3_moe(tr_config *c, const tr_hf_dims *x, int64_t experts, int64_t moe_ffn) {
    TR_TRY(qwen3(c, x));
    tr_model_config *m = &c->model;
    m->num_moe_experts = experts;
    m->moe_router_topk = 8;
    m->moe_ffn_hidden_size = moe_ffn;
    m->moe_router_load_balancing_type = TR_MOELB_AUX_LOSS;
    m->moe_aux_loss_coeff = 1e-3;
    m->moe_router_score_function = TR_SCORE_SOFTMAX;
    m->moe_router_pre_softmax = false;
    m->moe_grouped_gemm = true;
    m->moe_permute_fusion = true;
    m->moe_token_dispatcher_type = TR_DISPATCH_ALLTOALL;
    return TR_OK;
}

tr_status tr_provide_qwen3_30b_a3b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 48,
                                 .hidden = 2048,
                                 .ffn = 6144,
                                 .heads = 32,
                                 .kv_heads = 4,
                                 .head_dim = 128,
                                 .vocab = 151936,
                                 .max_positions = 40960,
                                 .rope_theta = 1000000.0,
                                 .norm_eps = 1e-6,
                                 .hf_id = "Qwen/Qwen3-30B-A3B"};
    return qwen3_moe(c, &x, 128, 768);
}

tr_status tr_provide_qwen3_235b_a22b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 94,
                                 .hidden = 4096,
                                 .ffn = 12288,
                                 .heads = 64,
                                 .kv_heads = 4,
                                 .head_dim = 128,
                                 .vocab = 151936,
                                 .max_positions = 40960,
                                 .rope_theta = 1000000.0,
                                 .norm_eps = 1e-6,
                                 .hf_id = "Qwen/Qwen3-235B-A22B"};
    return qwen3_moe(c, &x, 128, 1536);
}
