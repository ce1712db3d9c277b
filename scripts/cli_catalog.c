/* See scripts/cli_catalog.h. */
#include "scripts/cli_catalog.h"

#include <stdlib.h>
#include <string.h>

#include "recipes/catalog.h"

/* "<recipe> @ world N: <rule id>: <message>" -> one error diagnostic under the rule's id. */
static void failure_lines_to_diags(const char *text, tr_diags *d) {
    while (text && *text) {
        const char *end = strchr(text, '\n');
        size_t len = end ? (size_t)(end - text) : strlen(text);
        char line[2048], id[128] = "catalog.failure";
        snprintf(line, sizeof line, "%.*s", (int)len, text);
        const char *colon = strstr(line, ": ");
        const char *next = colon ? strstr(colon + 2, ": ") : NULL;
        if (next && next - (colon + 2) < (int)sizeof id)
            snprintf(id, sizeof id, "%.*s", (int)(next - (colon + 2)), colon + 2);
        if (len > 0)
            tr_diag_add(d, TR_SEV_ERROR, id, NULL, NULL,
                        "rerun that recipe with --dry-run --world-size N for the full diagnostics",
                        "%s", line);
        text = end ? end + 1 : NULL;
    }
}

tr_status tr_cli_validate_all(const tr_cli *cli, tr_diags *d) {
    bool json = cli->diag_format == TR_CLI_DIAG_JSON;
    FILE *report = json ? stderr : stdout;
    char *failures = NULL;
    size_t failures_len = 0;
    FILE *failures_mem = json ? open_memstream(&failures, &failures_len) : NULL;
    if (json && !failures_mem) return TR_ERR_NOMEM;

    tr_catalog_opts o;
    memset(&o, 0, sizeof o);
    o.world_sizes = cli->world_sizes;
    o.n_world_sizes = cli->n_world_sizes;
    o.yaml_recipes = cli->validate_files;
    o.n_yaml_recipes = cli->n_validate_files;
    o.gpus_per_node = cli->gpus_per_node;
    o.failures = json ? failures_mem : stderr;
    o.requirements = report;
    tr_catalog_result r;
    memset(&r, 0, sizeof r);
    int n = tr_catalog_validate(&o, &r);
    if (failures_mem) fclose(failures_mem);
    if (json) failure_lines_to_diags(failures, d);
    free(failures);
    if (n < 0) return TR_ERR_NOMEM;
    fprintf(report,
            "catalog: %d recipes, %d (recipe, world size) checks, %d skipped (layout does not "
            "fit), %d failures, %d launch requirements, %d refusals by the runtime\n",
            r.recipes, r.checks, r.skipped, r.failures, r.requirements, r.refusals);
    if (n > 0 && !json)
        tr_diag_add(d, TR_SEV_ERROR, "catalog.failures", NULL, NULL,
                    "each failure above names the recipe, the world size and the rule",
                    "%d catalog check%s failed", n, n == 1 ? "" : "s");
    return TR_OK;
}
