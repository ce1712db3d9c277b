/* The communication layer: one backend-neutral interface for the collectives and point-to-point
 * transfers that tensor, sequence, data, pipeline, context and expert parallelism need.
 *
 * A tr_comm is created once per run over the process groups of a tr_parallel_state (MPI on host
 * memory now; NCCL on device memory later, behind the same tr_comm_backend table). Calls name a
 * group by its tr_group_kind (or TR_COMM_WORLD); ranks in calls (roots, peers) are ranks inside
 * that group. Every operation exists as a nonblocking start returning a request and as a
 * blocking form (start + wait). Every wait is bounded by the communication timeout: a peer that
 * never answers yields TR_ERR_COMM and a "comm.timeout" diagnostic naming the operation, the
 * group, the peers involved and the elapsed time, after which the only valid action is
 * tr_comm_abort_on_error(). Every call is counted per group and per kind (see
 * tr_comm_counters). Details and the determinism contract: docs/comm.md. */
#ifndef TR_COMM_H
#define TR_COMM_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/diag.h"
#include "core/status.h"
#include "runtime/parallel/rank_groups.h"

struct tr_parallel_state;
struct tr_config;

/* Group slots: every tr_group_kind, plus the whole world. */
#define TR_COMM_WORLD       ((int)TR_GROUP_COUNT)
#define TR_COMM_GROUP_SLOTS ((int)TR_GROUP_COUNT + 1)

typedef enum tr_comm_dtype {
    TR_COMM_F32 = 0,
    TR_COMM_F64,
    TR_COMM_I32,
    TR_COMM_I64,
    TR_COMM_BYTES, /* opaque bytes: not for reductions */
    TR_COMM_DTYPE_COUNT
} tr_comm_dtype;

typedef enum tr_comm_op { TR_COMM_SUM = 0, TR_COMM_MAX, TR_COMM_MIN, TR_COMM_OP_COUNT } tr_comm_op;

typedef enum tr_comm_kind {
    TR_COMM_ALL_REDUCE = 0,
    TR_COMM_REDUCE_SCATTER,
    TR_COMM_ALL_GATHER,
    TR_COMM_ALL_TO_ALL,
    TR_COMM_ALL_TO_ALLV,
    TR_COMM_BROADCAST,
    TR_COMM_SEND,
    TR_COMM_RECV,
    TR_COMM_P2P_BATCH, /* its bytes are booked under SEND and RECV; only the call is counted here */
    TR_COMM_BARRIER,
    TR_COMM_KIND_COUNT
} tr_comm_kind;

/* How reductions combine the ranks' values.
 * NATIVE: the backend's own algorithm. Open MPI gives bitwise-identical results on every rank
 *   (checked by tests/comm), but the summation order depends on group and message size.
 * RANK_ORDER: every rank gathers all contributions and sums them in group-rank order, so the
 *   result equals a serial left-to-right sum over ranks bit for bit, whatever the backend. It
 *   moves (size-1)x more data; for reproducibility tests and debugging. */
typedef enum tr_comm_reduce_mode {
    TR_COMM_REDUCE_NATIVE = 0,
    TR_COMM_REDUCE_RANK_ORDER
} tr_comm_reduce_mode;

/* One transfer of a batched send/recv (pipeline p2p): `peer` is a rank in the call's group. */
typedef struct tr_comm_p2p {
    bool is_send;
    int peer;
    void *buf; /* read for a send, written for a receive */
    size_t count;
    tr_comm_dtype dtype;
} tr_comm_p2p;

/* A call, as data: what the front end counts and what a backend executes. Counts are elements.
 *   ALL_REDUCE      send[count] -> recv[count]
 *   REDUCE_SCATTER  send[size*count] -> recv[count] (block `rank` of the reduced vector)
 *   ALL_GATHER      send[count] -> recv[size*count]
 *   ALL_TO_ALL      send[size*count] -> recv[size*count]; block j goes to rank j
 *   ALL_TO_ALLV     send_counts/displs, recv_counts/displs (size entries each)
 *   BROADCAST       recv[count] from `root`
 *   SEND / RECV     send[count] to / recv[count] from `peer`, matched by `tag` (0..32766)
 *   P2P_BATCH       p2p[0..n_p2p)
 * In place: send == NULL. ALL_REDUCE: send == recv means the same. ALL_GATHER: the own block is
 * already in recv block `rank` (send pointing at it means the same). REDUCE_SCATTER: the result
 * is left in block `rank` of recv[size*count], the other blocks are unspecified afterwards. */
typedef struct tr_comm_call {
    tr_comm_kind kind;
    int group;
    tr_comm_dtype dtype;
    tr_comm_op op;
    const void *send;
    void *recv;
    size_t count;
    const size_t *send_counts, *send_displs, *recv_counts, *recv_displs; /* displs may be NULL */
    int root, peer, tag;
    const tr_comm_p2p *p2p;
    int n_p2p;
} tr_comm_call;

/* What the counters count, per group slot and kind, on this rank: the payload this rank hands
 * to the operation, in bytes, independent of the algorithm the backend uses:
 *   ALL_REDUCE count, REDUCE_SCATTER size*count, ALL_GATHER count, ALL_TO_ALL size*count,
 *   ALL_TO_ALLV sum(send_counts), BROADCAST count on the root (0 elsewhere), SEND count;
 *   RECV counts bytes received (not sent); BARRIER 0; P2P_BATCH 0 (its transfers are booked
 *   under SEND and RECV). Elements are times the dtype size. `calls` counts API calls (a batch is
 *   one P2P_BATCH call plus one SEND or RECV call per transfer). Blocking and nonblocking
 *   forms count the same, when started. */
typedef struct tr_comm_counters {
    uint64_t bytes[TR_COMM_GROUP_SLOTS][TR_COMM_KIND_COUNT];
    uint64_t calls[TR_COMM_GROUP_SLOTS][TR_COMM_KIND_COUNT];
} tr_comm_counters;

/* A started operation. The front end owns the struct; `impl` is the backend's. */
typedef struct tr_comm_request {
    tr_comm_kind kind;
    int group;
    double started_s; /* monotonic clock */
    void *impl;
} tr_comm_request;

typedef struct tr_comm tr_comm;

/* A backend: NCCL implements the same table. `wait` must honour c->timeout_s and report a
 * timeout as TR_ERR_COMM with a "comm.timeout" diagnostic in c->diags. `release` frees the
 * backend's part of a request (completed, or abandoned after a timeout). */
typedef struct tr_comm_backend {
    const char *name;
    int (*group_size)(const tr_comm *c, int group); /* 0 when this rank is in no such group */
    int (*group_rank)(const tr_comm *c, int group); /* -1 when this rank is in no such group */
    int (*world_rank_of)(const tr_comm *c, int group, int rank);
    tr_status (*start)(tr_comm *c, const tr_comm_call *call, tr_comm_request *req);
    tr_status (*test)(tr_comm *c, tr_comm_request *req, bool *done);
    tr_status (*wait)(tr_comm *c, tr_comm_request *req);
    void (*release)(tr_comm *c, tr_comm_request *req);
    void (*abort)(tr_comm *c, int exit_code); /* ends every rank; does not return */
    void (*destroy)(tr_comm *c);
} tr_comm_backend;

struct tr_comm {
    const tr_comm_backend *backend;
    void *impl;
    double timeout_s;
    tr_comm_reduce_mode reduce_mode;
    tr_diags *diags; /* not owned: timeouts and misuse are reported here */
    tr_comm_counters counters;
};

typedef struct tr_comm_options {
    double timeout_s; /* <= 0: tr_comm_default_timeout_s */
    tr_comm_reduce_mode reduce_mode;
} tr_comm_options;

#define TR_COMM_DEFAULT_TIMEOUT_S 600.0

/* dist.distributed_timeout_seconds when set, else dist.distributed_timeout_minutes * 60. */
double tr_comm_timeout_from_config(const struct tr_config *cfg);

/* Collective over ps->world. ps and diags must outlive the comm. */
tr_status tr_comm_mpi_create(const struct tr_parallel_state *ps, const tr_comm_options *opt,
                             tr_diags *diags, tr_comm **out);
/* Collective. Safe on NULL. */
void tr_comm_destroy(tr_comm *c);

/* The training loop's stop request (its SIGTERM/SIGINT flag), NULL for none. A wait still
 * blocked TR_COMM_STOP_GRACE_S after the flag is set gives up with the comm.timeout diagnostic
 * (what it waited for, on which group, for whom): a stopped peer must not make a rank ignore
 * the signal until the full timeout. Process-wide, like the signal itself. */
#define TR_COMM_STOP_GRACE_S 1.0
void tr_comm_set_stop_flag(const volatile sig_atomic_t *flag);
bool tr_comm_stop_requested(void);

/* For main(): when st is not TR_OK, prints c's diagnostics to stderr, then ends every rank of
 * the world (MPI_Abort with exit code 2 on the MPI backend, so mpirun returns non-zero). */
void tr_comm_abort_on_error(tr_comm *c, tr_status st);

int tr_comm_group_size(const tr_comm *c, int group);
int tr_comm_group_rank(const tr_comm *c, int group);
/* The world rank of a group's member; -1 when rank is not in the group. */
int tr_comm_world_rank_of(const tr_comm *c, int group, int rank);

/* Generic start: every tr_comm_i* below is this with a filled tr_comm_call. */
tr_status tr_comm_start(tr_comm *c, const tr_comm_call *call, tr_comm_request **req);

/* Nonblocking forms. Buffers must stay untouched until the request completes. */
tr_status tr_comm_iall_reduce(tr_comm *c, int group, const void *send, void *recv, size_t count,
                              tr_comm_dtype t, tr_comm_op op, tr_comm_request **req);
tr_status tr_comm_ireduce_scatter(tr_comm *c, int group, const void *send, void *recv, size_t count,
                                  tr_comm_dtype t, tr_comm_op op, tr_comm_request **req);
tr_status tr_comm_iall_gather(tr_comm *c, int group, const void *send, void *recv, size_t count,
                              tr_comm_dtype t, tr_comm_request **req);
tr_status tr_comm_iall_to_all(tr_comm *c, int group, const void *send, void *recv, size_t count,
                              tr_comm_dtype t, tr_comm_request **req);
tr_status tr_comm_iall_to_allv(tr_comm *c, int group, const void *send, const size_t *send_counts,
                               const size_t *send_displs, void *recv, const size_t *recv_counts,
                               const size_t *recv_displs, tr_comm_dtype t, tr_comm_request **req);
tr_status tr_comm_ibroadcast(tr_comm *c, int group, void *buf, size_t count, tr_comm_dtype t,
                             int root, tr_comm_request **req);
tr_status tr_comm_isend(tr_comm *c, int group, const void *buf, size_t count, tr_comm_dtype t,
                        int peer, int tag, tr_comm_request **req);
tr_status tr_comm_irecv(tr_comm *c, int group, void *buf, size_t count, tr_comm_dtype t, int peer,
                        int tag, tr_comm_request **req);
tr_status tr_comm_ip2p_batch(tr_comm *c, int group, const tr_comm_p2p *ops, int n,
                             tr_comm_request **req);
tr_status tr_comm_ibarrier(tr_comm *c, int group, tr_comm_request **req);

/* Completion. Both free a finished request and set *req to NULL; a NULL *req is complete. After a
 * timeout the request is abandoned (freed at tr_comm_destroy) and *req is NULL as well. */
tr_status tr_comm_wait(tr_comm *c, tr_comm_request **req);
tr_status tr_comm_test(tr_comm *c, tr_comm_request **req, bool *done);
/* Waits for all, in order; stops at the first error, leaving the later handles pending (the caller
 * is expected to abort). */
tr_status tr_comm_wait_all(tr_comm *c, tr_comm_request **reqs, int n);

/* Blocking forms. */
tr_status tr_comm_all_reduce(tr_comm *c, int group, const void *send, void *recv, size_t count,
                             tr_comm_dtype t, tr_comm_op op);
tr_status tr_comm_all_reduce_inplace(tr_comm *c, int group, void *buf, size_t count,
                                     tr_comm_dtype t, tr_comm_op op);
tr_status tr_comm_reduce_scatter(tr_comm *c, int group, const void *send, void *recv, size_t count,
                                 tr_comm_dtype t, tr_comm_op op);
tr_status tr_comm_reduce_scatter_inplace(tr_comm *c, int group, void *buf, size_t count,
                                         tr_comm_dtype t, tr_comm_op op);
tr_status tr_comm_all_gather(tr_comm *c, int group, const void *send, void *recv, size_t count,
                             tr_comm_dtype t);
tr_status tr_comm_all_gather_inplace(tr_comm *c, int group, void *buf, size_t count,
                                     tr_comm_dtype t);
tr_status tr_comm_all_to_all(tr_comm *c, int group, const void *send, void *recv, size_t count,
                             tr_comm_dtype t);
tr_status tr_comm_all_to_allv(tr_comm *c, int group, const void *send, const size_t *send_counts,
                              const size_t *send_displs, void *recv, const size_t *recv_counts,
                              const size_t *recv_displs, tr_comm_dtype t);
tr_status tr_comm_broadcast(tr_comm *c, int group, void *buf, size_t count, tr_comm_dtype t,
                            int root);
tr_status tr_comm_send(tr_comm *c, int group, const void *buf, size_t count, tr_comm_dtype t,
                       int peer, int tag);
tr_status tr_comm_recv(tr_comm *c, int group, void *buf, size_t count, tr_comm_dtype t, int peer,
                       int tag);
tr_status tr_comm_p2p_batch(tr_comm *c, int group, const tr_comm_p2p *ops, int n);
tr_status tr_comm_barrier(tr_comm *c, int group);

/* Counters (comm.c). A group or kind of -1 sums over all of them. */
void tr_comm_counters_reset(tr_comm_counters *k);
/* Checks the call's shape (NULL buffers, reductions on bytes, peers and roots outside the group)
 * and books it. For BROADCAST, call->peer must hold this rank's position in the group (only the
 * root's payload is booked); tr_comm_start fills it in. TR_ERR_INVALID with a "comm.bad_call"
 * diagnostic in diags when malformed. */
tr_status tr_comm_counters_book(tr_comm_counters *k, const tr_comm_call *call, int group_size,
                                tr_diags *diags);
uint64_t tr_comm_counters_bytes(const tr_comm_counters *k, int group, int kind);
uint64_t tr_comm_counters_calls(const tr_comm_counters *k, int group, int kind);
/* Bytes this rank sent: every kind except RECV. */
uint64_t tr_comm_counters_bytes_sent(const tr_comm_counters *k, int group);
/* One line per non-zero (group, kind): "group kind calls bytes". */
void tr_comm_counters_print(FILE *out, const tr_comm_counters *k);

size_t tr_comm_dtype_size(tr_comm_dtype t);
const char *tr_comm_dtype_name(tr_comm_dtype t);
const char *tr_comm_op_name(tr_comm_op op);
const char *tr_comm_kind_name(tr_comm_kind k);
const char *tr_comm_group_name(int group); /* tr_group_kind_name, or "world" */

#endif
