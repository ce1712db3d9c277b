/* The provider table and the wrapper that records provider changes with their origin. */
#include "providers/provider.h"

#include <stdlib.h>
#include <string.h>

static const tr_provider providers[] = {
    {"gpt", "Megatron GPTModelProvider defaults (sizes left to the user)", tr_provide_gpt},
    {"gpt2_124m", "GPT-2 small (OpenAI, 2019): 12 x 768, 12 heads, vocab 50257",
     tr_provide_gpt2_124m},
    {"gpt3_175b", "GPT-3 paper (Brown et al., 2020) / Megatron-Bridge gpt3_175b recipe",
     tr_provide_gpt3_175b},
    {"llama2_7b", "HF meta-llama/Llama-2-7b-hf config.json", tr_provide_llama2_7b},
    {"llama2_13b", "HF meta-llama/Llama-2-13b-hf config.json", tr_provide_llama2_13b},
    {"llama2_70b", "HF meta-llama/Llama-2-70b-hf config.json", tr_provide_llama2_70b},
    {"llama3_8b", "HF meta-llama/Meta-Llama-3-8B config.json", tr_provide_llama3_8b},
    {"llama3_70b", "HF meta-llama/Meta-Llama-3-70B config.json", tr_provide_llama3_70b},
    {"llama31_8b", "HF meta-llama/Llama-3.1-8B config.json", tr_provide_llama31_8b},
    {"llama31_70b", "HF meta-llama/Llama-3.1-70B config.json", tr_provide_llama31_70b},
    {"llama31_405b", "HF meta-llama/Llama-3.1-405B config.json", tr_provide_llama31_405b},
    {"llama32_1b", "HF meta-llama/Llama-3.2-1B config.json", tr_provide_llama32_1b},
    {"llama32_3b", "HF meta-llama/Llama-3.2-3B config.json", tr_provide_llama32_3b},
    {"qwen3_600m", "HF Qwen/Qwen3-0.6B config.json", tr_provide_qwen3_600m},
    {"qwen3_8b", "HF Qwen/Qwen3-8B config.json", tr_provide_qwen3_8b},
    {"qwen3_30b_a3b", "HF Qwen/Qwen3-30B-A3B config.json", tr_provide_qwen3_30b_a3b},
    {"qwen3_235b_a22b", "HF Qwen/Qwen3-235B-A22B config.json", tr_provide_qwen3_235b_a22b},
    {"mixtral_8x7b", "HF mistralai/Mixtral-8x7B-v0.1 model card / config.json",
     tr_provide_mixtral_8x7b},
    {"mixtral_8x22b", "HF mistralai/Mixtral-8x22B-v0.1 model card / config.json",
     tr_provide_mixtral_8x22b},
    {"deepseek_v3", "HF deepseek-ai/DeepSeek-V3 config.json (as mapped by Megatron-Bridge)",
     tr_provide_deepseek_v3},
    {"kimi_k2", "HF moonshotai/Kimi-K2-Instruct config.json (the DeepSeek-V3 architecture)",
     tr_provide_kimi_k2},
    {"gpt_tiny", "Trestle test model: GPT layers, 2 x 64, byte vocabulary", tr_provide_gpt_tiny},
    {"llama_tiny", "Trestle test model: Llama layers with GQA, 2 x 64, byte vocabulary",
     tr_provide_llama_tiny},
    {"moe_tiny", "Trestle test model: Llama layers with 4 experts top-2, byte vocabulary",
     tr_provide_moe_tiny},
    {"mixtral_tiny", "Trestle test model: Mixtral-like MoE, 8 experts top-2, byte vocabulary",
     tr_provide_mixtral_tiny},
    {"qwen3_moe_tiny",
     "Trestle test model: Qwen3-MoE-like (QK layernorm, 8 experts top-2), byte vocabulary",
     tr_provide_qwen3_moe_tiny},
    {"deepseek_tiny",
     "Trestle test model: DeepSeek-V3 shape (MLA, dense first layer, sigmoid, expert bias, "
     "groups, shared expert, one MoE MTP depth)",
     tr_provide_deepseek_tiny},
};

const tr_provider *tr_provider_list(int *n) {
    *n = (int)(sizeof providers / sizeof providers[0]);
    return providers;
}

const tr_provider *tr_provider_find(const char *name) {
    int n;
    const tr_provider *p = tr_provider_list(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(p[i].name, name)) return &p[i];
    return NULL;
}

tr_status tr_provider_apply(tr_config *c, const tr_provider *p) {
    tr_config *before = malloc(sizeof *before);
    if (!before) return TR_ERR_NOMEM;
    tr_status s = tr_config_copy(before, c);
    if (s != TR_OK) {
        free(before);
        return s;
    }
    s = p->fill(c);
    if (s == TR_OK) {
        tr_origin o = tr_origin_make(TR_ORIGIN_PROVIDER, p->name);
        s = tr_config_mark_changes(c, before, &o);
    }
    tr_config_free(before);
    free(before);
    return s;
}

tr_status tr_provider_apply_named(tr_config *c, const char *name) {
    const tr_provider *p = tr_provider_find(name);
    if (!p) return TR_ERR_NOTFOUND;
    return tr_provider_apply(c, p);
}
