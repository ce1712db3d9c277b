/* The MPI backend of runtime/comm/comm.h, on host memory, over the communicators of a
 * tr_parallel_state.
 *
 * Every operation is started nonblocking and completed by polling MPI_Test against a deadline,
 * so that a peer that never answers cannot hang the job. When a collective times out we ask the
 * other members, over a duplicate "control" communicator of the same group, which call they are
 * in: members blocked in a wait of this layer answer at once (every collective wait keeps a
 * receive for such questions posted), so the ranks that stay silent are the ones that never
 * reached a wait on this group (stuck in compute, dead, stopped, or blocked on another group).
 * Determinism: see docs/comm.md. */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm/comm.h"
#include "runtime/parallel/state.h"

enum { TAG_ASK = 1, TAG_ANSWER = 2, TAG_BATCH = 32767, N_ANSWER_SLOTS = 32 };

typedef struct answer_slot {
    MPI_Request req;
    int64_t msg[2];
} answer_slot;

typedef struct mpi_req mpi_req;

typedef struct mpi_impl {
    const tr_parallel_state *ps;
    MPI_Comm comm[TR_COMM_GROUP_SLOTS]; /* not owned */
    MPI_Comm ctl[TR_COMM_GROUP_SLOTS];  /* owned: timeout questions and answers */
    int rank[TR_COMM_GROUP_SLOTS], size[TR_COMM_GROUP_SLOTS];
    int *members[TR_COMM_GROUP_SLOTS]; /* world rank of each group rank */
    int64_t seq[TR_COMM_GROUP_SLOTS];  /* collectives started on each group */
    answer_slot answers[N_ANSWER_SLOTS];
    mpi_req **abandoned; /* requests MPI may still touch after a timeout */
    int n_abandoned, cap_abandoned;
} mpi_impl;

struct mpi_req {
    MPI_Request *reqs;
    int *peers; /* group rank per request for point-to-point, else -1 */
    int *sends; /* 1 when reqs[i] is a send */
    int n;
    bool collective;
    int64_t seq;
    /* Work left once MPI is done: rank-order reductions and in-place reduce-scatter moves. */
    void *tmp;
    void *dst;
    size_t count;
    int group_size, group_rank;
    tr_comm_dtype dtype;
    tr_comm_op op;
    bool reduce_tmp, move_block;
    int *v_arrays; /* all-to-allv counts and displacements, alive until completion */
    int64_t ask[2];
    int64_t (*answers)[2];
    MPI_Request *probe;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Busy polling starves the peers when ranks outnumber cores, so back off to short sleeps. */
static void backoff(int *spins) {
    if (++*spins < 100) return;
    struct timespec ts = {0, *spins < 2000 ? 20000 : 200000};
    nanosleep(&ts, NULL);
}

static MPI_Datatype mpi_type(tr_comm_dtype t) {
    switch (t) {
    case TR_COMM_F32:
        return MPI_FLOAT;
    case TR_COMM_F64:
        return MPI_DOUBLE;
    case TR_COMM_I32:
        return MPI_INT32_T;
    case TR_COMM_I64:
        return MPI_INT64_T;
    default:
        return MPI_BYTE;
    }
}

static MPI_Op mpi_op(tr_comm_op op) {
    return op == TR_COMM_MAX ? MPI_MAX : op == TR_COMM_MIN ? MPI_MIN : MPI_SUM;
}

static mpi_impl *impl_of(const tr_comm *c) {
    return (mpi_impl *)c->impl;
}

static int mpi_group_size(const tr_comm *c, int group) {
    return impl_of(c)->size[group];
}
static int mpi_group_rank(const tr_comm *c, int group) {
    return impl_of(c)->rank[group];
}
static int mpi_world_rank_of(const tr_comm *c, int group, int rank) {
    const mpi_impl *m = impl_of(c);
    if (rank < 0 || rank >= m->size[group]) return -1;
    return m->members[group][rank];
}

/* Left fold over the group's blocks, rank 0 first: the order a serial loop over ranks uses. */
#define FOLD(T)                                                                                    \
    do {                                                                                           \
        T *d = (T *)dst;                                                                           \
        const T *s = (const T *)src;                                                               \
        memcpy(d, s, n * sizeof(T));                                                               \
        for (int j = 1; j < p; j++) {                                                              \
            const T *b = s + (size_t)j * n;                                                        \
            if (op == TR_COMM_SUM)                                                                 \
                for (size_t i = 0; i < n; i++) d[i] += b[i];                                       \
            else if (op == TR_COMM_MAX)                                                            \
                for (size_t i = 0; i < n; i++) d[i] = b[i] > d[i] ? b[i] : d[i];                   \
            else                                                                                   \
                for (size_t i = 0; i < n; i++) d[i] = b[i] < d[i] ? b[i] : d[i];                   \
        }                                                                                          \
    } while (0)

static void fold_blocks(void *dst, const void *src, size_t n, int p, tr_comm_dtype t,
                        tr_comm_op op) {
    switch (t) {
    case TR_COMM_F32:
        FOLD(float);
        break;
    case TR_COMM_F64:
        FOLD(double);
        break;
    case TR_COMM_I32:
        FOLD(int32_t);
        break;
    case TR_COMM_I64:
        FOLD(int64_t);
        break;
    default:
        break;
    }
}

static void finish(mpi_req *r) {
    size_t es = tr_comm_dtype_size(r->dtype);
    if (r->reduce_tmp) fold_blocks(r->dst, r->tmp, r->count, r->group_size, r->dtype, r->op);
    if (r->move_block && r->group_rank)
        memmove((char *)r->dst + (size_t)r->group_rank * r->count * es, r->dst, r->count * es);
}

static void free_req(mpi_req *r) {
    if (!r) return;
    free(r->reqs);
    free(r->peers);
    free(r->sends);
    free(r->tmp);
    free(r->v_arrays);
    free(r->answers);
    free(r->probe);
    free(r);
}

static tr_status too_large(tr_comm *c, const tr_comm_call *call) {
    tr_diag_add(c->diags, TR_SEV_ERROR, "comm.count_too_large", NULL, NULL,
                "split the transfer into pieces of at most 2^31-1 elements",
                "%s on group %s: an element count exceeds what MPI accepts (2^31-1)",
                tr_comm_kind_name(call->kind), tr_comm_group_name(call->group));
    return TR_ERR_INVALID;
}

static tr_status mpi_failed(tr_comm *c, int err, const char *what, int group) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, text, &len);
    tr_diag_add(c->diags, TR_SEV_ERROR, "comm.mpi_error", NULL, NULL,
                "this is a failure inside MPI; check the MPI installation and the other ranks",
                "%s on group %s: MPI error: %s", what, tr_comm_group_name(group), text);
    return TR_ERR_COMM;
}

static tr_status alloc_reqs(mpi_req *r, int n) {
    r->n = n;
    r->reqs = malloc(sizeof *r->reqs * (size_t)(n ? n : 1));
    r->peers = malloc(sizeof *r->peers * (size_t)(n ? n : 1));
    r->sends = calloc((size_t)(n ? n : 1), sizeof *r->sends);
    if (!r->reqs || !r->peers || !r->sends) return TR_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        r->reqs[i] = MPI_REQUEST_NULL;
        r->peers[i] = -1;
    }
    return TR_OK;
}

static tr_status start_alltoallv(tr_comm *c, const tr_comm_call *call, mpi_req *r, MPI_Comm comm,
                                 int p) {
    r->v_arrays = malloc(sizeof(int) * 4 * (size_t)p);
    if (!r->v_arrays) return TR_ERR_NOMEM;
    int *sc = r->v_arrays, *sd = sc + p, *rc = sd + p, *rd = rc + p;
    size_t soff = 0, roff = 0;
    for (int j = 0; j < p; j++) {
        size_t s_at = call->send_displs ? call->send_displs[j] : soff;
        size_t r_at = call->recv_displs ? call->recv_displs[j] : roff;
        if (call->send_counts[j] > INT_MAX || call->recv_counts[j] > INT_MAX || s_at > INT_MAX ||
            r_at > INT_MAX)
            return too_large(c, call);
        sc[j] = (int)call->send_counts[j];
        rc[j] = (int)call->recv_counts[j];
        sd[j] = (int)s_at;
        rd[j] = (int)r_at;
        soff += call->send_counts[j];
        roff += call->recv_counts[j];
    }
    MPI_Datatype dt = mpi_type(call->dtype);
    int err = MPI_Ialltoallv(call->send, sc, sd, dt, call->recv, rc, rd, dt, comm, &r->reqs[0]);
    return err == MPI_SUCCESS ? TR_OK : mpi_failed(c, err, "all_to_allv", call->group);
}

static tr_status start_reduction(tr_comm *c, const tr_comm_call *call, mpi_req *r, MPI_Comm comm,
                                 int p, int me) {
    size_t es = tr_comm_dtype_size(call->dtype), n = call->count;
    MPI_Datatype dt = mpi_type(call->dtype);
    int cnt = (int)n, err;
    bool all_reduce = call->kind == TR_COMM_ALL_REDUCE;
    r->dst = call->recv;
    r->count = n;
    if (c->reduce_mode == TR_COMM_REDUCE_RANK_ORDER) {
        /* Gather every contribution, then fold locally in rank order. */
        r->tmp = malloc((size_t)p * n * es + 1);
        if (!r->tmp) return TR_ERR_NOMEM;
        r->reduce_tmp = true;
        const void *src = call->send ? call->send : call->recv;
        if (all_reduce) {
            err = MPI_Iallgather(src, cnt, dt, r->tmp, cnt, dt, comm, &r->reqs[0]);
        } else {
            if (!call->send) r->dst = (char *)call->recv + (size_t)me * n * es;
            err = MPI_Ialltoall(src, cnt, dt, r->tmp, cnt, dt, comm, &r->reqs[0]);
        }
    } else if (all_reduce) {
        err = MPI_Iallreduce(call->send ? call->send : MPI_IN_PLACE, call->recv, cnt, dt,
                             mpi_op(call->op), comm, &r->reqs[0]);
    } else {
        /* MPI leaves an in-place result in block 0; we promise block `rank`. */
        r->move_block = !call->send;
        err = MPI_Ireduce_scatter_block(call->send ? call->send : MPI_IN_PLACE, call->recv, cnt, dt,
                                        mpi_op(call->op), comm, &r->reqs[0]);
    }
    return err == MPI_SUCCESS ? TR_OK
                              : mpi_failed(c, err, tr_comm_kind_name(call->kind), call->group);
}

static tr_status start_batch(tr_comm *c, const tr_comm_call *call, mpi_req *r, MPI_Comm comm) {
    TR_TRY(alloc_reqs(r, call->n_p2p));
    for (int i = 0; i < call->n_p2p; i++) {
        const tr_comm_p2p *t = &call->p2p[i];
        if (t->count > INT_MAX) return too_large(c, call);
        MPI_Datatype dt = mpi_type(t->dtype);
        int err = t->is_send
                      ? MPI_Isend(t->buf, (int)t->count, dt, t->peer, TAG_BATCH, comm, &r->reqs[i])
                      : MPI_Irecv(t->buf, (int)t->count, dt, t->peer, TAG_BATCH, comm, &r->reqs[i]);
        if (err != MPI_SUCCESS) return mpi_failed(c, err, "p2p_batch", call->group);
        r->peers[i] = t->peer;
        r->sends[i] = t->is_send;
    }
    return TR_OK;
}

static tr_status start_ops(tr_comm *c, const tr_comm_call *call, mpi_req *r) {
    mpi_impl *m = impl_of(c);
    int g = call->group, p = m->size[g], me = m->rank[g];
    MPI_Comm comm = m->comm[g];
    MPI_Datatype dt = mpi_type(call->dtype);
    r->dtype = call->dtype;
    r->op = call->op;
    r->group_size = p;
    r->group_rank = me;
    if (call->kind == TR_COMM_P2P_BATCH) return start_batch(c, call, r, comm);
    TR_TRY(alloc_reqs(r, 1));
    bool blocks = call->kind == TR_COMM_REDUCE_SCATTER || call->kind == TR_COMM_ALL_TO_ALL;
    if (call->count > INT_MAX || (blocks && call->count * (size_t)p > INT_MAX))
        return too_large(c, call);
    int n = (int)call->count, err = MPI_SUCCESS;
    r->collective = call->kind != TR_COMM_SEND && call->kind != TR_COMM_RECV;
    if (r->collective) r->seq = ++m->seq[g];
    switch (call->kind) {
    case TR_COMM_ALL_REDUCE:
    case TR_COMM_REDUCE_SCATTER:
        return start_reduction(c, call, r, comm, p, me);
    case TR_COMM_ALL_GATHER:
        err = MPI_Iallgather(call->send ? call->send : MPI_IN_PLACE, n, dt, call->recv, n, dt, comm,
                             &r->reqs[0]);
        break;
    case TR_COMM_ALL_TO_ALL:
        err = MPI_Ialltoall(call->send, n, dt, call->recv, n, dt, comm, &r->reqs[0]);
        break;
    case TR_COMM_ALL_TO_ALLV:
        return start_alltoallv(c, call, r, comm, p);
    case TR_COMM_BROADCAST:
        err = MPI_Ibcast(call->recv, n, dt, call->root, comm, &r->reqs[0]);
        break;
    case TR_COMM_SEND:
        err = MPI_Isend(call->send, n, dt, call->peer, call->tag, comm, &r->reqs[0]);
        r->peers[0] = call->peer;
        r->sends[0] = 1;
        break;
    case TR_COMM_RECV:
        err = MPI_Irecv(call->recv, n, dt, call->peer, call->tag, comm, &r->reqs[0]);
        r->peers[0] = call->peer;
        break;
    case TR_COMM_BARRIER:
        err = MPI_Ibarrier(comm, &r->reqs[0]);
        break;
    default:
        return TR_ERR_INTERNAL;
    }
    return err == MPI_SUCCESS ? TR_OK : mpi_failed(c, err, tr_comm_kind_name(call->kind), g);
}

static tr_status mpi_start(tr_comm *c, const tr_comm_call *call, tr_comm_request *req) {
    mpi_req *r = calloc(1, sizeof *r);
    if (!r) return TR_ERR_NOMEM;
    r->ask[0] = 0;
    r->ask[1] = call->kind;
    tr_status st = start_ops(c, call, r);
    r->ask[0] = r->seq;
    if (st != TR_OK) {
        /* Nothing was started when a check failed; an MPI failure aborts by default anyway. */
        free_req(r);
        return st;
    }
    req->impl = r;
    return TR_OK;
}

/* One pass over the pending requests; true when all are done. */
static tr_status poll_once(tr_comm *c, tr_comm_request *req, mpi_req *r, bool *all_done) {
    *all_done = true;
    for (int i = 0; i < r->n; i++) {
        if (r->reqs[i] == MPI_REQUEST_NULL) continue;
        int flag = 0;
        int err = MPI_Test(&r->reqs[i], &flag, MPI_STATUS_IGNORE);
        if (err != MPI_SUCCESS) return mpi_failed(c, err, tr_comm_kind_name(req->kind), req->group);
        if (!flag) *all_done = false;
    }
    return TR_OK;
}

/* Answer a question about which call we are in: the answer slots outlive this wait because an
 * answer may still be in flight when it ends. */
static void answer(mpi_impl *m, int g, int to, const int64_t what[2]) {
    for (int i = 0; i < N_ANSWER_SLOTS; i++) {
        answer_slot *s = &m->answers[i];
        if (s->req != MPI_REQUEST_NULL) {
            int flag = 0;
            MPI_Test(&s->req, &flag, MPI_STATUS_IGNORE);
            if (!flag) continue;
        }
        s->msg[0] = what[0];
        s->msg[1] = what[1];
        MPI_Isend(s->msg, 2, MPI_INT64_T, to, TAG_ANSWER, m->ctl[g], &s->req);
        return;
    }
}

typedef struct ask_listener {
    MPI_Request req;
    int64_t question[2];
} ask_listener;

static void listen_post(mpi_impl *m, int g, ask_listener *l) {
    l->req = MPI_REQUEST_NULL;
    if (m->ctl[g] != MPI_COMM_NULL)
        MPI_Irecv(l->question, 2, MPI_INT64_T, MPI_ANY_SOURCE, TAG_ASK, m->ctl[g], &l->req);
}

static void listen_serve(mpi_impl *m, int g, ask_listener *l, const int64_t what[2]) {
    if (l->req == MPI_REQUEST_NULL) return;
    int flag = 0;
    MPI_Status status;
    MPI_Test(&l->req, &flag, &status);
    if (!flag) return;
    answer(m, g, status.MPI_SOURCE, what);
    listen_post(m, g, l);
}

static void listen_stop(mpi_impl *m, int g, ask_listener *l, const int64_t what[2]) {
    if (l->req == MPI_REQUEST_NULL) return;
    MPI_Status status;
    MPI_Cancel(&l->req);
    MPI_Wait(&l->req, &status); /* completes locally for a cancelled receive */
    int cancelled = 0;
    MPI_Test_cancelled(&status, &cancelled);
    if (!cancelled) answer(m, g, status.MPI_SOURCE, what);
}

static void abandon(mpi_impl *m, tr_comm_request *req, mpi_req *r) {
    req->impl = NULL; /* never freed while MPI may still write into it */
    if (m->n_abandoned == m->cap_abandoned) {
        int cap = m->cap_abandoned ? 2 * m->cap_abandoned : 4;
        mpi_req **grown = realloc(m->abandoned, sizeof *grown * (size_t)cap);
        if (!grown) return; /* leaked rather than freed under MPI's feet; we are aborting */
        m->abandoned = grown;
        m->cap_abandoned = cap;
    }
    m->abandoned[m->n_abandoned++] = r;
}

static void append_rank(char *buf, size_t cap, const char *sep, int world_rank) {
    size_t len = strlen(buf);
    if (len + 1 < cap) snprintf(buf + len, cap - len, "%s%d", len ? sep : "", world_rank);
}

/* Ask every other member which call it is in, and wait a short grace period for answers. */
static void probe_members(mpi_impl *m, int g, mpi_req *r, double grace, ask_listener *l) {
    int p = m->size[g], me = m->rank[g];
    r->answers = calloc((size_t)p, sizeof *r->answers);
    r->probe = malloc(sizeof *r->probe * 2 * (size_t)p);
    if (!r->answers || !r->probe || m->ctl[g] == MPI_COMM_NULL) return;
    MPI_Request *asks = r->probe, *answers = r->probe + p;
    for (int j = 0; j < p; j++) {
        asks[j] = answers[j] = MPI_REQUEST_NULL;
        r->answers[j][0] = -1;
        if (j == me) continue;
        MPI_Isend(r->ask, 2, MPI_INT64_T, j, TAG_ASK, m->ctl[g], &asks[j]);
        MPI_Irecv(r->answers[j], 2, MPI_INT64_T, j, TAG_ANSWER, m->ctl[g], &answers[j]);
    }
    double until = now_s() + grace;
    int spins = 0, left = p - 1;
    while (left > 0 && now_s() < until) {
        left = 0;
        for (int j = 0; j < p; j++) {
            int flag = 1;
            if (answers[j] != MPI_REQUEST_NULL) MPI_Test(&answers[j], &flag, MPI_STATUS_IGNORE);
            left += !flag;
        }
        listen_serve(m, g, l, r->ask);
        backoff(&spins);
    }
    for (int j = 0; j < p; j++) {
        if (answers[j] == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&answers[j]);
        r->answers[j][0] = -1;
    }
}

/* True when every other member answered: it waits in this call, or already in a later one on
 * this group (it finished its part). The questions were all received then, so their sends
 * complete; the probe's state is dropped so that a later timeout asks afresh. */
static bool all_members_here(mpi_impl *m, int g, mpi_req *r, ask_listener *l) {
    /* Members in a wait answer within milliseconds; a launcher that follows its SIGTERM with
     * a SIGKILL a second later (mpirun) leaves little more than that. */
    probe_members(m, g, r, 0.25, l);
    int p = m->size[g], me = m->rank[g];
    bool here = r->answers && r->probe && m->ctl[g] != MPI_COMM_NULL;
    for (int j = 0; here && j < p; j++) here = j == me || r->answers[j][0] >= r->seq;
    if (!here) return false;
    for (int j = 0; j < p; j++)
        if (r->probe[j] != MPI_REQUEST_NULL) MPI_Wait(&r->probe[j], MPI_STATUS_IGNORE);
    free(r->answers);
    free(r->probe);
    r->answers = NULL;
    r->probe = NULL;
    return true;
}

/* How a wait ended, for the diagnostic: the timeout, or the stop signal it gave way to. */
static const char *why_ended(const tr_comm *c, bool stopped, char *buf, size_t cap) {
    if (stopped)
        snprintf(buf, cap, "was given up %.0f s after a stop signal (SIGTERM/SIGINT)",
                 TR_COMM_STOP_GRACE_S);
    else
        snprintf(buf, cap, "did not complete within %.1f s", c->timeout_s);
    return buf;
}

static tr_status report_collective_timeout(tr_comm *c, tr_comm_request *req, mpi_req *r,
                                           double waited, ask_listener *l, bool stopped) {
    mpi_impl *m = impl_of(c);
    int g = req->group, p = m->size[g], me = m->rank[g];
    double grace = stopped ? 0.2 : c->timeout_s * 0.25;
    grace = grace < 0.2 ? 0.2 : grace > 1.0 ? 1.0 : grace; /* members in a wait answer in ms */
    char why[96];
    if (!r->answers) probe_members(m, g, r, grace, l); /* else a stop signal's probe answered */
    char members[512] = "", silent[512] = "", same[512] = "", other[1024] = "";
    for (int j = 0; j < p; j++) {
        append_rank(members, sizeof members, ",", m->members[g][j]);
        if (j == me || !r->answers) continue;
        const int64_t *a = r->answers[j];
        if (a[0] < 0) {
            append_rank(silent, sizeof silent, " ", m->members[g][j]);
        } else if (a[0] == r->seq && a[1] == (int64_t)req->kind) {
            append_rank(same, sizeof same, " ", m->members[g][j]);
        } else {
            size_t len = strlen(other);
            if (len + 1 < sizeof other)
                snprintf(other + len, sizeof other - len, "%s%d in %s #%lld", *other ? ", " : "",
                         m->members[g][j], tr_comm_kind_name((tr_comm_kind)a[1]), (long long)a[0]);
        }
    }
    tr_diag_add(c->diags, TR_SEV_ERROR, "comm.timeout", NULL,
                "dist.distributed_timeout_minutes,dist.distributed_timeout_seconds",
                "the silent ranks are stopped, dead, computing, or waiting on another group; "
                "read their output. Raise dist.distributed_timeout_minutes if they are only slow",
                "%s #%lld on group %s (world ranks %s) %s on world rank %d (waited %.1f s): "
                "did not answer: %s; waiting in the same call: %s%s%s",
                tr_comm_kind_name(req->kind), (long long)r->seq, tr_comm_group_name(g), members,
                why_ended(c, stopped, why, sizeof why), m->members[g][me], waited,
                *silent ? silent : "none", *same ? same : "none", *other ? "; elsewhere: " : "",
                other);
    return TR_ERR_COMM;
}

static tr_status report_p2p_timeout(tr_comm *c, tr_comm_request *req, mpi_req *r, double waited,
                                    bool stopped) {
    mpi_impl *m = impl_of(c);
    int g = req->group;
    char why[96];
    char peers[512] = "";
    for (int i = 0; i < r->n; i++) {
        if (r->reqs[i] == MPI_REQUEST_NULL) continue;
        size_t len = strlen(peers);
        if (len + 1 < sizeof peers)
            snprintf(peers + len, sizeof peers - len, "%s%s world rank %d (group rank %d)",
                     *peers ? ", " : "", r->sends[i] ? "send to" : "recv from",
                     m->members[g][r->peers[i]], r->peers[i]);
        /* A receive nobody matched can be withdrawn, so the comm stays clean for tests. */
        if (!r->sends[i]) {
            MPI_Status status;
            MPI_Cancel(&r->reqs[i]);
            MPI_Wait(&r->reqs[i], &status);
        }
    }
    tr_diag_add(c->diags, TR_SEV_ERROR, "comm.timeout", NULL,
                "dist.distributed_timeout_minutes,dist.distributed_timeout_seconds",
                "the peer is stopped, dead, or in a different operation (check that both sides "
                "send and receive in matching order); read its output",
                "%s on group %s %s on world rank %d (waited %.1f s): no answer for %s",
                tr_comm_kind_name(req->kind), tr_comm_group_name(g),
                why_ended(c, stopped, why, sizeof why), m->members[g][m->rank[g]], waited, peers);
    return TR_ERR_COMM;
}

static tr_status mpi_wait(tr_comm *c, tr_comm_request *req) {
    mpi_impl *m = impl_of(c);
    mpi_req *r = req->impl;
    int g = req->group, spins = 0;
    double t0 = now_s(), deadline = t0 + c->timeout_s, stop_seen = -1;
    bool stop_cleared = false;
    ask_listener l = {MPI_REQUEST_NULL, {0, 0}};
    if (r->collective) listen_post(m, g, &l);
    tr_status st = TR_OK;
    for (;;) {
        bool done;
        st = poll_once(c, req, r, &done);
        if (st != TR_OK || done) break;
        if (r->collective) listen_serve(m, g, &l, r->ask);
        double t = now_s();
        if (stop_seen < 0 && tr_comm_stop_requested()) stop_seen = t;
        bool stopped = stop_seen >= 0 && t - stop_seen >= TR_COMM_STOP_GRACE_S;
        /* A collective whose members all answer from a wait of this group is slow, not stuck:
         * after a stop signal it may finish (and the run save, like Megatron's exit-signal
         * handling), bounded by the timeout as ever. Asked once; a member silent for the grace
         * (stopped, dead, or computing outside any wait on this group) ends the wait now. */
        if (stopped && !stop_cleared && r->collective && t < deadline) {
            stop_cleared = true;
            if (all_members_here(m, g, r, &l)) continue;
            stopped = true;
        } else if (stop_cleared) {
            stopped = false;
        }
        if (t >= deadline || stopped) {
            st = r->collective ? report_collective_timeout(c, req, r, t - t0, &l, stopped)
                               : report_p2p_timeout(c, req, r, t - t0, stopped);
            bool pending = false;
            for (int i = 0; i < r->n; i++) pending |= r->reqs[i] != MPI_REQUEST_NULL;
            listen_stop(m, g, &l, r->ask);
            if (pending || r->probe) abandon(m, req, r);
            return st;
        }
        backoff(&spins);
    }
    listen_stop(m, g, &l, r->ask);
    if (st == TR_OK) finish(r);
    return st;
}

static tr_status mpi_test(tr_comm *c, tr_comm_request *req, bool *done) {
    mpi_req *r = req->impl;
    TR_TRY(poll_once(c, req, r, done));
    if (*done) finish(r);
    return TR_OK;
}

static void mpi_release(tr_comm *c, tr_comm_request *req) {
    (void)c;
    free_req(req->impl);
    req->impl = NULL;
}

static void mpi_abort(tr_comm *c, int exit_code) {
    MPI_Abort(impl_of(c)->ps->world, exit_code);
    exit(exit_code); /* not reached: MPI_Abort ends the process */
}

static void mpi_destroy(tr_comm *c) {
    mpi_impl *m = impl_of(c);
    for (int i = 0; i < N_ANSWER_SLOTS; i++) {
        if (m->answers[i].req == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Test(&m->answers[i].req, &flag, MPI_STATUS_IGNORE);
        if (!flag) MPI_Request_free(&m->answers[i].req);
    }
    for (int i = 0; i < m->n_abandoned; i++) free_req(m->abandoned[i]);
    free(m->abandoned);
    for (int g = 0; g < TR_COMM_GROUP_SLOTS; g++) {
        if (m->ctl[g] != MPI_COMM_NULL) MPI_Comm_free(&m->ctl[g]);
        free(m->members[g]);
    }
    free(m);
    free(c);
}

static const tr_comm_backend mpi_backend = {
    .name = "mpi",
    .group_size = mpi_group_size,
    .group_rank = mpi_group_rank,
    .world_rank_of = mpi_world_rank_of,
    .start = mpi_start,
    .test = mpi_test,
    .wait = mpi_wait,
    .release = mpi_release,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

static tr_status map_group(mpi_impl *m, int g, MPI_Comm comm) {
    m->comm[g] = comm;
    m->ctl[g] = MPI_COMM_NULL;
    m->rank[g] = -1;
    m->size[g] = 0;
    if (comm == MPI_COMM_NULL) return TR_OK;
    MPI_Comm_rank(comm, &m->rank[g]);
    MPI_Comm_size(comm, &m->size[g]);
    /* Every rank duplicates in slot order, so the collective dups cannot cross. */
    MPI_Comm_dup(comm, &m->ctl[g]);
    MPI_Comm_set_errhandler(m->ctl[g], MPI_ERRORS_RETURN);
    m->members[g] = malloc(sizeof(int) * (size_t)m->size[g]);
    int *mine = malloc(sizeof(int) * (size_t)m->size[g]);
    if (!m->members[g] || !mine) {
        free(mine);
        return TR_ERR_NOMEM;
    }
    MPI_Group from, to;
    MPI_Comm_group(comm, &from);
    MPI_Comm_group(m->ps->world, &to);
    for (int j = 0; j < m->size[g]; j++) mine[j] = j;
    MPI_Group_translate_ranks(from, m->size[g], mine, to, m->members[g]);
    MPI_Group_free(&from);
    MPI_Group_free(&to);
    free(mine);
    return TR_OK;
}

tr_status tr_comm_mpi_create(const tr_parallel_state *ps, const tr_comm_options *opt,
                             tr_diags *diags, tr_comm **out) {
    *out = NULL;
    tr_comm *c = calloc(1, sizeof *c);
    mpi_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        free(c);
        free(m);
        return TR_ERR_NOMEM;
    }
    m->ps = ps;
    for (int i = 0; i < N_ANSWER_SLOTS; i++) m->answers[i].req = MPI_REQUEST_NULL;
    c->backend = &mpi_backend;
    c->impl = m;
    c->diags = diags;
    c->timeout_s = opt && opt->timeout_s > 0 ? opt->timeout_s : TR_COMM_DEFAULT_TIMEOUT_S;
    c->reduce_mode = opt ? opt->reduce_mode : TR_COMM_REDUCE_NATIVE;
    tr_status st = TR_OK;
    for (int g = 0; g < TR_COMM_GROUP_SLOTS; g++) {
        MPI_Comm comm = g == TR_COMM_WORLD ? ps->world : ps->groups[g].comm;
        tr_status s = map_group(m, g, comm);
        if (st == TR_OK) st = s; /* keep going: the dups are collective */
    }
    if (st != TR_OK) {
        mpi_destroy(c);
        return st;
    }
    *out = c;
    return TR_OK;
}
