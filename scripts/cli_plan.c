/* See scripts/cli_plan.h. */
#include "scripts/cli_plan.h"

#include <stdio.h>
#include <string.h>

#include "runtime/plan/plan.h"
#include "scripts/cli_module.h"
#include "scripts/cli_resolve.h"

static const tr_plan_gpu *gpu_of(const tr_cli *cli, tr_diags *d) {
    const char *name = cli->gpu ? cli->gpu : "h100-80gb";
    const tr_plan_gpu *g = tr_plan_gpu_find(name);
    if (!g)
        tr_diag_add(d, TR_SEV_ERROR, "cli.bad_value", NULL, NULL,
                    "use one of h100-80gb, h200-141gb, a100-80gb, b200, cpu",
                    "--gpu: unknown device '%s'", name);
    return g;
}

/* The world of the plan: --world-size, with the device's node size unless --gpus-per-node. */
static tr_world world_of(const tr_cli *cli, const tr_plan_gpu *g) {
    tr_world w = tr_cli_default_world(cli);
    if (!cli->gpus_per_node)
        w.gpus_per_node = w.world_size < g->gpus_per_node ? w.world_size : g->gpus_per_node;
    return w;
}

/* A config whose only errors are the runtime's capability refusals (runtime.*: what it does not
 * build yet) is planned anyway, predicted only: those errors become notes, their ids go in
 * refused_by, and a "plan.model_refused" warning says the launch would stop. */
static bool refused_only(tr_diags *d, char *ids, size_t n) {
    if (d->n_errors == 0) return false;
    for (int i = 0; i < d->n; i++)
        if (d->items[i].severity == TR_SEV_ERROR && strncmp(d->items[i].id, "runtime.", 8) != 0)
            return false;
    size_t at = 0;
    ids[0] = 0;
    for (int i = 0; i < d->n; i++) {
        if (d->items[i].severity != TR_SEV_ERROR) continue;
        d->items[i].severity = TR_SEV_NOTE;
        d->n_errors--;
        int w = snprintf(ids + at, n - at, "%s%s", at ? "," : "", d->items[i].id);
        if (w > 0 && (size_t)w < n - at) at += (size_t)w;
    }
    tr_diag_add(d, TR_SEV_WARNING, "plan.model_refused", NULL, NULL,
                "the plan is predicted only; see the refusing rules above",
                "the runtime refuses this configuration (%s): a launch would stop", ids);
    return true;
}

tr_status tr_cli_plan(const tr_cli *cli, tr_diags *d) {
    const tr_plan_gpu *g = gpu_of(cli, d);
    if (!g) return TR_ERR_INVALID;
    tr_config c;
    tr_status s = tr_cli_resolve(cli, world_of(cli, g), false, false, &c, d);
    tr_plan p;
    char refused[256] = "";
    /* tr_cli_resolve reports validation errors as TR_ERR_CONFIG on a finalized config */
    bool predicted = s == TR_ERR_CONFIG && refused_only(d, refused, sizeof refused);
    if (predicted) s = TR_OK;
    if (s == TR_OK && d->n_errors == 0) s = tr_plan_make(&c, g, &p, d);
    if (s != TR_OK && d->n_errors == 0)
        tr_diag_add(d, TR_SEV_ERROR, "plan.failed", NULL, NULL, NULL,
                    "the planner cannot size this configuration (%s)", tr_status_name(s));
    if (s == TR_OK && d->n_errors == 0) {
        p.predicted_only = predicted;
        snprintf(p.refused_by, sizeof p.refused_by, "%s", refused);
        if (cli->json)
            tr_plan_print_json(stdout, &p);
        else
            tr_plan_print(stdout, &c, &p);
    }
    if (s == TR_OK && d->n_errors) s = TR_ERR_CONFIG;
    tr_config_free(&c);
    return s;
}

tr_status tr_cli_search_layouts(const tr_cli *cli, tr_diags *d) {
    const tr_plan_gpu *g = gpu_of(cli, d);
    if (!g) return TR_ERR_INVALID;
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = cli->recipe;
    o.config_files = cli->config_files;
    o.n_config_files = cli->n_config_files;
    o.overrides = (const char *const *)cli->overrides;
    o.override_argi = cli->override_argi;
    o.n_overrides = cli->n_overrides;
    o.world = world_of(cli, g);
    tr_config base;
    memset(&base, 0, sizeof base);
    tr_status s = tr_resolve_inputs(&o, &base, d);
    tr_plan_search sr = {0};
    if (s == TR_OK && d->n_errors == 0)
        s = tr_plan_search_layouts(&base, o.world, g, cli->top > 0 ? cli->top : 5, &sr, d);
    if (s == TR_OK && d->n_errors == 0) {
        if (!cli->json)
            printf("search for %s on %d x %s (%d per node)\n",
                   base.recipe_name ? base.recipe_name : "(config)", o.world.world_size, g->name,
                   o.world.gpus_per_node);
        tr_plan_search_print(stdout, &sr, cli->json);
    }
    tr_plan_search_free(&sr);
    if (s == TR_OK && d->n_errors) s = TR_ERR_CONFIG;
    tr_config_free(&base);
    return s;
}

/* The module's entry for the planner (scripts/cli_module.h). */
tr_status tr_cli_plan_entry(const tr_cli *cli, tr_diags *d);
tr_status tr_cli_plan_entry(const tr_cli *cli, tr_diags *d) {
    return cli->search_layouts ? tr_cli_search_layouts(cli, d) : tr_cli_plan(cli, d);
}
