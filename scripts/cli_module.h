/* The launch half of run_recipe lives in a module (trestle_launch.so, next to the executable)
 * that holds the training runtime and with it OpenBLAS, MPI and, in the CUDA build, libcudart,
 * cuBLASLt and NCCL. run_recipe itself links only the config stack, so inspection (--dry-run,
 * --print-config, --explain, --validate-all, --version) maps none of those libraries; a launch
 * opens the module and calls its entry. */
#ifndef TR_CLI_MODULE_H
#define TR_CLI_MODULE_H

#include "scripts/cli_args.h"

/* The entry the module exports under this name (scripts/cli_launch.c). */
#define TR_CLI_LAUNCH_ENTRY "tr_cli_launch_entry"
typedef int (*tr_cli_launch_fn)(const tr_cli *cli, int *argc, char ***argv);

/* Opens the module and runs the launch; returns its exit code, or 1 (with a message on stderr
 * naming the file and the loader's reason) when the module cannot be opened. TRESTLE_LAUNCH_MODULE
 * in the environment names another module file (tests, relocated installs). */
int tr_cli_launch_module(const tr_cli *cli, int *argc, char ***argv);

/* --plan and --search-layouts size every buffer with the runtime's own sizing code, which lives
 * in the module with the rest of the runtime: they open it too (scripts/cli_plan.c). */
#define TR_CLI_PLAN_ENTRY "tr_cli_plan_entry"
typedef tr_status (*tr_cli_plan_fn)(const tr_cli *cli, tr_diags *d);

/* Opens the module and runs the plan or the search there; a module that cannot be opened is
 * diagnostic cli.launch_module (TR_ERR_IO). */
tr_status tr_cli_plan_module(const tr_cli *cli, tr_diags *d);

#endif
