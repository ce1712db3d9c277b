/* The two tiny models the model-level unit tests share: a tied GPT (LayerNorm, tanh GeLU, learned
 * positions, biases) and an untied Llama (RMSNorm, SwiGLU, RoPE on every channel, GQA with 2 query
 * groups). Small enough for finite differences, with head, group and width sizes that differ from
 * each other so a transposed index cannot pass. Tests change fields after the call. */
#ifndef TR_TESTS_TINY_MODELS_H
#define TR_TESTS_TINY_MODELS_H

#include "runtime/model/model.h"

static inline tr_model_spec tr_test_gpt_spec(int seq) {
    return (tr_model_spec){.num_layers = 2,
                           .hidden = 16,
                           .heads = 4,
                           .groups = 4,
                           .head_dim = 4,
                           .ffn = 24,
                           .vocab = 29,
                           .seq = seq,
                           .layernorm = 1,
                           .gelu_tanh = 1,
                           .learned_pos = 1,
                           .bias_linear = 1,
                           .bias_qkv = 1,
                           .tied = 1,
                           .eps = 1e-5f,
                           .init_std = 0.3,
                           .embed_init_std = 0.5};
}

static inline tr_model_spec tr_test_llama_spec(int seq) {
    tr_model_spec s = {.num_layers = 2,
                       .hidden = 16,
                       .heads = 4,
                       .groups = 2,
                       .head_dim = 6,
                       .ffn = 20,
                       .vocab = 31,
                       .seq = seq,
                       .swiglu = 1,
                       .rope = 1,
                       .eps = 1e-6f,
                       .init_std = 0.3,
                       .embed_init_std = 0.5};
    s.rope_p = (tr_rope_params){.rot_dim = 6, .base = 10000.0};
    return s;
}

/* The device tests' Llama: head_dim 8 with RoPE on every channel, GQA with 2 query groups, and a
 * vocabulary padded from 37 to 40 (the padding rows must stay out of the loss). */
static inline tr_model_spec tr_test_padded_llama_spec(int hidden, int ffn, int seq) {
    tr_model_spec s = tr_test_llama_spec(seq);
    s.hidden = hidden;
    s.head_dim = 8;
    s.ffn = ffn;
    s.vocab = 40;
    s.vocab_real = 37;
    s.rope_p.rot_dim = 8;
    return s;
}

#endif
