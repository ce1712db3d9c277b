/* Mixtral (Mistral AI). Megatron-Bridge has no Mixtral bridge in the snapshot the reference
 * describes, so the dimensions come from the public model cards / config.json: Llama-style layers
 * in which every MLP is 8 SwiGLU experts with top-2 routing, rope theta 1e6, untied embeddings. */
#include "providers/common.h"
#include "providers/provider.h"

static tr_status mixtral(tr_config *c, const tr_hf_dims *x) {
    tr_provider_llama_layers(&c->model);
    TR_TRY(tr_provider_set_hf_dims(c, x));
    tr_model_config *m = &c->model;
    m->num_moe_experts = 8;
    m->moe_router_topk = 2;
    m->moe_ffn_hidden_size = x->ffn;
    m->moe_router_load_balancing_type = TR_MOELB_AUX_LOSS;
    m->moe_aux_loss_coeff = 0.02; /* HF router_aux_loss_coef */
    m->moe_router_pre_softmax = false;
    m->moe_grouped_gemm = true;
    m->moe_token_dispatcher_type = TR_DISPATCH_ALLTOALL;
    return TR_OK;
}

tr_status tr_provide_mixtral_8x7b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 32,
                                 .hidden = 4096,
                                 .ffn = 14336,
                                 .heads = 32,
                                 .kv_heads = 8,
                                 .head_dim = 128,
                                 .vocab = 32000,
                                 .max_positions = 32768,
                                 .rope_theta = 1000000.0,
                                 .norm_eps = 1e-5,
                                 .hf_id = "mistralai/Mixtral-8x7B-v0.1"};
    return mixtral(c, &x);
}

tr_status tr_provide_mixtral_8x22b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 56,
                                 .hidden = 6144,
                                 .ffn = 16384,
                                 .heads = 48,
                                 .kv_heads = 8,
                                 .head_dim = 128,
                                 .vocab = 32768,
                                 .max_positions = 65536,
                                 .rope_theta = 1000000.0,
                                 .norm_eps = 1e-5,
                                 .hf_id = "mistralai/Mixtral-8x22B-v0.1"};
    return mixtral(c, &x);
}
