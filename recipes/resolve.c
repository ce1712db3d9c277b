/* tr_resolve: defaults -> recipe (registry or YAML) -> snapshot for `~key` -> YAML overlays ->
 * CLI overrides -> finalize() -> validate(). Input errors are all collected before stopping, so
 * one run reports every bad key, and finalize/validate only ever see well-typed input. */
#include "recipes/resolve.h"

#include <stdio.h>
#include <string.h>

#include "overrides/overrides.h"

static bool fatal(tr_status s) {
    return s == TR_ERR_NOMEM || s == TR_ERR_INTERNAL || s == TR_ERR_IO;
}

tr_status tr_resolve_inputs(const tr_resolve_opts *o, tr_config *c, tr_diags *d) {
    memset(c, 0, sizeof *c);
    TR_TRY(tr_config_init(c, d));
    int errors_before = d->n_errors;
    tr_status s = TR_OK;

    const tr_recipe *recipe = NULL;
    int first_overlay = 0;
    if (o->recipe) {
        recipe = tr_recipe_find(o->recipe);
        if (!recipe) return tr_recipe_unknown(o->recipe, NULL, d);
        TR_TRY(recipe->fill(c, d));
    } else if (o->n_config_files > 0) {
        s = tr_yaml_recipe_apply(c, o->config_files[0], false, NULL, &recipe, d);
        if (fatal(s)) return s;
        first_overlay = 1;
    } else {
        tr_diag_add(d, TR_SEV_ERROR, "resolve.no_recipe", NULL, "recipe",
                    "pass --recipe NAME (run_recipe --list-recipes), or a --config-file that "
                    "names base_recipe",
                    "no recipe to start from");
        return TR_ERR_INVALID;
    }
    if (o->after_recipe) {
        s = o->after_recipe(c, o->after_recipe_ctx, d);
        if (s != TR_OK) return s;
    }
    TR_TRY(tr_config_snapshot_recipe(c));

    for (int i = first_overlay; i < o->n_config_files; i++) {
        s = tr_yaml_recipe_apply(c, o->config_files[i], true, recipe, NULL, d);
        if (fatal(s)) return s;
    }
    if (o->n_overrides > 0) {
        s = tr_overrides_apply_argv(c, o->overrides, o->override_argi, o->n_overrides, d);
        if (fatal(s)) return s;
    }
    return d->n_errors > errors_before ? TR_ERR_INVALID : TR_OK;
}

tr_status tr_resolve_finish(const tr_resolve_opts *o, tr_config *c, tr_diags *d) {
    if (o->world.world_size < 1 || o->world.gpus_per_node < 1) {
        tr_diag_add(d, TR_SEV_ERROR, "resolve.world", NULL, "derived.world_size",
                    "give --world-size and --gpus-per-node values of at least 1",
                    "world size %d with %d GPUs per node is not a cluster", o->world.world_size,
                    o->world.gpus_per_node);
        return TR_ERR_INVALID;
    }
    TR_TRY(tr_config_finalize(c, &o->world, d));
    if (o->skip_validate) return TR_OK;
    return tr_config_validate(c, &o->validate, d);
}

tr_status tr_resolve(const tr_resolve_opts *o, tr_config *c, tr_diags *d) {
    TR_TRY(tr_resolve_inputs(o, c, d));
    return tr_resolve_finish(o, c, d);
}
