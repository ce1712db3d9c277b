/* NCCL and host-staged MPI backends of the comm interface for device buffers (runtime/comm/cuda.h).
 */
#include "runtime/comm/cuda.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/parallel/state.h"

#ifdef TRESTLE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef TRESTLE_HAVE_NCCL
#include <nccl.h>
#endif

#ifdef TRESTLE_HAVE_CUDA

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(int *spins) {
    if (++*spins < 200) return;
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

static tr_status cuda_failed(tr_comm *c, cudaError_t e, const char *what, int group) {
    return tr_diag_add(c->diags, TR_SEV_ERROR, "comm.cuda", NULL, NULL,
                       "check the device with nvidia-smi; an earlier kernel may have faulted",
                       "%s on group %s: CUDA error %s (%s)", what, tr_comm_group_name(group),
                       cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Elements a call reads from send and writes to recv (the extents the staging copies). */
static size_t v_extent(const size_t *counts, const size_t *displs, int p) {
    size_t end = 0, off = 0;
    for (int j = 0; j < p; j++) {
        size_t at = displs ? displs[j] : off;
        if (at + counts[j] > end) end = at + counts[j];
        off += counts[j];
    }
    return end;
}

static void call_extents(const tr_comm_call *call, int p, size_t *send_n, size_t *recv_n) {
    size_t n = call->count, pn = (size_t)p * n;
    *send_n = *recv_n = 0;
    switch (call->kind) {
    case TR_COMM_ALL_REDUCE:
        *send_n = n, *recv_n = n;
        break;
    case TR_COMM_REDUCE_SCATTER:
        *send_n = pn, *recv_n = call->send ? n : pn;
        break;
    case TR_COMM_ALL_GATHER:
        *send_n = n, *recv_n = pn;
        break;
    case TR_COMM_ALL_TO_ALL:
        *send_n = pn, *recv_n = pn;
        break;
    case TR_COMM_ALL_TO_ALLV:
        *send_n = v_extent(call->send_counts, call->send_displs, p);
        *recv_n = v_extent(call->recv_counts, call->recv_displs, p);
        break;
    case TR_COMM_BROADCAST:
    case TR_COMM_RECV:
        *recv_n = n;
        break;
    case TR_COMM_SEND:
        *send_n = n;
        break;
    default:
        break;
    }
}

/* ---------------------------------------------------------------- host-staged MPI ---------- */

typedef struct staged_req {
    tr_comm_request inner; /* the MPI backend's request over the host copies */
    void *hsend, *hrecv, *drecv;
    size_t recv_bytes;
    void **hp2p; /* host copy per batched transfer */
    int n_p2p;
    tr_comm_p2p *p2p;  /* the batch as handed to MPI (host copies) */
    tr_comm_p2p *dp2p; /* the caller's batch (device buffers to copy back), copied: a nonblocking
                          caller need not keep its array alive */
    bool done;
} staged_req;

typedef struct staged_impl {
    tr_comm *mpi;
    cudaStream_t compute;
    staged_req **abandoned; /* MPI may still write their host buffers */
    int n_abandoned, cap_abandoned;
} staged_impl;

static staged_impl *staged_of(const tr_comm *c) {
    return (staged_impl *)c->impl;
}

static void staged_free_req(staged_req *r) {
    if (!r) return;
    free(r->hsend);
    free(r->hrecv);
    for (int i = 0; i < r->n_p2p; i++) free(r->hp2p ? r->hp2p[i] : NULL);
    free(r->hp2p);
    free(r->p2p);
    free(r->dp2p);
    free(r);
}

static int staged_group_size(const tr_comm *c, int g) {
    tr_comm *m = staged_of(c)->mpi;
    return m->backend->group_size(m, g);
}
static int staged_group_rank(const tr_comm *c, int g) {
    tr_comm *m = staged_of(c)->mpi;
    return m->backend->group_rank(m, g);
}
static int staged_world_rank_of(const tr_comm *c, int g, int r) {
    tr_comm *m = staged_of(c)->mpi;
    return m->backend->world_rank_of(m, g, r);
}

/* A host copy of n bytes of buf (device or host memory); +1 so that n == 0 still allocates.
 * Copies run on the compute stream, so they are ordered with the kernels that use the buffers
 * (a plain cudaMemcpy would use the legacy stream, which a non-blocking compute stream ignores). */
static tr_status stage_in(tr_comm *c, const void *buf, size_t n, int g, void **out) {
    *out = malloc(n + 1);
    if (!*out) return TR_ERR_NOMEM;
    if (n && buf) {
        cudaStream_t st = staged_of(c)->compute;
        cudaError_t e = cudaMemcpyAsync(*out, buf, n, cudaMemcpyDefault, st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
        if (e != cudaSuccess) return cuda_failed(c, e, "staging to host", g);
    }
    return TR_OK;
}

static tr_status staged_start_batch(tr_comm *c, const tr_comm_call *call, staged_req *r,
                                    tr_comm_call *h) {
    int n = call->n_p2p;
    r->hp2p = calloc((size_t)n + 1, sizeof *r->hp2p);
    r->p2p = calloc((size_t)n + 1, sizeof *r->p2p);
    r->dp2p = calloc((size_t)n + 1, sizeof *r->dp2p);
    if (!r->hp2p || !r->p2p || !r->dp2p) return TR_ERR_NOMEM;
    r->n_p2p = n;
    if (n) memcpy(r->dp2p, call->p2p, sizeof *r->dp2p * (size_t)n);
    for (int i = 0; i < n; i++) {
        const tr_comm_p2p *t = &call->p2p[i];
        size_t bytes = t->count * tr_comm_dtype_size(t->dtype);
        TR_TRY(stage_in(c, t->is_send ? t->buf : NULL, bytes, call->group, &r->hp2p[i]));
        r->p2p[i] = *t;
        r->p2p[i].buf = r->hp2p[i];
    }
    h->p2p = r->p2p;
    return TR_OK;
}

static tr_status staged_start_into(tr_comm *c, const tr_comm_call *call, tr_comm_request *req,
                                   staged_req *r) {
    staged_impl *s = staged_of(c);
    /* The device data was produced on the compute stream; the copies below must see it. */
    cudaError_t e = cudaStreamSynchronize(s->compute);
    if (e != cudaSuccess) return cuda_failed(c, e, tr_comm_kind_name(call->kind), call->group);
    int p = staged_group_size(c, call->group);
    size_t es = tr_comm_dtype_size(call->dtype), send_n, recv_n;
    call_extents(call, p, &send_n, &recv_n);
    tr_comm_call h = *call;
    tr_status st = TR_OK;
    if (call->kind == TR_COMM_P2P_BATCH) {
        st = staged_start_batch(c, call, r, &h);
    } else {
        if (call->send) {
            st = stage_in(c, call->send, send_n * es, call->group, &r->hsend);
            h.send = r->hsend;
        }
        /* In-place forms read recv too, so it is staged in whole. */
        if (st == TR_OK && recv_n) {
            bool reads_recv = !call->send || call->kind == TR_COMM_BROADCAST;
            st = stage_in(c, reads_recv ? call->recv : NULL, recv_n * es, call->group, &r->hrecv);
            h.recv = r->hrecv;
            r->drecv = call->recv;
            r->recv_bytes = recv_n * es;
        }
    }
    if (st != TR_OK) return st;
    r->inner.kind = req->kind;
    r->inner.group = req->group;
    r->inner.started_s = req->started_s;
    return s->mpi->backend->start(s->mpi, &h, &r->inner);
}

/* On failure the front end frees the request without a release, so clean up here. */
static tr_status staged_start(tr_comm *c, const tr_comm_call *call, tr_comm_request *req) {
    staged_req *r = calloc(1, sizeof *r);
    if (!r) return TR_ERR_NOMEM;
    tr_status st = staged_start_into(c, call, req, r);
    if (st != TR_OK) {
        staged_free_req(r);
        return st;
    }
    req->impl = r;
    return TR_OK;
}

/* Results back on the compute stream; waiting for it before returning both orders them before
 * later kernels and lets the host copies be freed. */
static tr_status staged_finish(tr_comm *c, staged_req *r, int g) {
    cudaStream_t st = staged_of(c)->compute;
    r->done = true;
    cudaError_t e = cudaSuccess;
    if (r->drecv && r->recv_bytes)
        e = cudaMemcpyAsync(r->drecv, r->hrecv, r->recv_bytes, cudaMemcpyDefault, st);
    for (int i = 0; e == cudaSuccess && i < r->n_p2p; i++)
        if (!r->dp2p[i].is_send && r->dp2p[i].count)
            e = cudaMemcpyAsync(r->dp2p[i].buf, r->hp2p[i],
                                r->dp2p[i].count * tr_comm_dtype_size(r->dp2p[i].dtype),
                                cudaMemcpyDefault, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    return e == cudaSuccess ? TR_OK : cuda_failed(c, e, "staging back to the device", g);
}

static tr_status staged_wait(tr_comm *c, tr_comm_request *req) {
    staged_impl *s = staged_of(c);
    staged_req *r = req->impl;
    TR_TRY(s->mpi->backend->wait(s->mpi, &r->inner));
    return staged_finish(c, r, req->group);
}

static tr_status staged_test(tr_comm *c, tr_comm_request *req, bool *done) {
    staged_impl *s = staged_of(c);
    staged_req *r = req->impl;
    TR_TRY(s->mpi->backend->test(s->mpi, &r->inner, done));
    return *done ? staged_finish(c, r, req->group) : TR_OK;
}

static void staged_release(tr_comm *c, tr_comm_request *req) {
    staged_impl *s = staged_of(c);
    staged_req *r = req->impl;
    req->impl = NULL;
    if (!r) return;
    bool started = r->inner.impl != NULL;
    if (started) s->mpi->backend->release(s->mpi, &r->inner);
    if (r->done || !started) {
        staged_free_req(r);
        return;
    }
    /* Timed out: MPI may still write the host copies, so they live until destroy. */
    if (s->n_abandoned == s->cap_abandoned) {
        int cap = s->cap_abandoned ? 2 * s->cap_abandoned : 8;
        staged_req **a = realloc(s->abandoned, sizeof *a * (size_t)cap);
        if (!a) return; /* leaking is safer than freeing memory MPI may write */
        s->abandoned = a;
        s->cap_abandoned = cap;
    }
    s->abandoned[s->n_abandoned++] = r;
}

static void staged_abort(tr_comm *c, int exit_code) {
    tr_comm *m = staged_of(c)->mpi;
    m->backend->abort(m, exit_code);
}

static void staged_destroy(tr_comm *c) {
    staged_impl *s = staged_of(c);
    tr_comm_destroy(s->mpi);
    for (int i = 0; i < s->n_abandoned; i++) staged_free_req(s->abandoned[i]);
    free(s->abandoned);
    free(s);
    free(c);
}

static const tr_comm_backend staged_backend = {
    .name = "mpi-staged",
    .group_size = staged_group_size,
    .group_rank = staged_group_rank,
    .world_rank_of = staged_world_rank_of,
    .start = staged_start,
    .test = staged_test,
    .wait = staged_wait,
    .release = staged_release,
    .abort = staged_abort,
    .destroy = staged_destroy,
};

tr_status tr_comm_staged_create(const tr_parallel_state *ps, const tr_comm_options *opt,
                                void *compute_stream, tr_diags *diags, tr_comm **out) {
    *out = NULL;
    tr_comm *c = calloc(1, sizeof *c);
    staged_impl *s = calloc(1, sizeof *s);
    if (!c || !s) {
        free(c);
        free(s);
        return TR_ERR_NOMEM;
    }
    tr_status st = tr_comm_mpi_create(ps, opt, diags, &s->mpi);
    if (st != TR_OK) {
        free(c);
        free(s);
        return st;
    }
    s->compute = (cudaStream_t)compute_stream;
    c->backend = &staged_backend;
    c->impl = s;
    c->diags = diags;
    c->timeout_s = s->mpi->timeout_s;
    c->reduce_mode = s->mpi->reduce_mode;
    *out = c;
    return TR_OK;
}

bool tr_comm_staged_built(void) {
    return true;
}

#endif /* TRESTLE_HAVE_CUDA */

#ifdef TRESTLE_HAVE_NCCL

/* ---------------------------------------------------------------- NCCL ---------------------- */

typedef struct nccl_req {
    cudaEvent_t done;
    void *tmp; /* in-place all-to-all copy, freed on the group's stream after use */
    bool finished;
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
            call_extents(call, p, &send_n, &recv_n);
            cudaError_t e = cudaMallocAsync(&r->tmp, recv_n * es + 1, st);
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(r->tmp, recv, recv_n * es, cudaMemcpyDeviceToDevice, st);
            if (e != cudaSuccess) return cuda_failed(c, e, what, g);
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
        if (e != cudaSuccess) return cuda_failed(c, e, what, g);
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
    if (e != cudaSuccess) return cuda_failed(c, e, tr_comm_kind_name(call->kind), g);
    TR_TRY(nccl_enqueue(c, call, r));
    e = cudaEventRecord(r->done, m->stream[g]);
    return e == cudaSuccess ? TR_OK : cuda_failed(c, e, tr_comm_kind_name(call->kind), g);
}

/* On failure the front end frees the request without a release, so clean up here. */
static tr_status nccl_start(tr_comm *c, const tr_comm_call *call, tr_comm_request *req) {
    nccl_req *r = calloc(1, sizeof *r);
    if (!r) return TR_ERR_NOMEM;
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
        return e == cudaSuccess ? TR_OK : cuda_failed(c, e, "completion", req->group);
    }
    *done = false;
    if (e != cudaErrorNotReady) return cuda_failed(c, e, "completion", req->group);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(m->comm[req->group], &async);
    if (async != ncclSuccess && async != ncclInProgress)
        return nccl_failed(c, async, tr_comm_kind_name(req->kind), req->group);
    return TR_OK;
}

static tr_status nccl_test(tr_comm *c, tr_comm_request *req, bool *done) {
    return nccl_poll(c, req, done);
}

static tr_status nccl_wait(tr_comm *c, tr_comm_request *req) {
    int spins = 0;
    for (;;) {
        bool done = false;
        TR_TRY(nccl_poll(c, req, &done));
        if (done) return TR_OK;
        double waited = now_s() - req->started_s;
        if (waited > c->timeout_s) {
            nccl_impl *m = nccl_of(c);
            int g = req->group;
            m->timed_out[m->alias[g] >= 0 ? m->alias[g] : g] = true;
            return tr_diag_add(
                c->diags, TR_SEV_ERROR, "comm.timeout", NULL, "dist.distributed_timeout_minutes",
                "a peer never reached this call: look for a rank stuck in compute or dead; raise "
                "dist.distributed_timeout_minutes only if the work is really that slow",
                "%s on group %s (NCCL) did not complete within %.1f s",
                tr_comm_kind_name(req->kind), tr_comm_group_name(req->group), waited);
        }
        nap(&spins);
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
    if (e != cudaSuccess) return cuda_failed(c, e, "device lookup", TR_COMM_WORLD);
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
        if (e != cudaSuccess) return cuda_failed(c, e, "stream creation", g);
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
        if (e != cudaSuccess) st = cuda_failed(c, e, "barrier buffer", TR_COMM_WORLD);
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

#ifndef TRESTLE_HAVE_CUDA

tr_status tr_comm_staged_create(const tr_parallel_state *ps, const tr_comm_options *opt,
                                void *compute_stream, tr_diags *diags, tr_comm **out) {
    (void)ps, (void)opt, (void)compute_stream;
    *out = NULL;
    return tr_diag_add(diags, TR_SEV_ERROR, "comm.no_cuda", NULL, "dist.distributed_backend",
                       "build with CUDA (nvcc found by CMake), or run on the CPU backend, "
                       "where dist.distributed_backend=mpi works on host memory",
                       "this build of Trestle has no CUDA, so no device buffers to stage");
}

bool tr_comm_staged_built(void) {
    return false;
}

#endif
