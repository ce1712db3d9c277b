/* GPT family: Megatron's GPTModelProvider defaults (LayerNorm, GeLU, learned absolute positions,
 * tied embeddings, biases on every linear layer) and the two GPT sizes Trestle ships. */
#include "providers/common.h"
#include "providers/provider.h"

/* Sizes stay 0: vanilla GPT leaves them to the user, exactly as Megatron-Bridge's vanilla_gpt
 * recipe does. */
tr_status tr_provide_gpt(tr_config *c) {
    tr_provider_gpt_layers(&c->model);
    return TR_OK;
}

/* GPT-2 small (Radford et al., 2019; HF openai-community/gpt2): 12 layers, 768 hidden, 12 heads,
 * 1024 positions, vocab 50257, tanh-approximated GeLU ("gelu_new"), LayerNorm eps 1e-5.
 * The vocabulary is padded to a multiple of 128 (50304), as Megatron and llm.c do. */
tr_status tr_provide_gpt2_124m(tr_config *c) {
    tr_model_config *m = &c->model;
    tr_provider_gpt_layers(m);
    m->num_layers = 12;
    m->hidden_size = 768;
    m->num_attention_heads = 12;
    m->ffn_hidden_size = 3072;
    m->seq_length = 1024;
    m->vocab_size = 50257;
    m->should_pad_vocab = true;
    m->activation_func = TR_ACT_FAST_GELU;
    m->layernorm_epsilon = 1e-5;
    return tr_config_set_str(c, TR_FID_model_hf_model_id, "openai-community/gpt2");
}

/* GPT-3 175B as Megatron-Bridge's gpt3_175b recipe builds its GPTModelProvider (reference §6.4g;
 * Brown et al., 2020 Table 2.1): 96 layers, 12288 hidden, 96 heads of 128, ffn 4 x hidden,
 * 2048 positions, no dropout, zero-centered LayerNorm gamma. */
tr_status tr_provide_gpt3_175b(tr_config *c) {
    tr_model_config *m = &c->model;
    tr_provider_gpt_layers(m);
    m->num_layers = 96;
    m->hidden_size = 12288;
    m->ffn_hidden_size = 49152;
    m->num_attention_heads = 96;
    m->seq_length = 2048;
    m->hidden_dropout = 0.0;
    m->attention_dropout = 0.0;
    m->layernorm_zero_centered_gamma = true;
    return TR_OK;
}
