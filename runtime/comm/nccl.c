/* The NCCL backend of the comm interface for device buffers (runtime/comm/nccl.h). */
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/cuda_internal.h"
#include "runtime/comm/nccl.h"
#include "runtime/parallel/state.h"

#ifdef TRESTLE_HAVE_NCCL
#include <nccl.h>

enum { NCCL_MAX_NAMED_PEERS = 8 };

typedef struct nccl_req {
    cudaEvent_t done;
    void *tmp; /* in-place all-to-all copy, freed on the group's stream after use */
    bool finished;
    /* For the timeout diagnostic: the p2p peers (group ranks) and their direction. */
    int n_peers;
    int peers[NCCL_MAX_NAMED_PEERS];
    bool sends[NCCL_MAX_NAMED_PEERS];
} nccl_req;

typedef struct nccl_impl {
    tr_comm *mpi; /* group membership, abort, and the bootstrap */
    ncclComm_t comm[TR_COMM_GROUP_SLOTS];
    cudaStream_t stream[TR_COMM_GROUP_SLOTS];
    bool timed_out[TR_COMM_GROUP_SLOTS];
    int alias[TR_COMM_GROUP_SLOTS]; /* slot whose communicator this one shares, or -1 */
    cudaStream_t compute;
    float *barrier_buf;
} nccl_impl;

static nccl_impl *nccl_of(const tr_comm *c) {
    return (nccl_impl *)c->impl;
}

static int nccl_group_size(const tr_comm *c, int g) {
    tr_comm *m = nccl_of(c)->mpi;
    return m->backend->group_size(m, g);
}
static int nccl_group_rank(const tr_comm *c, int g) {
    tr_comm *m = nccl_of(c)->mpi;
    return m->backend->group_rank(m, g);
}
static int nccl_world_rank_of(const tr_comm *c, int g, int r) {
    tr_comm *m = nccl_of(c)->mpi;
    return m->backend->world_rank_of(m, g, r);
}

static ncclDataType_t nccl_type(tr_comm_dtype t) {
    switch (t) {
    case TR_COMM_F32:
        return ncclFloat32;
    case TR_COMM_F64:
        return ncclFloat64;
    case TR_COMM_I32:
        return ncclInt32;
    case TR_COMM_I64:
        return ncclInt64;
    default:
        return ncclUint8;
    }
}

static ncclRedOp_t nccl_op(tr_comm_op op) {
    return op == TR_COMM_MAX ? ncclMax : op == TR_COMM_MIN ? ncclMin : ncclSum;
}

static tr_status nccl_failed(tr_comm *c, ncclResult_t r, const char *what, int group) {
    return tr_diag_add(c->diags, TR_SEV_ERROR, "comm.nccl", NULL, NULL,
                       "rerun with NCCL_DEBUG=WARN for NCCL's own account",
                       "%s on group %s: NCCL error %s", what, tr_comm_group_name(group),
                       ncclGetErrorString(r));
}

#define NCCL_TRY(c, call, what, g)                                                                 \
    do {                                                                                           \
        ncclResult_t nr_ = (call);                                                                 \
        if (nr_ != ncclSuccess) return nccl_failed((c), nr_, (what), (g));                         \
    } while (0)

static tr_status nccl_enqueue_v(tr_comm *c, const tr_comm_call *call, const char *send, char *recv,
                                int p, cudaStream_t st) {
    nccl_impl *m = nccl_of(c);
    int g = call->group;
    size_t es = tr_comm_dtype_size(call->dtype), soff = 0, roff = 0;
    ncclDataType_t dt = nccl_type(call->dtype);
    for (int j = 0; j < p; j++) {
        bool v = call->kind == TR_COMM_ALL_TO_ALLV;
        size_t sc = v ? call->send_counts[j] : call->count;
        size_t rc = v ? call->recv_counts[j] : call->count;
        size_t sat = v && call->send_displs ? call->send_displs[j] : soff;
        size_t rat = v && call->recv_displs ? call->recv_displs[j] : roff;
        NCCL_TRY(c, ncclSend(send + sat * es, sc, dt, j, m->comm[g], st), "all_to_all", g);
        NCCL_TRY(c, ncclRecv(recv + rat * es, rc, dt, j, m->comm[g], st), "all_to_all", g);
        soff += sc;
        roff += rc;
    }
    return TR_OK;
}

static tr_status nccl_enqueue(tr_comm *c, const tr_comm_call *call, nccl_req *r) {
    nccl_impl *m = nccl_of(c);
    int g = call->group, p = nccl_group_size(c, g), me = nccl_group_rank(c, g);
    ncclComm_t nc = m->comm[g];
    cudaStream_t st = m->stream[g];
    size_t es = tr_comm_dtype_size(call->dtype), n = call->count;
    ncclDataType_t dt = nccl_type(call->dtype);
    char *recv = call->recv;
    const char *send = call->send;
    const char *what = tr_comm_kind_name(call->kind);
    switch (call->kind) {
    case TR_COMM_ALL_REDUCE:
        NCCL_TRY(c, ncclAllReduce(send ? send : recv, recv, n, dt, nccl_op(call->op), nc, st), what,
                 g);
        break;
    case TR_COMM_REDUCE_SCATTER:
        NCCL_TRY(c,
                 ncclReduceScatter(send ? send : recv, send ? recv : recv + (size_t)me * n * es, n,
                                   dt, nccl_op(call->op), nc, st),
                 what, g);
        break;
    case TR_COMM_ALL_GATHER:
        NCCL_TRY(c, ncclAllGather(send ? send : recv + (size_t)me * n * es, recv, n, dt, nc, st),
                 what, g);
        break;
    case TR_COMM_ALL_TO_ALL:
    case TR_COMM_ALL_TO_ALLV: {
        if (!send) { /* in place: send from a copy of recv */
            size_t send_n, recv_n;
            tr_comm_call_extents(call, p, &send_n, &recv_n);
            cudaError_t e = cudaMallocAsync(&r->tmp, recv_n * es + 1, st);
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(r->tmp, recv, recv_n * es, cudaMemcpyDeviceToDevice, st);
            if (e != cudaSuccess) return tr_comm_cuda_failed(c, e, what, g);
            send = r->tmp;
        }
        NCCL_TRY(c, ncclGroupStart(), what, g);
        tr_status s = nccl_enqueue_v(c, call, send, recv, p, st);
        NCCL_TRY(c, ncclGroupEnd(), what, g);
        if (s != TR_OK) return s;
        break;
    }
    case TR_COMM_BROADCAST:
        NCCL_TRY(c, ncclBroadcast(recv, recv, n, dt, call->root, nc, st), what, g);
        break;
    case TR_COMM_SEND:
        NCCL_TRY(c, ncclSend(send, n, dt, call->peer, nc, st), what, g);
        break;
    case TR_COMM_RECV:
        NCCL_TRY(c, ncclRecv(recv, n, dt, call->peer, nc, st), what, g);
        break;
    case TR_COMM_P2P_BATCH:
        NCCL_TRY(c, ncclGroupStart(), what, g);
        for (int i = 0; i < call->n_p2p; i++) {
            const tr_comm_p2p *t = &call->p2p[i];
            ncclResult_t nr =
                t->is_send ? ncclSend(t->buf, t->count, nccl_type(t->dtype), t->peer, nc, st)
                           : ncclRecv(t->buf, t->count, nccl_type(t->dtype), t->peer, nc, st);
            if (nr != ncclSuccess) {
                ncclGroupEnd();
                return nccl_failed(c, nr, what, g);
            }
        }
        NCCL_TRY(c, ncclGroupEnd(), what, g);
        break;
    case TR_COMM_BARRIER:
        NCCL_TRY(c, ncclAllReduce(m->barrier_buf, m->barrier_buf, 1, ncclFloat32, ncclSum, nc, st),
                 what, g);
        break;
    default:
        return TR_ERR_INTERNAL;
    }
    if (r->tmp) {
        cudaError_t e = cudaFreeAsync(r->tmp, st);
        r->tmp = NULL;
        if (e != cudaSuccess) return tr_comm_cuda_failed(c, e, what, g);
    }
    return TR_OK;
}

static tr_status nccl_start_into(tr_comm *c, const tr_comm_call *call, nccl_req *r) {
    nccl_impl *m = nccl_of(c);
    int g = call->group;
    if (c->reduce_mode == TR_COMM_REDUCE_RANK_ORDER &&
        (call->kind == TR_COMM_ALL_REDUCE || call->kind == TR_COMM_REDUCE_SCATTER))
        return tr_diag_add(c->diags, TR_SEV_ERROR, "comm.nccl_rank_order", NULL,
                           "dist.distributed_backend",
                           "use dist.distributed_backend=mpi for "
                           "rank-order reproducibility runs",
                           "%s on group %s: rank-order reductions are not implemented on NCCL",
                           tr_comm_kind_name(call->kind), tr_comm_group_name(g));
    if (!m->comm[g])
        return tr_diag_add(c->diags, TR_SEV_ERROR, "comm.bad_call", NULL, NULL, NULL,
                           "%s on group %s: this rank is in no such group",
                           tr_comm_kind_name(call->kind), tr_comm_group_name(g));
    cudaEvent_t ready;
    cudaError_t e = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    if (e == cudaSuccess) {
        /* The transfer waits for what the compute stream has queued so far, and only that. */
        e = cudaEventRecord(ready, m->compute);
        if (e == cudaSuccess) e = cudaStreamWaitEvent(m->stream[g], ready, 0);
        cudaEventDestroy(ready);
    }
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming);
    if (e != cudaSuccess) return tr_comm_cuda_failed(c, e, tr_comm_kind_name(call->kind), g);
    TR_TRY(nccl_enqueue(c, call, r));
    e = cudaEventRecord(r->done, m->stream[g]);
    return e == cudaSuccess ? TR_OK : tr_comm_cuda_failed(c, e, tr_comm_kind_name(call->kind), g);
}

/* On failure the front end frees the request without a release, so clean up here. */
static tr_status nccl_start(tr_comm *c, const tr_comm_call *call, tr_comm_request *req) {
    nccl_req *r = calloc(1, sizeof *r);
    if (!r) return TR_ERR_NOMEM;
    if (call->kind == TR_COMM_SEND || call->kind == TR_COMM_RECV) {
        r->n_peers = 1;
        r->peers[0] = call->peer;
        r->sends[0] = call->kind == TR_COMM_SEND;
    }
    for (int i = 0; call->kind == TR_COMM_P2P_BATCH && i < call->n_p2p; i++)
        if (r->n_peers < NCCL_MAX_NAMED_PEERS) {
            r->peers[r->n_peers] = call->p2p[i].peer;
            r->sends[r->n_peers++] = call->p2p[i].is_send;
        }
    tr_status st = nccl_start_into(c, call, r);
    if (st != TR_OK) {
        if (r->done) cudaEventDestroy(r->done);
        free(r);
        return st;
    }
    req->impl = r;
    return TR_OK;
}

static tr_status nccl_poll(tr_comm *c, tr_comm_request *req, bool *done) {
    nccl_impl *m = nccl_of(c);
    nccl_req *r = req->impl;
    cudaError_t e = cudaEventQuery(r->done);
    if (e == cudaSuccess) {
        *done = r->finished = true;
        /* Later compute on the compute stream must also see the result. */
        e = cudaStreamWaitEvent(m->compute, r->done, 0);
        return e == cudaSuccess ? TR_OK : tr_comm_cuda_failed(c, e, "completion", req->group);
    }
    *done = false;
    if (e != cudaErrorNotReady) return tr_comm_cuda_failed(c, e, "completion", req->group);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(m->comm[req->group], &async);
    if (async != ncclSuccess && async != ncclInProgress)
        return nccl_failed(c, async, tr_comm_kind_name(req->kind), req->group);
    return TR_OK;
}

static tr_status nccl_test(tr_comm *c, tr_comm_request *req, bool *done) {
    return nccl_poll(c, req, done);
}

/* Who the wait depended on, in world ranks: the p2p peers, else every other group member. NCCL
 * cannot say which of them never arrived, so all are named. */
static void describe_peers(const tr_comm *c, const tr_comm_request *req, const nccl_req *r,
                           char *buf, size_t cap) {
    int g = req->group, p = nccl_group_size(c, g), me = nccl_group_rank(c, g);
    size_t len = 0;
    buf[0] = '\0';
    int n = r->n_peers ? r->n_peers : p;
    for (int i = 0; i < n && len + 1 < cap; i++) {
        int peer = r->n_peers ? r->peers[i] : i;
        if (!r->n_peers && peer == me) continue;
        const char *dir = !r->n_peers ? "" : r->sends[i] ? "send to " : "recv from ";
        int w = snprintf(buf + len, cap - len, "%s%sworld rank %d (group rank %d)", len ? ", " : "",
                         dir, nccl_world_rank_of(c, g, peer), peer);
        if (w < 0) break;
        len += (size_t)w < cap - len ? (size_t)w : cap - len - 1;
    }
    if (!buf[0]) snprintf(buf, cap, "none");
}

/* Bounded like the MPI waits (runtime/comm/mpi.c): by c->timeout_s, and by the stop flag a
 * grace period after SIGTERM/SIGINT. NCCL cannot be asked which members are in the call, so
 * after a stop signal a collective still running after the grace is given up even if every
 * member is in it (docs/comm.md). The communicator is aborted at destroy either way. */
static tr_status nccl_wait(tr_comm *c, tr_comm_request *req) {
    int spins = 0;
    double stop_seen = -1;
    for (;;) {
        bool done = false;
        TR_TRY(nccl_poll(c, req, &done));
        if (done) return TR_OK;
        double t = tr_comm_now_s(), waited = t - req->started_s;
        if (stop_seen < 0 && tr_comm_stop_requested()) stop_seen = t;
        bool stopped = stop_seen >= 0 && t - stop_seen >= TR_COMM_STOP_GRACE_S;
        if (waited > c->timeout_s || stopped) {
            nccl_impl *m = nccl_of(c);
            int g = req->group;
            m->timed_out[m->alias[g] >= 0 ? m->alias[g] : g] = true;
            char why[96], peers[640];
            if (stopped)
                snprintf(why, sizeof why,
                         "was given up %.0f s after a stop signal (SIGTERM/SIGINT)",
                         TR_COMM_STOP_GRACE_S);
            else
                snprintf(why, sizeof why, "did not complete within %.1f s", c->timeout_s);
            describe_peers(c, req, req->impl, peers, sizeof peers);
            return tr_diag_add(
                c->diags, TR_SEV_ERROR, "comm.timeout", NULL,
                "dist.distributed_timeout_minutes,dist.distributed_timeout_seconds",
                "a peer never reached this call: look for a rank stuck in compute or dead; raise "
                "dist.distributed_timeout_minutes only if the work is really that slow",
                "%s on group %s (NCCL) %s on world rank %d (waited %.1f s); it waited for %s",
                tr_comm_kind_name(req->kind), tr_comm_group_name(g), why,
                nccl_world_rank_of(c, g, nccl_group_rank(c, g)), waited, peers);
        }
        tr_comm_nap(&spins);
    }
}

static void nccl_release(tr_comm *c, tr_comm_request *req) {
    (void)c;
    nccl_req *r = req->impl;
    req->impl = NULL;
    if (!r) return;
    /* An unfinished event is still referenced by the stream; destroying it is allowed (the
     * resources go once it completes), and the communicator is aborted at destroy. */
    if (r->done) cudaEventDestroy(r->done);
    free(r);
}

static void nccl_abort(tr_comm *c, int exit_code) {
    nccl_impl *m = nccl_of(c);
    for (int g = 0; g < TR_COMM_GROUP_SLOTS; g++)
        if (m->comm[g] && m->alias[g] < 0) ncclCommAbort(m->comm[g]);
    m->mpi->backend->abort(m->mpi, exit_code);
}

static void nccl_destroy(tr_comm *c) {
    nccl_impl *m = nccl_of(c);
    for (int g = 0; g < TR_COMM_GROUP_SLOTS; g++) {
        if (m->alias[g] >= 0) continue; /* owned by the slot it shares */
        if (m->comm[g]) {
            if (m->timed_out[g])
                ncclCommAbort(m->comm[g]);
            else
                ncclCommDestroy(m->comm[g]);
        }
        if (m->stream[g]) cudaStreamDestroy(m->stream[g]);
    }
    cudaFree(m->barrier_buf);
    tr_comm_destroy(m->mpi);
    free(m);
    free(c);
}

static const tr_comm_backend nccl_backend = {
    .name = "nccl",
    .group_size = nccl_group_size,
    .group_rank = nccl_group_rank,
    .world_rank_of = nccl_world_rank_of,
    .start = nccl_start,
    .test = nccl_test,
    .wait = nccl_wait,
    .release = nccl_release,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

#define DEVICE_KEY 160

/* NCCL refuses (or hangs on) two ranks of one communicator on the same GPU. Every rank learns
 * every rank's (host, PCI bus id), so all of them reach the same verdict and none is left
 * waiting in ncclCommInitRank. */
static tr_status check_distinct_gpus(tr_comm *c, const tr_parallel_state *ps, tr_comm *mpi) {
    char mine[DEVICE_KEY] = {0}, bus[64] = {0};
    int dev = 0, len = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dev);
    if (e != cudaSuccess) return tr_comm_cuda_failed(c, e, "device lookup", TR_COMM_WORLD);
    char host[MPI_MAX_PROCESSOR_NAME] = {0};
    MPI_Get_processor_name(host, &len);
    snprintf(mine, sizeof mine, "%.90s/%.60s", host, bus);
    char *all = calloc((size_t)ps->world_size, DEVICE_KEY);
    if (!all) return TR_ERR_NOMEM;
    MPI_Allgather(mine, DEVICE_KEY, MPI_CHAR, all, DEVICE_KEY, MPI_CHAR, ps->world);
    tr_status st = TR_OK;
    for (int g = 0; g < TR_COMM_GROUP_SLOTS && st == TR_OK; g++) {
        int p = mpi->backend->group_size(mpi, g);
        for (int a = 0; a < p && st == TR_OK; a++)
            for (int b = a + 1; b < p && st == TR_OK; b++) {
                int wa = mpi->backend->world_rank_of(mpi, g, a);
                int wb = mpi->backend->world_rank_of(mpi, g, b);
                if (strcmp(all + (size_t)wa * DEVICE_KEY, all + (size_t)wb * DEVICE_KEY) == 0)
                    st = tr_diag_add(c->diags, TR_SEV_ERROR, "comm.nccl_shared_gpu", NULL,
                                     "dist.distributed_backend",
                                     "give every rank its own GPU, or set "
                                     "dist.distributed_backend=mpi (host-staged) to share one",
                                     "world ranks %d and %d of group %s both use GPU %s", wa, wb,
                                     tr_comm_group_name(g), all + (size_t)wa * DEVICE_KEY);
            }
    }
    free(all);
    return st;
}

/* Same ranks in the same order. Every member of the group reaches the same answer (the groups
 * are the same sets for all of them), so they skip or join the bootstrap together. */
static bool same_members(tr_comm *c, int g, int h) {
    int p = nccl_group_size(c, g);
    if (p != nccl_group_size(c, h)) return false;
    for (int r = 0; r < p; r++)
        if (nccl_world_rank_of(c, g, r) != nccl_world_rank_of(c, h, r)) return false;
    return true;
}

static tr_status nccl_init_groups(tr_comm *c, const tr_parallel_state *ps) {
    nccl_impl *m = nccl_of(c);
    for (int g = 0; g < TR_COMM_GROUP_SLOTS; g++) {
        MPI_Comm comm = g == TR_COMM_WORLD ? ps->world : ps->groups[g].comm;
        if (comm == MPI_COMM_NULL) continue;
        /* Many groups coincide on small layouts (TP=1: tp, cp, ep... are singletons); each NCCL
         * communicator costs an init and device buffers, so identical groups share one. */
        int same = -1;
        for (int h = 0; h < g && same < 0; h++)
            if (m->comm[h] && m->alias[h] < 0 && same_members(c, g, h)) same = h;
        if (same >= 0) {
            m->comm[g] = m->comm[same];
            m->stream[g] = m->stream[same];
            m->alias[g] = same;
            continue;
        }
        int rank = nccl_group_rank(c, g), size = nccl_group_size(c, g);
        ncclUniqueId id;
        memset(&id, 0, sizeof id);
        if (rank == 0) NCCL_TRY(c, ncclGetUniqueId(&id), "ncclGetUniqueId", g);
        MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm);
        NCCL_TRY(c, ncclCommInitRank(&m->comm[g], size, id, rank), "ncclCommInitRank", g);
        cudaError_t e = cudaStreamCreateWithFlags(&m->stream[g], cudaStreamNonBlocking);
        if (e != cudaSuccess) return tr_comm_cuda_failed(c, e, "stream creation", g);
    }
    return TR_OK;
}

tr_status tr_comm_nccl_create(const tr_parallel_state *ps, const tr_comm_options *opt,
                              void *compute_stream, tr_diags *diags, tr_comm **out) {
    *out = NULL;
    tr_comm *c = calloc(1, sizeof *c);
    nccl_impl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        free(c);
        free(m);
        return TR_ERR_NOMEM;
    }
    tr_status st = tr_comm_mpi_create(ps, opt, diags, &m->mpi);
    if (st != TR_OK) {
        free(c);
        free(m);
        return st;
    }
    c->backend = &nccl_backend;
    c->impl = m;
    c->diags = diags;
    c->timeout_s = m->mpi->timeout_s;
    c->reduce_mode = m->mpi->reduce_mode;
    m->compute = (cudaStream_t)compute_stream;
    for (int g = 0; g < TR_COMM_GROUP_SLOTS; g++) m->alias[g] = -1;
    st = check_distinct_gpus(c, ps, m->mpi);
    if (st == TR_OK) {
        cudaError_t e = cudaMalloc((void **)&m->barrier_buf, sizeof(float));
        if (e != cudaSuccess) st = tr_comm_cuda_failed(c, e, "barrier buffer", TR_COMM_WORLD);
    }
    /* Every rank reached the same verdict above, so either all initialise or none does. */
    if (st == TR_OK) st = nccl_init_groups(c, ps);
    if (st != TR_OK) {
        nccl_destroy(c);
        return st;
    }
    *out = c;
    return TR_OK;
}

bool tr_comm_nccl_built(void) {
    return true;
}

#else /* no NCCL */

tr_status tr_comm_nccl_create(const tr_parallel_state *ps, const tr_comm_options *opt,
                              void *compute_stream, tr_diags *diags, tr_comm **out) {
    (void)ps, (void)opt, (void)compute_stream;
    *out = NULL;
    return tr_diag_add(diags, TR_SEV_ERROR, "comm.no_cuda", NULL, "dist.distributed_backend",
                       "build with CUDA and NCCL (nvcc and nccl.h found by CMake), or run on "
                       "the CPU backend",
                       "this build of Trestle has no NCCL backend");
}

bool tr_comm_nccl_built(void) {
    return false;
}

#endif
