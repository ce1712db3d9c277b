/* The whole configuration pipeline in one call: recipe (or a YAML recipe with base_recipe)
 * < YAML files < CLI overrides, then finalize() and validate(). */
#ifndef TR_RECIPES_RESOLVE_H
#define TR_RECIPES_RESOLVE_H

#include "core/validate.h"
#include "recipes/registry.h"

typedef struct tr_resolve_opts {
    const char *recipe;              /* may be NULL when a config file names base_recipe */
    const char *const *config_files; /* --config-file, in order */
    int n_config_files;
    const char *const *overrides; /* KEY=VALUE tokens, in argv order */
    const int *override_argi;     /* argv index of each token, or NULL */
    int n_overrides;
    tr_world world;
    tr_validate_opts validate;
    bool skip_validate; /* stop after finalize() (for --explain on bad configs) */
    /* A caller's step between the recipe and the YAML files, or NULL: run_recipe's --hf-model
     * takes the model section from a Hugging Face config.json there, so files and overrides
     * still win over it and `~key` returns to its values. */
    tr_status (*after_recipe)(tr_config *c, void *ctx, tr_diags *d);
    void *after_recipe_ctx;
} tr_resolve_opts;

/* On success c is finalized and validated. On TR_ERR_CONFIG/TR_ERR_INVALID, d says why and c
 * holds whatever was resolved (or is zeroed when resolution could not start). The caller
 * always frees c with tr_config_free.
 *
 * Where the recipe comes from:
 *   --recipe NAME             the registry recipe; every config file is an overlay, and a
 *                             base_recipe in one must name the same recipe (else an error).
 *   no --recipe               the first config file is the recipe: its base_recipe chain (a
 *                             registry recipe or YAML files), then its keys; a file without
 *                             base_recipe (such as a dump) applies over the table defaults.
 *   neither                   error resolve.no_recipe.
 * `~key` restores the value the recipe (including a first-file YAML recipe) gave. */
tr_status tr_resolve(const tr_resolve_opts *opts, tr_config *c, tr_diags *d);

/* tr_resolve in two halves, so a caller checking many world sizes (the catalog) resolves the
 * inputs once: _inputs stops before finalize(); _finish finalizes for opts->world and
 * validates unless opts->skip_validate. */
tr_status tr_resolve_inputs(const tr_resolve_opts *opts, tr_config *c, tr_diags *d);
tr_status tr_resolve_finish(const tr_resolve_opts *opts, tr_config *c, tr_diags *d);

/* YAML recipes (recipes/yaml_recipe.c): apply file `path` to c, its base_recipe chain first.
 * A base is a registry recipe name, or a YAML file (a name ending in .yaml/.yml or containing
 * '/') relative to the file naming it. `fixed_base` says a recipe is already in effect (from
 * --recipe or an earlier file; `applied` is it, or NULL for table defaults): a registry base
 * must then be that same recipe and is not applied again. Otherwise the registry recipe at the
 * root of the chain is applied and returned in *root (NULL when the chain has none). */
tr_status tr_yaml_recipe_apply(tr_config *c, const char *path, bool fixed_base,
                               const tr_recipe *applied, const tr_recipe **root, tr_diags *d);

#endif
