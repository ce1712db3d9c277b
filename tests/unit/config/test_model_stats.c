/* Parameter and FLOP counts against published numbers (model cards / papers), not against values
 * produced by the code under test. The HF vocabularies are set explicitly: pretraining recipes
 * train on a 32000-token NullTokenizer instead. */
#include "core/config.h"
#include "core/model_stats.h"
#include "providers/provider.h"
#include "tests/unit/harness.h"

static tr_model_stats stats_of(const char *provider, int64_t vocab) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    tr_model_stats st = {0};
    if (tr_config_init(&c, &d) != TR_OK) {
        CHECK(!"config init failed");
        return st;
    }
    CHECK(tr_provider_apply_named(&c, provider) == TR_OK);
    c.model.vocab_size = vocab;
    c.derived.padded_vocab_size = TR_NULL_INT;
    CHECK(tr_model_stats_fill(&c) == TR_OK);
    st.num_params = c.derived.num_params;
    st.num_active_params = c.derived.num_active_params;
    st.flops_per_token = c.derived.flops_per_token;
    st.num_mtp_params = c.derived.num_mtp_params;
    st.num_mtp_active_params = c.derived.num_mtp_active_params;
    tr_config_free(&c);
    tr_diags_free(&d);
    return st;
}

/* Meta: "Llama 3 8B" has 8.03B parameters (HF model card, safetensors total). */
static void test_llama3_8b(void) {
    tr_model_stats st = stats_of("llama3_8b", 128256);
    CHECK_CLOSE(st.num_params, 8.03e9, 0.01, 0);
    CHECK_INT_EQ(st.num_params, st.num_active_params);
}

/* Llama 3.2 1B: 1.24B with tied embeddings (HF model card). */
static void test_llama32_1b(void) {
    tr_model_stats st = stats_of("llama32_1b", 128256);
    CHECK_CLOSE(st.num_params, 1.24e9, 0.01, 0);
}

/* Llama 3.1 405B: 405B (model card); Llama 2 7B: 6.74B (HF safetensors total). */
static void test_llama_sizes(void) {
    CHECK_CLOSE(stats_of("llama31_405b", 128256).num_params, 405.8e9, 0.01, 0);
    CHECK_CLOSE(stats_of("llama2_7b", 32000).num_params, 6.74e9, 0.01, 0);
}

/* GPT-3 175B (Brown et al., 2020) with the GPT-2 vocabulary of 50257. */
static void test_gpt3_175b(void) {
    tr_model_stats st = stats_of("gpt3_175b", 50257);
    CHECK_CLOSE(st.num_params, 175e9, 0.01, 0);
}

/* GPT-2 small: 124M (OpenAI; llm.c counts 124,475,904 with the 50304 padded vocabulary). */
static void test_gpt2_124m(void) {
    tr_model_stats st = stats_of("gpt2_124m", 50304);
    CHECK_INT_EQ(st.num_params, 124475904);
}

/* Mixtral 8x7B: 46.7B total, 12.9B active per token (Mistral AI announcement). */
static void test_mixtral(void) {
    tr_model_stats st = stats_of("mixtral_8x7b", 32000);
    CHECK_CLOSE(st.num_params, 46.7e9, 0.01, 0);
    CHECK_CLOSE(st.num_active_params, 12.9e9, 0.01, 0);
    /* Mixtral 8x22B: 141B total, 39B active. */
    tr_model_stats big = stats_of("mixtral_8x22b", 32768);
    CHECK_CLOSE(big.num_params, 141e9, 0.01, 0);
    CHECK_CLOSE(big.num_active_params, 39e9, 0.015, 0);
}

/* Qwen3-30B-A3B: 30.5B total, 3.3B active; Qwen3-235B-A22B: 235B / 22B (Qwen model cards). */
static void test_qwen3_moe(void) {
    tr_model_stats st = stats_of("qwen3_30b_a3b", 151936);
    CHECK_CLOSE(st.num_params, 30.5e9, 0.01, 0);
    CHECK_CLOSE(st.num_active_params, 3.3e9, 0.02, 0);
    tr_model_stats big = stats_of("qwen3_235b_a22b", 151936);
    CHECK_CLOSE(big.num_params, 235e9, 0.01, 0);
    CHECK_CLOSE(big.num_active_params, 22e9, 0.02, 0);
}

/* DeepSeek-V3: 671B main-model parameters plus a 14B MTP module = 685B on the hub; 37B active. */
static void test_deepseek_v3(void) {
    tr_model_stats st = stats_of("deepseek_v3", 129280);
    CHECK_CLOSE(st.num_params, 685e9, 0.01, 0);
    CHECK(st.num_active_params > 37e9 && st.num_active_params < 41e9);
    /* the model card's 671B total and 37B active are the main model's */
    CHECK_CLOSE(st.num_params - st.num_mtp_params, 671e9, 0.01, 0);
    CHECK_CLOSE(st.num_active_params - st.num_mtp_active_params, 37e9, 0.03, 0);
    /* the hub's 14B MTP module holds its own embedding and head; Megatron's shares them */
    CHECK_CLOSE(st.num_mtp_params, 14e9 - 2 * 129280.0 * 7168, 0.06, 0);
}

/* Kimi-K2 (moonshotai/Kimi-K2-Instruct): 1T parameters, 32B active, no MTP. */
static void test_kimi_k2(void) {
    tr_model_stats st = stats_of("kimi_k2", 163840);
    CHECK_CLOSE(st.num_params, 1.03e12, 0.02, 0);
    CHECK_CLOSE(st.num_active_params, 32e9, 0.05, 0);
    CHECK_INT_EQ(st.num_mtp_params, 0);
}

/* Training FLOPs per token: the 6N rule of thumb (Kaplan et al.) plus the attention term
 * 6 * seq * layers * heads * head_dim for causal attention. For GPT-3 at 2048 tokens the
 * attention term is 6 * 2048 * 96 * 12288; the matmul weights exclude the embedding lookup but
 * include the (tied) output projection. */
static void test_flops(void) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_config_init(&c, &d) == TR_OK);
    CHECK(tr_provider_apply_named(&c, "gpt3_175b") == TR_OK);
    c.model.vocab_size = 50257;
    CHECK(tr_model_stats_fill(&c) == TR_OK);
    double n = (double)c.derived.num_params;
    double pos_emb = 2048.0 * 12288;
    double attention = 6.0 * 2048 * 96 * 12288;
    double expected = 6 * (n - pos_emb) + attention;
    /* Norms and biases are counted in n but are not matmul weights: well under 0.1%. */
    CHECK_CLOSE(c.derived.flops_per_token, expected, 1e-3, 0);
    tr_config_free(&c);
    tr_diags_free(&d);

    /* MoE: FLOPs follow the active parameters, not the total. Mixtral at its 32768-token
     * context: 6 x (active - input embedding) plus 6 * 32768 * 32 layers * 4096. */
    tr_model_stats moe = stats_of("mixtral_8x7b", 32000);
    double moe_expected =
        6.0 * ((double)moe.num_active_params - 32000.0 * 4096) + 6.0 * 32768 * 32 * 4096;
    CHECK_CLOSE(moe.flops_per_token, moe_expected, 1e-3, 0);
}

/* The padded vocabulary wins over the unpadded one when finalize() has set it. */
static void test_padded_vocab_used(void) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_config_init(&c, &d) == TR_OK);
    CHECK(tr_provider_apply_named(&c, "llama_tiny") == TR_OK);
    c.model.vocab_size = 250;
    c.derived.padded_vocab_size = TR_NULL_INT;
    CHECK(tr_model_stats_fill(&c) == TR_OK);
    int64_t unpadded = c.derived.num_params;
    c.derived.padded_vocab_size = 256;
    CHECK(tr_model_stats_fill(&c) == TR_OK);
    /* Tied embeddings: six more rows of 64. */
    CHECK_INT_EQ(c.derived.num_params - unpadded, 6 * 64);
    tr_config_free(&c);
    tr_diags_free(&d);
}

/* Unset or absurd sizes give zeros or saturate; they never crash or overflow. */
static void test_degenerate_inputs(void) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_config_init(&c, &d) == TR_OK);
    CHECK(tr_model_stats_fill(&c) == TR_OK);
    CHECK_INT_EQ(c.derived.num_params, 0);
    CHECK(c.derived.flops_per_token == 0);
    c.model.num_layers = 1000000000000LL;
    c.model.hidden_size = 1000000000LL;
    c.model.num_attention_heads = 1;
    c.model.vocab_size = 1000000000LL;
    CHECK(tr_model_stats_fill(&c) == TR_OK);
    CHECK_INT_EQ(c.derived.num_params, INT64_MAX);
    tr_config_free(&c);
    tr_diags_free(&d);
}

/* A layer pattern: with moe_layer_freq [2] half the layers are MoE. */
static void test_moe_layer_freq(void) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_config_init(&c, &d) == TR_OK);
    CHECK(tr_provider_apply_named(&c, "moe_tiny") == TR_OK);
    c.model.num_layers = 4;
    CHECK(tr_model_stats_fill(&c) == TR_OK);
    int64_t all_moe = c.derived.num_params;
    int64_t every_other[] = {2};
    CHECK(tr_config_set_intlist(&c, TR_FID_model_moe_layer_freq, every_other, 1) == TR_OK);
    CHECK(tr_model_stats_fill(&c) == TR_OK);
    int64_t half = c.derived.num_params;
    int64_t flags[] = {1, 0, 1, 0};
    CHECK(tr_config_set_intlist(&c, TR_FID_model_moe_layer_freq, flags, 4) == TR_OK);
    CHECK(tr_model_stats_fill(&c) == TR_OK);
    CHECK_INT_EQ(c.derived.num_params, half);
    /* Swapping 2 MoE layers (4 experts of 3*64*128 + router 4*64) for dense ones (3*64*192). */
    int64_t moe_mlp = 4 * 3 * 64 * 128 + 4 * 64, dense_mlp = 3 * 64 * 192;
    CHECK_INT_EQ(all_moe - half, 2 * (moe_mlp - dense_mlp));
    tr_config_free(&c);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_llama3_8b), TR_TEST(test_llama32_1b), TR_TEST(test_llama_sizes),
             TR_TEST(test_gpt3_175b), TR_TEST(test_gpt2_124m), TR_TEST(test_mixtral),
             TR_TEST(test_qwen3_moe), TR_TEST(test_deepseek_v3), TR_TEST(test_kimi_k2),
             TR_TEST(test_flops), TR_TEST(test_padded_vocab_used), TR_TEST(test_degenerate_inputs),
             TR_TEST(test_moe_layer_freq))
