/* Communicator construction. Every rank calls MPI_Comm_split once per group kind, in enum
 * order: split is collective over the world, so a fixed order on all ranks is what keeps it
 * from deadlocking, and computing each rank's own membership locally avoids any exchange. */
#include "runtime/parallel/state.h"

#include <stdlib.h>
#include <string.h>

static void reset(tr_parallel_state *ps) {
    for (int k = 0; k < TR_GROUP_COUNT; k++) ps->groups[k] = (tr_group_comm){MPI_COMM_NULL, -1, 0};
}

static int env_int(const char *name) {
    const char *s = getenv(name);
    if (!s || !*s) return -1;
    char *end;
    long v = strtol(s, &end, 10);
    return (*end == '\0' && v >= 0 && v < 1 << 30) ? (int)v : -1;
}

/* The launcher's variables are authoritative when we run on its world; otherwise (another
 * launcher, or a sub-communicator) ask MPI which ranks share our memory. All ranks must agree
 * on taking the collective fallback, hence the all-reduce. */
static tr_status find_local_rank(tr_parallel_state *ps) {
    int same = MPI_UNEQUAL;
    if (MPI_Comm_compare(ps->world, MPI_COMM_WORLD, &same) != MPI_SUCCESS) return TR_ERR_COMM;
    /* mpirun (Open MPI), mpiexec (MPICH's Hydra), srun: the first pair the launcher set. */
    static const char *const vars[][2] = {
        {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
        {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
        {"SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"}};
    int lr = -1, ls = -1;
    for (size_t i = 0; i < sizeof vars / sizeof *vars && (lr < 0 || ls <= 0); i++) {
        lr = env_int(vars[i][0]);
        ls = env_int(vars[i][1]);
    }
    int have = (same == MPI_IDENT || same == MPI_CONGRUENT) && lr >= 0 && ls > 0 && lr < ls,
        all = 0;
    if (MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_LAND, ps->world) != MPI_SUCCESS)
        return TR_ERR_COMM;
    if (all) {
        ps->local_rank = lr;
        ps->local_size = ls;
        return TR_OK;
    }
    MPI_Comm node;
    if (MPI_Comm_split_type(ps->world, MPI_COMM_TYPE_SHARED, ps->world_rank, MPI_INFO_NULL,
                            &node) != MPI_SUCCESS)
        return TR_ERR_COMM;
    int ok = MPI_Comm_rank(node, &ps->local_rank) == MPI_SUCCESS &&
             MPI_Comm_size(node, &ps->local_size) == MPI_SUCCESS;
    MPI_Comm_free(&node);
    return ok ? TR_OK : TR_ERR_COMM;
}

/* Always calls MPI_Comm_split, even after a local failure (then as a non-member), so that no
 * rank is left waiting in a collective the others skipped. */
static tr_status split_one(tr_parallel_state *ps, tr_group_kind k, int *members, int cap) {
    int n = 0, pos = -1;
    tr_status st = members ? tr_rank_group_of(&ps->dims, k, ps->world_rank, members, cap, &n, &pos)
                           : TR_ERR_NOMEM;
    if (st != TR_OK) n = 0;
    /* The smallest member names a group uniquely; keying by position keeps the communicator's
     * rank order equal to the enumeration's. */
    int color = n > 0 ? members[0] : MPI_UNDEFINED;
    tr_group_comm *g = &ps->groups[k];
    if (MPI_Comm_split(ps->world, color, n > 0 ? pos : 0, &g->comm) != MPI_SUCCESS) {
        g->comm = MPI_COMM_NULL;
        return TR_ERR_COMM;
    }
    if (st != TR_OK) return st;
    if (g->comm == MPI_COMM_NULL) return n == 0 ? TR_OK : TR_ERR_INTERNAL;
    if (MPI_Comm_rank(g->comm, &g->rank) != MPI_SUCCESS ||
        MPI_Comm_size(g->comm, &g->size) != MPI_SUCCESS)
        return TR_ERR_COMM;
    return (g->rank == pos && g->size == n) ? TR_OK : TR_ERR_INTERNAL;
}

tr_status tr_parallel_state_init(tr_parallel_state *ps, const tr_parallel_dims *dims,
                                 MPI_Comm world, tr_diags *diags) {
    memset(ps, 0, sizeof *ps);
    reset(ps);
    ps->world = world;
    if (MPI_Comm_rank(world, &ps->world_rank) != MPI_SUCCESS ||
        MPI_Comm_size(world, &ps->world_size) != MPI_SUCCESS)
        return TR_ERR_COMM;

    /* Everything up to here depends only on dims and the world size, identical on every rank,
     * so a rejected layout is rejected everywhere before any collective call. */
    ps->dims = *dims;
    if (ps->dims.world != ps->world_size) {
        if (diags)
            tr_diag_add(diags, TR_SEV_ERROR, "parallel.world_size_mismatch", NULL, NULL,
                        "launch with as many ranks as the layout was planned for",
                        "the layout was planned for %d ranks but %d were launched", ps->dims.world,
                        ps->world_size);
        return TR_ERR_CONFIG;
    }
    TR_TRY(tr_parallel_dims_check(&ps->dims, diags));
    tr_parallel_dims_derive(&ps->dims);

    tr_status st = find_local_rank(ps);
    int *members = malloc(sizeof(int) * (size_t)ps->world_size);
    for (int k = 0; k < TR_GROUP_COUNT; k++) {
        tr_status s = split_one(ps, (tr_group_kind)k, members, ps->world_size);
        if (st == TR_OK) st = s;
    }
    free(members);
    /* Agree on the outcome so that either every rank keeps its communicators or every rank
     * frees them (MPI_Comm_free is collective). */
    int mine = (int)st, worst = 0;
    if (MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, world) != MPI_SUCCESS)
        worst = TR_ERR_COMM;
    if (worst != TR_OK) {
        tr_parallel_state_free(ps);
        return st != TR_OK ? st : TR_ERR_COMM;
    }
    return TR_OK;
}

void tr_parallel_state_free(tr_parallel_state *ps) {
    for (int k = 0; k < TR_GROUP_COUNT; k++) {
        /* A zeroed state holds 0, which is not MPI_COMM_NULL in every MPI. */
        MPI_Comm comm = ps->groups[k].comm;
        if (comm != MPI_COMM_NULL && comm != (MPI_Comm)0) MPI_Comm_free(&ps->groups[k].comm);
        ps->groups[k] = (tr_group_comm){MPI_COMM_NULL, -1, 0};
    }
}
