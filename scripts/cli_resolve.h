/* From a parsed command line to a resolved config: which world, which options, and how the
 * diagnostics are shown. Shared by the dry run and the real (MPI) run. */
#ifndef TR_CLI_RESOLVE_H
#define TR_CLI_RESOLVE_H

#include "recipes/resolve.h"
#include "scripts/cli_args.h"

/* The world to resolve for without MPI: --world-size / --gpus-per-node, else the launcher's
 * environment (mpirun, srun), else one rank. */
tr_world tr_cli_default_world(const tr_cli *cli);

/* The world inspection describes: as tr_cli_default_world, except that with no world from the
 * flags or a launcher a Megatron-Bridge hardware name gives its GPU count ("_2gpu_h100_"), as its
 * runner's dry run takes it, and --print-config / --explain take the recipe's smallest world,
 * as --describe-recipe does (a plain dry run checks one rank by default). */
tr_world tr_cli_inspect_world(const tr_cli *cli);

/* Every --config-file must be readable: a missing file is a usage error, not an I/O failure. */
void tr_cli_check_files(const tr_cli *cli, tr_diags *d);

/* Resolve recipe < files < overrides for world w. real_run: check that launch files exist. */
tr_status tr_cli_resolve(const tr_cli *cli, tr_world w, bool real_run, bool skip_validate,
                         tr_config *c, tr_diags *d);

/* Diagnostics as text on stderr or as JSON on stdout. */
void tr_cli_print_diags(const tr_cli *cli, const tr_diags *d);

/* Exit code of a status: 0, 2 for anything the user can fix, 1 for the rest. */
int tr_cli_exit_code(tr_status s, const tr_diags *d);

#endif
