/* Exits for main()-side use only: this is the one runtime file that calls exit(). */
#include "runtime/parallel/launch.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

_Noreturn void tr_parallel_fail_all(MPI_Comm world, const tr_diags *diags, int exit_code) {
    int rank = 0, finalized = 0;
    MPI_Comm_rank(world, &rank);
    if (rank == 0 && diags) {
        tr_diags_print_text(diags, stderr, isatty(fileno(stderr)) != 0);
        fflush(stderr);
    }
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
    exit(exit_code);
}
