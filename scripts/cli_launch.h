/* A real run of run_recipe under MPI (a 1-rank singleton, or N ranks under mpirun). */
#ifndef TR_CLI_LAUNCH_H
#define TR_CLI_LAUNCH_H

#include "core/config.h"
#include "scripts/cli_args.h"

/* Initialises MPI, resolves the config on every rank, writes config.yaml and fingerprint.txt
 * to the output directory, builds the process groups and then stops: the training runtime does
 * not exist yet, so a valid config ends with exit code 3. A config the world cannot use ends
 * every rank with exit code 2 and one report from rank 0. Returns the exit code. */
int tr_cli_launch(const tr_cli *cli, int *argc, char ***argv);

/* Where a run writes its outputs: logger.output_dir, else checkpoint.save, else
 * ./outputs/<recipe>. Writes into buf. */
void tr_cli_output_dir(const tr_config *c, const char *recipe, char *buf, size_t cap);

#endif
