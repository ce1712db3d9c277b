/* Llama 2, 3, 3.1 and 3.2. Dimensions are the public Hugging Face config.json values; the layer
 * settings are those Megatron-Bridge's Llama bridge fixes (reference §6.4). */
#include "providers/common.h"
#include "providers/provider.h"

static tr_status llama(tr_config *c, const tr_hf_dims *x) {
    tr_provider_llama_layers(&c->model);
    return tr_provider_set_hf_dims(c, x);
}

/* Llama 2 (Touvron et al., 2023): vocab 32000, 4096 positions, rope theta 1e4, untied. */
tr_status tr_provide_llama2_7b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 32,
                                 .hidden = 4096,
                                 .ffn = 11008,
                                 .heads = 32,
                                 .kv_heads = 32,
                                 .vocab = 32000,
                                 .max_positions = 4096,
                                 .rope_theta = 10000.0,
                                 .norm_eps = 1e-5,
                                 .hf_id = "meta-llama/Llama-2-7b-hf"};
    return llama(c, &x);
}

tr_status tr_provide_llama2_13b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 40,
                                 .hidden = 5120,
                                 .ffn = 13824,
                                 .heads = 40,
                                 .kv_heads = 40,
                                 .vocab = 32000,
                                 .max_positions = 4096,
                                 .rope_theta = 10000.0,
                                 .norm_eps = 1e-5,
                                 .hf_id = "meta-llama/Llama-2-13b-hf"};
    return llama(c, &x);
}

tr_status tr_provide_llama2_70b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 80,
                                 .hidden = 8192,
                                 .ffn = 28672,
                                 .heads = 64,
                                 .kv_heads = 8,
                                 .vocab = 32000,
                                 .max_positions = 4096,
                                 .rope_theta = 10000.0,
                                 .norm_eps = 1e-5,
                                 .hf_id = "meta-llama/Llama-2-70b-hf"};
    return llama(c, &x);
}

/* Llama 3: vocab 128256, 8192 positions, rope theta 5e5, untied, no rope scaling. */
tr_status tr_provide_llama3_8b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 32,
                                 .hidden = 4096,
                                 .ffn = 14336,
                                 .heads = 32,
                                 .kv_heads = 8,
                                 .head_dim = 128,
                                 .vocab = 128256,
                                 .max_positions = 8192,
                                 .rope_theta = 500000.0,
                                 .norm_eps = 1e-5,
                                 .hf_id = "meta-llama/Meta-Llama-3-8B"};
    return llama(c, &x);
}

tr_status tr_provide_llama3_70b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 80,
                                 .hidden = 8192,
                                 .ffn = 28672,
                                 .heads = 64,
                                 .kv_heads = 8,
                                 .head_dim = 128,
                                 .vocab = 128256,
                                 .max_positions = 8192,
                                 .rope_theta = 500000.0,
                                 .norm_eps = 1e-5,
                                 .hf_id = "meta-llama/Meta-Llama-3-70B"};
    return llama(c, &x);
}

/* Llama 3.1: the Llama 3 sizes plus 405B, 131072 positions, llama3 rope scaling factor 8. */
static tr_status llama31(tr_config *c, const tr_hf_dims *x) {
    TR_TRY(llama(c, x));
    tr_provider_llama3_rope_scaling(&c->model, 8.0);
    return TR_OK;
}

tr_status tr_provide_llama31_8b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 32,
                                 .hidden = 4096,
                                 .ffn = 14336,
                                 .heads = 32,
                                 .kv_heads = 8,
                                 .head_dim = 128,
                                 .vocab = 128256,
                                 .max_positions = 131072,
                                 .rope_theta = 500000.0,
                                 .norm_eps = 1e-5,
                                 .hf_id = "meta-llama/Llama-3.1-8B"};
    return llama31(c, &x);
}

tr_status tr_provide_llama31_70b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 80,
                                 .hidden = 8192,
                                 .ffn = 28672,
                                 .heads = 64,
                                 .kv_heads = 8,
                                 .head_dim = 128,
                                 .vocab = 128256,
                                 .max_positions = 131072,
                                 .rope_theta = 500000.0,
                                 .norm_eps = 1e-5,
                                 .hf_id = "meta-llama/Llama-3.1-70B"};
    return llama31(c, &x);
}

tr_status tr_provide_llama31_405b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 126,
                                 .hidden = 16384,
                                 .ffn = 53248,
                                 .heads = 128,
                                 .kv_heads = 8,
                                 .head_dim = 128,
                                 .vocab = 128256,
                                 .max_positions = 131072,
                                 .rope_theta = 500000.0,
                                 .norm_eps = 1e-5,
                                 .hf_id = "meta-llama/Llama-3.1-405B"};
    return llama31(c, &x);
}

/* Llama 3.2: small models with tied embeddings and llama3 rope scaling factor 32. */
static tr_status llama32(tr_config *c, const tr_hf_dims *x) {
    TR_TRY(llama(c, x));
    tr_provider_llama3_rope_scaling(&c->model, 32.0);
    return TR_OK;
}

tr_status tr_provide_llama32_1b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 16,
                                 .hidden = 2048,
                                 .ffn = 8192,
                                 .heads = 32,
                                 .kv_heads = 8,
                                 .head_dim = 64,
                                 .vocab = 128256,
                                 .max_positions = 131072,
                                 .rope_theta = 500000.0,
                                 .norm_eps = 1e-5,
                                 .tied = true,
                                 .hf_id = "meta-llama/Llama-3.2-1B"};
    return llama32(c, &x);
}

tr_status tr_provide_llama32_3b(tr_config *c) {
    static const tr_hf_dims x = {.layers = 28,
                                 .hidden = 3072,
                                 .ffn = 8192,
                                 .heads = 24,
                                 .kv_heads = 8,
                                 .head_dim = 128,
                                 .vocab = 128256,
                                 .max_positions = 131072,
                                 .rope_theta = 500000.0,
                                 .norm_eps = 1e-5,
                                 .tied = true,
                                 .hf_id = "meta-llama/Llama-3.2-3B"};
    return llama32(c, &x);
}
