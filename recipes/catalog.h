/* Catalog validation (run_recipe --validate-all): every registry recipe, and any YAML recipe
 * files given, resolved and validated at its minimum world size and at each requested world
 * size its layout fits. */
#ifndef TR_RECIPES_CATALOG_H
#define TR_RECIPES_CATALOG_H

#include <stdio.h>

#include "core/status.h"
#include "recipes/registry.h"

typedef struct tr_catalog_opts {
    const int *world_sizes; /* extra sizes to check (e.g. 8, 16, ..., 16384); may be NULL */
    int n_world_sizes;
    const char *const *yaml_recipes; /* YAML recipe files (each needs base_recipe or is a dump) */
    int n_yaml_recipes;
    int gpus_per_node;  /* 0 means 8 */
    FILE *failures;     /* one line per failure: "<recipe> @ world N: <rule id>: <message>" */
    FILE *requirements; /* one line per launch input a recipe needs, and per capability rule
                         * (runtime.*) that refuses it (NULL: not printed) */
} tr_catalog_opts;

typedef struct tr_catalog_result {
    int recipes;      /* recipes checked */
    int checks;       /* (recipe, world size) pairs resolved and validated */
    int skipped;      /* pairs whose layout does not fit the world size */
    int failures;     /* errors, counted per diagnostic */
    int requirements; /* distinct (recipe, launch.* id) pairs */
    int refusals;     /* distinct (recipe, runtime.* id) pairs: valid, not trainable here */
} tr_catalog_result;

/* Capability refusals (runtime.* rules: valid configurations the training runtime cannot run
 * yet) are counted apart and are not failures. Returns the number of failures (>= 0), or -1 when
 * the check itself could not run (out of memory). A world size W is checked when PP * lcm(TP*CP,
 * EP*ETP) divides W and the global batch divides into micro_batch_size * DP; otherwise it is
 * skipped, not failed. */
int tr_catalog_validate(const tr_catalog_opts *opts, tr_catalog_result *result);

/* The capability rules (runtime.*) that refuse recipe r at its minimum world size, as
 * "runtime.a, runtime.b" in buf. Returns how many (0: the runtime trains it), -1 out of
 * memory. */
int tr_catalog_refusals(const tr_recipe *r, char *buf, size_t cap);

/* The catalog as a Markdown table; whether a recipe trains on this runtime comes from the
 * capability rules (docs/recipes.md embeds it; a test keeps them equal). */
void tr_catalog_markdown(FILE *out);

#endif
