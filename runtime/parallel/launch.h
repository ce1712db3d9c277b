/* Helpers for main() of an MPI program: the only runtime code allowed to end the process.
 * Library code returns tr_status; these turn a status into an orderly exit of every rank. */
#ifndef TR_LAUNCH_H
#define TR_LAUNCH_H

#include <mpi.h>

#include "core/diag.h"

/* For a failure every rank reached identically (a layout the world cannot hold): rank 0 of
 * `world` prints the diagnostics to stderr once, every rank finalizes MPI and exits with
 * exit_code. Must be called by every rank of world, none of them blocked in a collective.
 * Finalizing instead of aborting keeps mpirun from adding its own error report and killing
 * ranks mid-write, and lets it return exit_code. */
_Noreturn void tr_parallel_fail_all(MPI_Comm world, const tr_diags *diags, int exit_code);

#endif
