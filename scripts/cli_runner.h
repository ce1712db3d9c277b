/* Megatron-Bridge's runner selection on run_recipe's command line: --model STEM with --mode,
 * the mode read from a recipe name, the --dataset presets, --deterministic and --dump-env
 * (the flags of its scripts/training/run_recipe.py; docs/cli.md). */
#ifndef TR_CLI_RUNNER_H
#define TR_CLI_RUNNER_H

#include <stdbool.h>
#include <stdio.h>

#include "core/config.h"
#include "scripts/cli_args.h"

/* After parsing: compose the recipe of --model and --mode, infer --mode from a recipe name,
 * and refuse a mode the name contradicts or a dataset preset the mode cannot train on. */
tr_status tr_cli_runner_select(tr_cli *cli, tr_diags *d);

/* Between the recipe and the YAML files, as Megatron-Bridge applies them before overrides:
 * the recipe's mode against --mode (and peft.scheme for --mode dora/lora), the --dataset
 * preset, --deterministic. */
tr_status tr_cli_runner_apply(tr_config *c, const tr_cli *cli, tr_diags *d);

/* After resolution: what a preset leaves to the user (megatron-indexed needs a blend). An
 * error when inputs is true (a launch, --check-inputs), a note otherwise. */
void tr_cli_runner_check(const tr_cli *cli, const tr_config *c, bool inputs, tr_diags *d);

/* --dump-env: the environment, secrets redacted, from the launcher's rank 0 only. */
void tr_cli_dump_env(FILE *out);

#endif
