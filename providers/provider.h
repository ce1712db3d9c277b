/* Model providers: a function per architecture that fills the model section (and nothing else)
 * with the family's layer structure, its public dimensions and the Megatron defaults the family
 * relies on. Recipes start from a provider and then choose parallelism, batch and optimizer. */
#ifndef TR_PROVIDERS_PROVIDER_H
#define TR_PROVIDERS_PROVIDER_H

#include "core/config.h"

typedef struct tr_provider {
    const char *name;   /* "llama32_1b" */
    const char *source; /* where the dimensions come from (model card / HF config) */
    /* Write the model fields of c directly; the caller records the changes. */
    tr_status (*fill)(tr_config *c);
} tr_provider;

/* All providers, in catalog order. */
const tr_provider *tr_provider_list(int *n);
const tr_provider *tr_provider_find(const char *name);

/* Fill c's model section with p and record every changed field with origin "provider <name>",
 * so --explain tells provider values from recipe values. */
tr_status tr_provider_apply(tr_config *c, const tr_provider *p);
/* Same, by name; TR_ERR_NOTFOUND for an unknown provider (a programming error in a recipe). */
tr_status tr_provider_apply_named(tr_config *c, const char *name);

/* Family fill functions (providers/<family>.c). */
tr_status tr_provide_gpt(tr_config *c);
tr_status tr_provide_gpt2_124m(tr_config *c);
tr_status tr_provide_gpt3_175b(tr_config *c);

tr_status tr_provide_llama2_7b(tr_config *c);
tr_status tr_provide_llama2_13b(tr_config *c);
tr_status tr_provide_llama2_70b(tr_config *c);
tr_status tr_provide_llama3_8b(tr_config *c);
tr_status tr_provide_llama3_70b(tr_config *c);
tr_status tr_provide_llama31_8b(tr_config *c);
tr_status tr_provide_llama31_70b(tr_config *c);
tr_status tr_provide_llama31_405b(tr_config *c);
tr_status tr_provide_llama32_1b(tr_config *c);
tr_status tr_provide_llama32_3b(tr_config *c);

tr_status tr_provide_qwen3_600m(tr_config *c);
tr_status tr_provide_qwen3_8b(tr_config *c);
tr_status tr_provide_qwen3_30b_a3b(tr_config *c);
tr_status tr_provide_qwen3_235b_a22b(tr_config *c);

tr_status tr_provide_mixtral_8x7b(tr_config *c);
tr_status tr_provide_mixtral_8x22b(tr_config *c);

tr_status tr_provide_deepseek_v3(tr_config *c);
tr_status tr_provide_kimi_k2(tr_config *c);

tr_status tr_provide_gpt_tiny(tr_config *c);
tr_status tr_provide_llama_tiny(tr_config *c);
tr_status tr_provide_moe_tiny(tr_config *c);
tr_status tr_provide_mixtral_tiny(tr_config *c);
tr_status tr_provide_qwen3_moe_tiny(tr_config *c);
tr_status tr_provide_deepseek_tiny(tr_config *c);

#endif
