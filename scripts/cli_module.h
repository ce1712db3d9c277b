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

#endif
