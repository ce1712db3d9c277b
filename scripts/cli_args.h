/* run_recipe's command line: flags, the runner's convenience flags turned into overrides, and
 * trailing KEY=VALUE overrides, parsed into one plain struct. Problems are diagnostics (ids
 * "cli.*") naming argv[i], so that every mistake on one command line is reported at once. */
#ifndef TR_CLI_ARGS_H
#define TR_CLI_ARGS_H

#include <stdbool.h>
#include <stdio.h>

#include "core/diag.h"

typedef enum tr_cli_diag_format { TR_CLI_DIAG_TEXT = 0, TR_CLI_DIAG_JSON } tr_cli_diag_format;

typedef struct tr_cli {
    const char *recipe;
    const char *hf_model;      /* --hf-model DIR: a Hugging Face model directory */
    const char **config_files; /* --config-file, in order */
    int n_config_files;
    /* Convenience flags first (as overrides), then trailing overrides, in argv order, so a
     * trailing key=value wins over the flag that sets the same key. Owned strings. */
    char **overrides;
    int *override_argi;
    int n_overrides;

    bool dry_run, print_config, print_groups, print_schedule, list_recipes, strict, version, help;
    bool config_only; /* --config-only: a dry run without the capability rules */
    const char *describe_recipe;
    bool help_config;
    const char *help_config_topic; /* a section, a dotted key, or NULL for the list of sections */
    const char **explain;          /* --explain KEY, repeatable */
    int n_explain;
    int world_size, gpus_per_node; /* 0: not given */
    bool validate_all;
    int *world_sizes; /* --world-sizes 8,16,... */
    int n_world_sizes;
    const char **validate_files; /* positional *.yaml with --validate-all */
    int n_validate_files;
    tr_cli_diag_format diag_format;
    bool plan, search_layouts, json; /* --plan, --search-layouts, --json (docs/plan.md) */
    const char *gpu;                 /* --gpu KIND; NULL: h100-80gb */
    int top;                         /* --top K; 0: 5 */

    /* Megatron-Bridge's runner selection (scripts/cli_runner.c): --model STEM with --mode
     * composes the recipe name; --mode is otherwise read from the recipe name. */
    const char *model;   /* --model STEM */
    const char *mode;    /* --mode pretrain|sft|lora|dora, or inferred; NULL when unknown */
    const char *dataset; /* --dataset PRESET */
    bool deterministic, dump_env;
    bool check_inputs;  /* --check-inputs: with --dry-run, check what only a launch supplies */
    int dump_samples;   /* --dump-samples N: print the first N training samples and exit */
    char *recipe_owned; /* the name --model composed (cli->recipe points here) */
    int model_argi, mode_argi, dataset_argi, deterministic_argi; /* where those flags were */
} tr_cli;

/* Parses argv (argv[0] is the program). Returns TR_OK with diagnostics in d when the command
 * line is wrong (the caller checks d->n_errors), TR_ERR_NOMEM on allocation failure. */
tr_status tr_cli_parse(int argc, char **argv, tr_cli *cli, tr_diags *d);
void tr_cli_free(tr_cli *cli);

/* True when the command only inspects (prints, explains, lists) and must not start a run. */
bool tr_cli_is_inspection(const tr_cli *cli);

void tr_cli_usage(FILE *out);

#endif
