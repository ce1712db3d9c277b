/* Named recipes: a function per recipe that fills a ConfigContainer, and the registry that
 * maps names to them. */
#ifndef TR_RECIPES_REGISTRY_H
#define TR_RECIPES_REGISTRY_H

#include <stdbool.h>

#include "core/config.h"
#include "core/diag.h"

typedef struct tr_recipe {
    const char *name;   /* "llama32_1b_pretrain" */
    const char *doc;    /* one line */
    int mode;           /* tr_train_mode_t: pretrain / sft / lora / dora */
    int min_world_size; /* PP * lcm(TP*CP, EP*ETP) of the recipe's layout (a test checks it) */
    /* KEY=VALUE overrides a catalog check must add (NULL-terminated; NULL for none): recipes
     * that, like Megatron-Bridge's vanilla_gpt, leave the model size to the user. */
    const char *const *catalog_overrides;
    /* Fill c (already initialised with table defaults) as the recipe prescribes. */
    tr_status (*fill)(tr_config *c, tr_diags *d);
} tr_recipe;

/* Trestle names ("llama32_1b_lora") and Megatron-Bridge spellings: a trailing "_config",
 * "_peft" for "_lora", and the hardware-specific library name each Megatron-Bridge short name
 * aliases ("llama3_8b_pretrain_2gpu_h100_bf16_config"). */
const tr_recipe *tr_recipe_find(const char *name);
/* A Megatron-Bridge FP8/NVFP4 recipe name (fp8cs, fp8mx, nvfp4, "low_precision"): refused with
 * its own diagnostic (recipe.low_precision), since Trestle has no FP8 or FP4 training. */
bool tr_recipe_is_low_precision(const char *name);
/* All recipes, in catalog order. */
const tr_recipe *tr_recipe_list(int *n);
/* Closest recipe names to a mistyped one (did-you-mean). */
int tr_recipe_suggest(const char *name, const tr_recipe **out, int max);
/* The did-you-mean diagnostic for an unknown recipe name (id recipe.unknown). */
tr_status tr_recipe_unknown(const char *name, const tr_origin *origin, tr_diags *d);

#endif
