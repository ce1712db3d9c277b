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
