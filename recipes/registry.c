/* The recipe catalog: one row per recipe, and name lookup that also understands Megatron-Bridge's
 * spellings. min_world_size is written down here (not computed) so that a test can hold it
 * against the layout the recipe actually fills. */
#include "recipes/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipes/common.h"

#define PRE  TR_MODE_PRETRAIN
#define SFT  TR_MODE_SFT
#define LORA TR_MODE_LORA
#define ROW(name, doc, mode, min_world)                                                            \
    { #name, doc, mode, min_world, NULL, tr_recipe_##name }

static const char *const vanilla_gpt_sizes[] = {"model.num_layers=12", "model.hidden_size=768",
                                                "model.num_attention_heads=12", NULL};

static const tr_recipe recipes[] = {
    /* GPT */
    {"vanilla_gpt_pretrain", "Megatron-LM pretrain_gpt.py defaults; give the model size", PRE, 1,
     vanilla_gpt_sizes, tr_recipe_vanilla_gpt_pretrain},
    ROW(gpt2_124m_pretrain, "GPT-2 small, llm.c settings (benchmarks)", PRE, 1),
    ROW(gpt3_175b_pretrain, "GPT-3 175B, TP4 PP8 VPP6 SP", PRE, 32),
    /* Llama */
    ROW(llama2_7b_pretrain, "Llama 2 7B, 4k tokens, TP2", PRE, 2),
    ROW(llama32_1b_pretrain, "Llama 3.2 1B, 8k tokens, one GPU", PRE, 1),
    ROW(llama32_1b_sft, "Llama 3.2 1B full fine-tuning, packed 4k", SFT, 1),
    ROW(llama32_1b_lora, "Llama 3.2 1B LoRA 32/32, packed 4k", LORA, 1),
    ROW(llama32_3b_pretrain, "Llama 3.2 3B, 8k tokens, one GPU", PRE, 1),
    ROW(llama32_3b_sft, "Llama 3.2 3B full fine-tuning, packed 4k", SFT, 1),
    ROW(llama32_3b_lora, "Llama 3.2 3B LoRA 32/32, packed 4k", LORA, 1),
    ROW(llama3_8b_pretrain, "Llama 3 8B, 8k tokens, CP2", PRE, 2),
    ROW(llama3_8b_16k_pretrain, "Llama 3 8B, 16k tokens, TP4 PP2 CP2 SP", PRE, 16),
    ROW(llama3_8b_64k_pretrain, "Llama 3 8B, 64k tokens, TP4 PP2 CP4 SP", PRE, 32),
    ROW(llama3_8b_128k_pretrain, "Llama 3 8B, 128k tokens, TP4 PP2 CP8 SP", PRE, 64),
    ROW(llama3_8b_sft, "Llama 3 8B full fine-tuning, TP2", SFT, 2),
    ROW(llama3_8b_lora, "Llama 3 8B LoRA 8/16, one GPU", LORA, 1),
    ROW(llama3_70b_pretrain, "Llama 3 70B, TP4 PP4 VPP5 CP2 SP", PRE, 32),
    ROW(llama3_70b_16k_pretrain, "Llama 3 70B, 16k tokens, TP8 PP2 CP2 SP", PRE, 32),
    ROW(llama3_70b_64k_pretrain, "Llama 3 70B, 64k tokens, TP8 PP4 CP8 SP", PRE, 256),
    ROW(llama3_70b_pretrain_deterministic, "Llama 3 70B, deterministic kernels, no TP overlap", PRE,
        32),
    ROW(llama3_70b_sft, "Llama 3 70B full fine-tuning, TP8 PP4", SFT, 32),
    ROW(llama3_70b_lora, "Llama 3 70B LoRA 16/32, TP8", LORA, 8),
    ROW(llama31_8b_pretrain, "Llama 3.1 8B, 8k tokens, CP2", PRE, 2),
    ROW(llama31_8b_sft, "Llama 3.1 8B full fine-tuning, TP2", SFT, 2),
    ROW(llama31_8b_lora, "Llama 3.1 8B LoRA 8/16, one GPU", LORA, 1),
    ROW(llama31_70b_pretrain, "Llama 3.1 70B, 128k tokens, TP4 PP4 VPP5 CP2 SP", PRE, 32),
    ROW(llama31_70b_sft, "Llama 3.1 70B full fine-tuning, TP8 PP4", SFT, 32),
    ROW(llama31_70b_lora, "Llama 3.1 70B LoRA 16/32, TP8", LORA, 8),
    ROW(llama31_405b_pretrain, "Llama 3.1 405B, 128k tokens, TP8 PP8 VPP2 CP4 SP", PRE, 256),
    ROW(llama31_405b_pretrain_deterministic, "Llama 3.1 405B, deterministic kernels", PRE, 256),
    ROW(llama31_405b_sft,
        "Llama 3.1 405B full fine-tuning, TP8 PP16 SP (differs: packs to a multiple of 8, "
        "Megatron-Bridge 1)",
        SFT, 128),
    ROW(llama31_405b_lora,
        "Llama 3.1 405B LoRA on linear_qkv, TP4 PP8 VPP8 SP (differs: packs to a multiple of 4, "
        "Megatron-Bridge 1)",
        LORA, 32),
    /* Qwen3 */
    ROW(qwen3_600m_pretrain, "Qwen3 0.6B, one GPU", PRE, 1),
    ROW(qwen3_600m_sft, "Qwen3 0.6B full fine-tuning", SFT, 1),
    ROW(qwen3_600m_lora, "Qwen3 0.6B LoRA 32/32", LORA, 1),
    ROW(qwen3_600m_sft_128k, "Qwen3 0.6B full fine-tuning, 128k tokens, CP8", SFT, 8),
    ROW(qwen3_8b_4gpu_pretrain, "Qwen3 8B, the pretraining template on TP4", PRE, 4),
    ROW(qwen3_8b_pretrain, "Qwen3 8B, 100 steps of GBS 1024, nothing split", PRE, 1),
    ROW(qwen3_8b_sft, "Qwen3 8B full fine-tuning, TP4", SFT, 4),
    ROW(qwen3_8b_sft_32k, "Qwen3 8B full fine-tuning, 32k tokens, TP4 CP2 SP", SFT, 8),
    ROW(qwen3_8b_lora, "Qwen3 8B LoRA 8/16 on qkv and proj, one GPU", LORA, 1),
    ROW(qwen3_30b_a3b_pretrain, "Qwen3 30B-A3B MoE, EP16", PRE, 16),
    ROW(qwen3_30b_a3b_sft, "Qwen3 30B-A3B MoE full fine-tuning, EP16", SFT, 16),
    ROW(qwen3_30b_a3b_lora, "Qwen3 30B-A3B MoE LoRA 8/16, TP4 EP4 SP", LORA, 4),
    ROW(qwen3_30b_a3b_8gpu_pretrain, "Qwen3 30B-A3B MoE, TP4 PP2 EP4 SP, full recompute", PRE, 8),
    ROW(qwen3_30b_a3b_8gpu_sft, "Qwen3 30B-A3B MoE full fine-tuning, TP4 PP2 EP4 SP", SFT, 8),
    ROW(qwen3_235b_a22b_pretrain, "Qwen3 235B-A22B MoE, TP4 PP16 CP2 EP8 SP", PRE, 128),
    ROW(qwen3_235b_a22b_sft,
        "Qwen3 235B-A22B MoE full fine-tuning, TP4 PP16 EP4 SP (differs: packs to a multiple "
        "of 4, Megatron-Bridge 1)",
        SFT, 64),
    ROW(qwen3_235b_a22b_lora,
        "Qwen3 235B-A22B MoE LoRA 8/16, TP4 PP4 EP4 SP (differs: packs to a multiple of 4, "
        "Megatron-Bridge 1)",
        LORA, 16),
    /* Other MoE */
    ROW(mixtral_8x7b_pretrain, "Mixtral 8x7B, PP4 VPP8 EP8 (Trestle addition)", PRE, 32),
    ROW(mixtral_8x22b_pretrain, "Mixtral 8x22B, TP2 PP4 VPP14 EP8 (Trestle addition)", PRE, 32),
    ROW(deepseek_v3_pretrain, "DeepSeek-V3 (MLA + MTP + MoE), TP2 PP16 EP64", PRE, 1024),
    ROW(kimi_k2_pretrain, "Kimi-K2 1T (DeepSeek-V3 architecture), TP2 PP16 EP32", PRE, 512),
    ROW(deepseek_v3_pretrain_32nodes, "DeepSeek-V3 on 32 nodes, TP2 PP8 EP32, full recompute", PRE,
        256),
    /* Tiny models for tests and first runs */
    ROW(gpt_tiny_pretrain, "2-layer GPT on bytes, seconds on a CPU", PRE, 1),
    ROW(llama_tiny_pretrain, "2-layer Llama (GQA) on bytes, seconds on a CPU", PRE, 1),
    ROW(llama_tiny_sft, "2-layer Llama fine-tuning on JSONL, seconds on a CPU", SFT, 1),
    ROW(llama_tiny_lora, "2-layer Llama LoRA on JSONL, seconds on a CPU", LORA, 1),
    ROW(moe_tiny_pretrain, "2-layer Llama with 4 experts top-2 on bytes", PRE, 1),
    ROW(mixtral_tiny_pretrain, "2-layer Mixtral-like MoE, 8 experts top-2, on bytes", PRE, 1),
    ROW(qwen3_moe_tiny_pretrain, "2-layer Qwen3-MoE-like (QK norm, 8 experts top-2) on bytes", PRE,
        1),
    ROW(deepseek_tiny_pretrain, "3-layer DeepSeek-V3 shape (MLA, MoE, one MTP depth) on bytes", PRE,
        1),
};

const tr_recipe *tr_recipe_list(int *n) {
    *n = (int)(sizeof recipes / sizeof recipes[0]);
    return recipes;
}

static const tr_recipe *find_exact(const char *name) {
    int n;
    const tr_recipe *r = tr_recipe_list(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(r[i].name, name)) return &r[i];
    return NULL;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Megatron-Bridge's hardware-specific names (recipes/<family>/h100/ files) of the recipes above,
 * without "_config": the function each short name aliases, and the hardware variants without a
 * short name (qwen3_8b_pretrain_4gpu_..., qwen3_30b_a3b_{pretrain,sft}_8gpu_...), which are
 * recipes of their own here. */
static const struct {
    const char *megatron, *trestle;
} hardware_names[] = {
    {"vanilla_gpt_pretrain_1gpu_h100_bf16", "vanilla_gpt_pretrain"},
    {"gpt3_175b_pretrain_32gpu_h100_bf16", "gpt3_175b_pretrain"},
    {"llama2_7b_pretrain_2gpu_h100_bf16", "llama2_7b_pretrain"},
    {"llama32_1b_pretrain_1gpu_h100_bf16", "llama32_1b_pretrain"},
    {"llama32_1b_sft_1gpu_h100_bf16", "llama32_1b_sft"},
    {"llama32_1b_peft_1gpu_h100_bf16", "llama32_1b_lora"},
    {"llama32_3b_pretrain_1gpu_h100_bf16", "llama32_3b_pretrain"},
    {"llama32_3b_sft_1gpu_h100_bf16", "llama32_3b_sft"},
    {"llama32_3b_peft_1gpu_h100_bf16", "llama32_3b_lora"},
    {"llama3_8b_pretrain_2gpu_h100_bf16", "llama3_8b_pretrain"},
    {"llama3_8b_pretrain_16gpu_h100_bf16_16k", "llama3_8b_16k_pretrain"},
    {"llama3_8b_pretrain_32gpu_h100_bf16_64k", "llama3_8b_64k_pretrain"},
    {"llama3_8b_pretrain_64gpu_h100_bf16_128k", "llama3_8b_128k_pretrain"},
    {"llama3_8b_sft_2gpu_h100_bf16", "llama3_8b_sft"},
    {"llama3_8b_peft_1gpu_h100_bf16", "llama3_8b_lora"},
    {"llama3_70b_pretrain_32gpu_h100_bf16", "llama3_70b_pretrain"},
    {"llama3_70b_pretrain_32gpu_h100_bf16_16k", "llama3_70b_16k_pretrain"},
    {"llama3_70b_pretrain_256gpu_h100_bf16_64k", "llama3_70b_64k_pretrain"},
    {"llama3_70b_pretrain_32gpu_h100_bf16_deterministic", "llama3_70b_pretrain_deterministic"},
    {"llama3_70b_sft_32gpu_h100_bf16", "llama3_70b_sft"},
    {"llama3_70b_peft_8gpu_h100_bf16", "llama3_70b_lora"},
    {"llama31_8b_pretrain_2gpu_h100_bf16", "llama31_8b_pretrain"},
    {"llama31_8b_sft_2gpu_h100_bf16", "llama31_8b_sft"},
    {"llama31_8b_peft_1gpu_h100_bf16", "llama31_8b_lora"},
    {"llama31_70b_pretrain_32gpu_h100_bf16", "llama31_70b_pretrain"},
    {"llama31_70b_sft_32gpu_h100_bf16", "llama31_70b_sft"},
    {"llama31_70b_peft_8gpu_h100_bf16", "llama31_70b_lora"},
    {"llama31_405b_pretrain_256gpu_h100_bf16", "llama31_405b_pretrain"},
    {"llama31_405b_pretrain_256gpu_h100_bf16_deterministic", "llama31_405b_pretrain_deterministic"},
    {"llama31_405b_sft_128gpu_h100_bf16", "llama31_405b_sft"},
    {"llama31_405b_peft_32gpu_h100_bf16", "llama31_405b_lora"},
    {"qwen3_600m_pretrain_1gpu_h100_bf16", "qwen3_600m_pretrain"},
    {"qwen3_600m_sft_1gpu_h100_bf16", "qwen3_600m_sft"},
    {"qwen3_600m_peft_1gpu_h100_bf16", "qwen3_600m_lora"},
    {"qwen3_600m_sft_8gpu_h100_bf16_128k", "qwen3_600m_sft_128k"},
    {"qwen3_8b_pretrain_16gpu_h100_bf16", "qwen3_8b_pretrain"},
    {"qwen3_8b_pretrain_4gpu_h100_bf16", "qwen3_8b_4gpu_pretrain"},
    {"qwen3_8b_sft_8gpu_h100_bf16_32k", "qwen3_8b_sft_32k"},
    {"qwen3_8b_sft_4gpu_h100_bf16", "qwen3_8b_sft"},
    {"qwen3_8b_peft_1gpu_h100_bf16", "qwen3_8b_lora"},
    {"qwen3_30b_a3b_pretrain_16gpu_h100_bf16", "qwen3_30b_a3b_pretrain"},
    {"qwen3_30b_a3b_sft_16gpu_h100_bf16", "qwen3_30b_a3b_sft"},
    {"qwen3_30b_a3b_peft_4gpu_h100_bf16", "qwen3_30b_a3b_lora"},
    {"qwen3_30b_a3b_pretrain_8gpu_h100_bf16", "qwen3_30b_a3b_8gpu_pretrain"},
    {"qwen3_30b_a3b_sft_8gpu_h100_bf16", "qwen3_30b_a3b_8gpu_sft"},
    {"qwen3_235b_a22b_pretrain_256gpu_h100_bf16", "qwen3_235b_a22b_pretrain"},
    {"qwen3_235b_a22b_sft_64gpu_h100_bf16", "qwen3_235b_a22b_sft"},
    {"qwen3_235b_a22b_peft_16gpu_h100_bf16", "qwen3_235b_a22b_lora"},
    {"deepseek_v3_pretrain_1024gpu_h100_bf16", "deepseek_v3_pretrain"},
    {"deepseek_v3_pretrain_256gpu_h100_bf16_32nodes", "deepseek_v3_pretrain_32nodes"},
    /* Megatron-Bridge's short name for it puts _config before the variant. */
    {"deepseek_v3_pretrain_config_32nodes", "deepseek_v3_pretrain_32nodes"},
};

const tr_recipe *tr_recipe_find(const char *name) {
    if (!name) return NULL;
    char buf[256];
    if (strlen(name) >= sizeof buf - 8) return NULL;
    snprintf(buf, sizeof buf, "%s", name);
    if (ends_with(buf, "_config")) buf[strlen(buf) - strlen("_config")] = '\0';
    for (size_t i = 0; i < sizeof hardware_names / sizeof hardware_names[0]; i++)
        if (!strcmp(buf, hardware_names[i].megatron)) return find_exact(hardware_names[i].trestle);
    if (ends_with(buf, "_peft")) strcpy(buf + strlen(buf) - strlen("_peft"), "_lora");
    return find_exact(buf);
}

bool tr_recipe_is_low_precision(const char *name) {
    static const char *const marks[] = {"fp8", "fp4", "low_precision"};
    for (size_t i = 0; name && i < sizeof marks / sizeof marks[0]; i++)
        if (strstr(name, marks[i])) return true;
    return false;
}

static int min3(int a, int b, int c) {
    int m = a < b ? a : b;
    return m < c ? m : c;
}

/* Levenshtein distance, capped at 64-character inputs (longer names are not typos of ours). */
static int edit_distance(const char *a, const char *b) {
    int n = (int)strlen(a), m = (int)strlen(b);
    if (n > 64 || m > 64) return 1000;
    int prev[65], cur[65];
    for (int j = 0; j <= m; j++) prev[j] = j;
    for (int i = 1; i <= n; i++) {
        cur[0] = i;
        for (int j = 1; j <= m; j++)
            cur[j] = min3(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]));
        memcpy(prev, cur, sizeof(int) * (size_t)(m + 1));
    }
    return prev[m];
}

int tr_recipe_suggest(const char *name, const tr_recipe **out, int max) {
    if (!name || max <= 0) return 0;
    char key[128];
    snprintf(key, sizeof key, "%s", name);
    if (ends_with(key, "_config")) key[strlen(key) - strlen("_config")] = '\0';
    int n;
    const tr_recipe *r = tr_recipe_list(&n);
    int score[256];
    int count = 0;
    if (n > 256) n = 256;
    int limit = (int)strlen(key) / 3 > 2 ? (int)strlen(key) / 3 : 2;
    for (int i = 0; i < n; i++) {
        /* A model name without its task ("llama32_1b") suggests all of its recipes. */
        int s = strlen(key) >= 4 && strstr(r[i].name, key) ? 0 : edit_distance(key, r[i].name);
        score[i] = s <= limit ? s : -1;
    }
    /* Best first; ties keep catalog order. */
    for (int best = 0; best <= limit && count < max; best++)
        for (int i = 0; i < n && count < max; i++)
            if (score[i] == best) out[count++] = &r[i];
    return count;
}

tr_status tr_recipe_unknown(const char *name, const tr_origin *origin, tr_diags *d) {
    if (tr_recipe_is_low_precision(name)) {
        tr_diag_add(d, TR_SEV_ERROR, "recipe.low_precision", origin, "recipe",
                    "use the bf16 recipe of the same model (run_recipe --list-recipes), e.g. "
                    "llama3_8b_pretrain for llama3_8b_low_precision_pretrain",
                    "recipe '%s' is a Megatron-Bridge FP8/NVFP4 variant: Trestle trains in bf16, "
                    "fp16 or fp32 only (FP8 and FP4 are out of scope)",
                    name);
        return TR_ERR_NOTFOUND;
    }
    const tr_recipe *near[4];
    int n = tr_recipe_suggest(name, near, 4);
    char hint[512];
    size_t used = 0;
    if (n > 0) {
        used += (size_t)snprintf(hint, sizeof hint, "did you mean ");
        for (int i = 0; i < n && used < sizeof hint; i++)
            used += (size_t)snprintf(hint + used, sizeof hint - used, "%s%s",
                                     i ? (i == n - 1 ? " or " : ", ") : "", near[i]->name);
        if (used < sizeof hint)
            snprintf(hint + used, sizeof hint - used, "? (run_recipe --list-recipes lists all)");
    } else {
        snprintf(hint, sizeof hint, "run_recipe --list-recipes lists the recipes");
    }
    tr_diag_add(d, TR_SEV_ERROR, "recipe.unknown", origin, "recipe", hint, "unknown recipe '%s'",
                name);
    return TR_ERR_NOTFOUND;
}
