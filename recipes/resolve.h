/* The whole configuration pipeline in one call: recipe (or a YAML recipe with base_recipe)
 * < YAML files < CLI overrides, then finalize() and validate(). */
#ifndef TR_RECIPES_RESOLVE_H
#define TR_RECIPES_RESOLVE_H

#include "core/validate.h"
#include "recipes/registry.h"

typedef struct tr_resolve_opts {
    const char *recipe;                /* may be NULL when a config file names base_recipe */
    const char *const *config_files;   /* --config-file, in order */
    int n_config_files;
    const char *const *overrides;      /* KEY=VALUE tokens, in argv order */
    const int *override_argi;          /* argv index of each token, or NULL */
    int n_overrides;
    tr_world world;
    tr_validate_opts validate;
    bool skip_validate;                /* stop after finalize() (for --explain on bad configs) */
} tr_resolve_opts;

/* On success c is finalized and validated. On TR_ERR_CONFIG/TR_ERR_INVALID, d says why and c
 * holds whatever was resolved (or is zeroed when resolution could not start). The caller
 * always frees c with tr_config_free. */
tr_status tr_resolve(const tr_resolve_opts *opts, tr_config *c, tr_diags *d);

#endif
