/* Builds the parallel state on real communicators and checks, group kind by group kind, that
 * each communicator holds exactly the world ranks the pure function predicts, in its order.
 *
 *   mpirun -np N check_groups [tp=K] [pp=K] [cp=K] [ep=K] [etp=K] [inst=K] [vpp=K]
 *                             [order=tp-cp-ep-pp-dp] [local=split]
 *
 * etp defaults to tp (Megatron's default). local=split hides the launcher's local-rank variables
 * to exercise the shared-memory fallback. A layout the world cannot hold exits 2 on every rank
 * with the diagnostics printed once. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/parallel/launch.h"
#include "runtime/parallel/state.h"

static int parse(int argc, char **argv, tr_parallel_dims *d, int *split_local) {
    int etp = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        if (!eq) return -1;
        size_t klen = (size_t)(eq - a);
        const char *v = eq + 1;
        int n = atoi(v);
        if (!strncmp(a, "tp", klen) && klen == 2)
            d->tp = n;
        else if (!strncmp(a, "pp", klen) && klen == 2)
            d->pp = n;
        else if (!strncmp(a, "cp", klen) && klen == 2)
            d->cp = n;
        else if (!strncmp(a, "ep", klen) && klen == 2)
            d->ep = n;
        else if (!strncmp(a, "etp", klen) && klen == 3)
            etp = n;
        else if (!strncmp(a, "vpp", klen) && klen == 3)
            d->vpp = n;
        else if (!strncmp(a, "inst", klen) && klen == 4)
            d->dist_opt_instances = n;
        else if (!strncmp(a, "order", klen) && klen == 5)
            d->pp_before_dp = !strcmp(v, "tp-cp-ep-pp-dp");
        else if (!strncmp(a, "local", klen) && klen == 5)
            *split_local = !strcmp(v, "split");
        else
            return -1;
    }
    d->etp = etp > 0 ? etp : d->tp;
    tr_parallel_dims_derive(d);
    return 0;
}

static int check_kind(const tr_parallel_state *ps, tr_group_kind k, int *want, int *got) {
    int n, pos, bad = 0;
    const tr_group_comm *g = &ps->groups[k];
    if (tr_rank_group_of(&ps->dims, k, ps->world_rank, want, ps->world_size, &n, &pos) != TR_OK)
        return 1;
    if (n == 0) return g->comm != MPI_COMM_NULL || g->rank != -1 || g->size != 0;
    if (g->comm == MPI_COMM_NULL) return 1;
    int size, rank;
    MPI_Comm_size(g->comm, &size);
    MPI_Comm_rank(g->comm, &rank);
    bad |= size != n || rank != pos || g->size != n || g->rank != pos;
    if (size != n) return 1;
    MPI_Allgather(&ps->world_rank, 1, MPI_INT, got, 1, MPI_INT, g->comm);
    for (int i = 0; i < n; i++) bad |= got[i] != want[i];
    if (bad) {
        fprintf(stderr, "rank %d: group %s differs: expected", ps->world_rank,
                tr_group_kind_name(k));
        for (int i = 0; i < n; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, ", communicator holds");
        for (int i = 0; i < size; i++) fprintf(stderr, " %d", got[i]);
        fputc('\n', stderr);
    }
    return bad;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, split_local = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    tr_parallel_dims d;
    tr_parallel_dims_init(&d, size);
    if (parse(argc, argv, &d, &split_local) != 0) {
        if (rank == 0) fprintf(stderr, "check_groups: bad arguments\n");
        MPI_Finalize();
        return 64;
    }
    if (split_local) {
        unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
        unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    }

    tr_diags diags;
    tr_diags_init(&diags);
    tr_parallel_state ps;
    tr_status st = tr_parallel_state_init(&ps, &d, MPI_COMM_WORLD, &diags);
    if (st == TR_ERR_CONFIG) tr_parallel_fail_all(MPI_COMM_WORLD, &diags, 2);
    if (st != TR_OK) {
        fprintf(stderr, "rank %d: parallel state: %s\n", rank, tr_status_name(st));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    int *want = malloc(sizeof(int) * (size_t)size), *got = malloc(sizeof(int) * (size_t)size);
    int bad = 0;
    for (int k = 0; k < TR_GROUP_COUNT; k++) bad += check_kind(&ps, (tr_group_kind)k, want, got);
    /* One node: local rank is a rank among all of them. */
    if (ps.local_size != size || ps.local_rank < 0 || ps.local_rank >= ps.local_size) {
        fprintf(stderr, "rank %d: local rank %d of %d\n", rank, ps.local_rank, ps.local_size);
        bad++;
    }
    int total = 0;
    MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        tr_parallel_banner(stdout, &ps.dims, 0);
        printf("%s: %d group kinds on %d ranks, %d mismatches\n", total ? "FAIL" : "OK",
               TR_GROUP_COUNT, size, total);
    }
    free(want);
    free(got);
    tr_parallel_state_free(&ps);
    tr_diags_free(&diags);
    MPI_Finalize();
    return total ? 1 : 0;
}
