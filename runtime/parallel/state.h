/* The process groups of a run, as MPI communicators: one per group kind, created once and
 * collectively at start-up, then only read. Membership comes from runtime/parallel/rank_groups.h,
 * so what a dry run prints is exactly what a real run builds. */
#ifndef TR_PARALLEL_STATE_H
#define TR_PARALLEL_STATE_H

#include <mpi.h>
#include <stdbool.h>

#include "core/diag.h"
#include "core/status.h"
#include "runtime/parallel/dims.h"
#include "runtime/parallel/rank_groups.h"

typedef struct tr_group_comm {
    MPI_Comm comm; /* MPI_COMM_NULL when this rank is in no group of the kind (embedding) */
    int rank;      /* -1 when comm is MPI_COMM_NULL */
    int size;      /* 0 when comm is MPI_COMM_NULL */
} tr_group_comm;

typedef struct tr_parallel_state {
    tr_parallel_dims dims; /* validated, derived sizes filled in */
    MPI_Comm world;        /* the caller's; not owned */
    int world_rank, world_size;
    int local_rank, local_size; /* position among the ranks on this node */
    tr_group_comm groups[TR_GROUP_COUNT];
} tr_parallel_state;

/* Collective over `world`. A layout that does not fit the world (including dims->world not
 * equal to the communicator's size) returns TR_ERR_CONFIG with diagnostics and creates no
 * communicator; the check is the same on every rank, so every rank returns the same status. */
tr_status tr_parallel_state_init(tr_parallel_state *ps, const tr_parallel_dims *dims,
                                 MPI_Comm world, tr_diags *diags);

/* Frees every communicator it created. Collective; safe on a zeroed or failed state. */
void tr_parallel_state_free(tr_parallel_state *ps);

static inline MPI_Comm tr_parallel_comm(const tr_parallel_state *ps, tr_group_kind k) {
    return ps->groups[k].comm;
}
static inline int tr_parallel_rank(const tr_parallel_state *ps, tr_group_kind k) {
    return ps->groups[k].rank;
}
static inline int tr_parallel_size(const tr_parallel_state *ps, tr_group_kind k) {
    return ps->groups[k].size;
}

/* Pipeline stage predicates, ignoring virtual stages. */
static inline bool tr_parallel_is_first_stage(const tr_parallel_state *ps) {
    return ps->groups[TR_GROUP_PP].rank == 0;
}
static inline bool tr_parallel_is_last_stage(const tr_parallel_state *ps) {
    return ps->groups[TR_GROUP_PP].rank == ps->groups[TR_GROUP_PP].size - 1;
}

/* Neighbouring stages as ranks of the pp communicator (wrapping, as Megatron does). */
static inline int tr_parallel_next_stage(const tr_parallel_state *ps) {
    return (ps->groups[TR_GROUP_PP].rank + 1) % ps->groups[TR_GROUP_PP].size;
}
static inline int tr_parallel_prev_stage(const tr_parallel_state *ps) {
    int n = ps->groups[TR_GROUP_PP].size;
    return (ps->groups[TR_GROUP_PP].rank + n - 1) % n;
}

#endif
