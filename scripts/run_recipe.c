/* run_recipe: resolve a recipe with YAML files and overrides, validate it, and inspect it
 * (--dry-run, --print-config, --explain, ...) or run it under MPI. The only place that turns
 * statuses into exit codes: 0 ok, 1 internal or I/O failure, 2 configuration or usage error,
 * 4 loss became NaN/Inf, 128+N a clean stop on signal N (docs/cli.md). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "overrides/overrides.h"
#include "runtime/pipeline/pipeline.h"
#include "scripts/cli_args.h"
#include "scripts/cli_catalog.h"
#include "scripts/cli_module.h"
#include "scripts/cli_report.h"
#include "scripts/cli_resolve.h"
#include "scripts/cli_runner.h"
#include "scripts/cli_samples.h"

#ifndef TRESTLE_VERSION
#define TRESTLE_VERSION "unknown"
#endif

/* Reports go to stdout unless stdout is reserved for a machine-read document (JSON
 * diagnostics or the YAML of --print-config). */
static FILE *report_stream(const tr_cli *cli) {
    return cli->diag_format == TR_CLI_DIAG_JSON || cli->print_config ? stderr : stdout;
}

static void print_dry_run(const tr_cli *cli, const tr_config *c, tr_diags *d) {
    FILE *out = report_stream(cli);
    const char *recipe = c->recipe_name ? c->recipe_name : cli->recipe ? cli->recipe : "(none)";
    fprintf(out, "recipe %s (%s), world %" PRId64 " with %" PRId64 " per node\n", recipe,
            tr_enum_train_mode.values[c->derived.mode].name, c->derived.world_size,
            c->derived.gpus_per_node);
    if (tr_cli_print_layout(out, c, cli->print_groups, d) != TR_OK) return;
    /* Every pipeline rank's send/receive order must pair up and be free of deadlock before
     * anything runs; a dry run proves it for the cluster it describes. */
    if (cli->print_schedule) {
        if (tr_pp_schedule_print(out, c, -1, false, d) != TR_OK) return;
    } else if (tr_pp_schedule_check_all(c, d) != TR_OK) {
        return;
    }
    tr_cli_print_derived(out, c);
    fprintf(out, "fingerprint %016" PRIx64 "\n", tr_config_fingerprint(c));
    fprintf(out, "dry run: configuration valid (%d warning%s); nothing trained\n", d->n_warnings,
            d->n_warnings == 1 ? "" : "s");
}

/* --dry-run, --print-config and --explain on one resolved config. */
static tr_status inspect(const tr_cli *cli, tr_diags *d) {
    tr_cli_check_files(cli, d);
    if (d->n_errors) return TR_ERR_INVALID;
    tr_config c;
    tr_status s = tr_cli_resolve(cli, tr_cli_inspect_world(cli), false, false, &c, d);
    /* Explaining is most useful exactly when validation failed, so it runs whenever the
     * resolution got far enough to have a config. */
    if (c.n_history > 0)
        for (int i = 0; i < cli->n_explain; i++) {
            tr_status e = tr_config_explain(&c, cli->explain[i], report_stream(cli), d);
            if (s == TR_OK && e != TR_OK) s = e;
        }
    if (s == TR_OK && cli->print_config) s = tr_config_dump_yaml(&c, stdout);
    if (s == TR_OK && cli->dry_run) print_dry_run(cli, &c, d);
    if (s == TR_OK && d->n_errors) s = TR_ERR_CONFIG;
    tr_config_free(&c);
    return s;
}

static tr_status dispatch(tr_cli *cli, int *argc, char ***argv, tr_diags *d, int *code) {
    tr_world w = tr_cli_default_world(cli);
    if (cli->help) {
        tr_cli_usage(stdout);
        return TR_OK;
    }
    if (cli->version) {
        printf("run_recipe (Trestle) %s\n", TRESTLE_VERSION);
        return TR_OK;
    }
    if (cli->dump_env) tr_cli_dump_env(stderr);
    if (cli->help_config) return tr_cli_help_config(stdout, cli->help_config_topic, d);
    if (cli->list_recipes) return tr_cli_list_recipes(stdout);
    if (cli->describe_recipe)
        return tr_cli_describe_recipe(stdout, cli->describe_recipe, cli->world_size ? &w : NULL, d);
    if (cli->validate_all) return tr_cli_validate_all(cli, d);
    if ((cli->plan || cli->search_layouts) && cli->json && cli->diag_format == TR_CLI_DIAG_JSON) {
        tr_diag_add(d, TR_SEV_ERROR, "cli.conflict", NULL, NULL,
                    "drop one: both want stdout to themselves",
                    "--json and --diagnostics-format json cannot be combined");
        return TR_ERR_INVALID;
    }
    if ((cli->search_layouts || cli->plan) && (cli->recipe || cli->n_config_files))
        return tr_cli_plan_module(cli, d);
    if (cli->dump_samples > 0) {
        tr_cli_check_files(cli, d);
        return d->n_errors ? TR_ERR_INVALID : tr_cli_dump_samples(cli, cli->dump_samples, d);
    }
    if (!cli->recipe && cli->n_config_files == 0) {
        tr_diag_add(d, TR_SEV_ERROR, "cli.no_recipe", NULL, NULL,
                    "name one with --recipe NAME (run_recipe --list-recipes shows them) or give a "
                    "YAML file whose base_recipe names one with --config-file",
                    "no recipe given");
        return TR_ERR_INVALID;
    }
    if (cli->print_config && cli->diag_format == TR_CLI_DIAG_JSON) {
        tr_diag_add(d, TR_SEV_ERROR, "cli.conflict", NULL, NULL,
                    "drop one: both want stdout to themselves",
                    "--print-config and --diagnostics-format json cannot be combined");
        return TR_ERR_INVALID;
    }
    if (!tr_cli_is_inspection(cli)) {
        /* Only a launch loads the runtime (MPI, OpenBLAS, CUDA): inspection stays a small
         * process that maps none of them. */
        *code = tr_cli_launch_module(cli, argc, argv);
        return TR_OK;
    }
    return inspect(cli, d);
}

int main(int argc, char **argv) {
    tr_cli cli;
    tr_diags d;
    tr_diags_init(&d);
    tr_status s = tr_cli_parse(argc, argv, &cli, &d);
    int code = -1;
    if (s == TR_OK && d.n_errors == 0) s = dispatch(&cli, &argc, &argv, &d, &code);
    if (code < 0) {
        /* JSON mode always prints one document, so a scheduler can parse every outcome. */
        if (d.n > 0 || cli.diag_format == TR_CLI_DIAG_JSON) tr_cli_print_diags(&cli, &d);
        code = tr_cli_exit_code(s, &d);
        if (code == 1 && d.n_errors == 0)
            fprintf(stderr, "run_recipe: internal failure: %s\n", tr_status_name(s));
    }
    tr_cli_free(&cli);
    tr_diags_free(&d);
    return code;
}
