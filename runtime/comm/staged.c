/* The host-staged MPI backend of the comm interface for device buffers (runtime/comm/staged.h):
 * buffers are copied to host memory, the MPI backend runs the operation, results are copied
 * back. */
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/cuda_internal.h"
#include "runtime/comm/staged.h"
#include "runtime/parallel/state.h"

#ifdef TRESTLE_HAVE_CUDA

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
        if (e != cudaSuccess) return tr_comm_cuda_failed(c, e, "staging to host", g);
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
    if (e != cudaSuccess)
        return tr_comm_cuda_failed(c, e, tr_comm_kind_name(call->kind), call->group);
    int p = staged_group_size(c, call->group);
    size_t es = tr_comm_dtype_size(call->dtype), send_n, recv_n;
    tr_comm_call_extents(call, p, &send_n, &recv_n);
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
    return e == cudaSuccess ? TR_OK : tr_comm_cuda_failed(c, e, "staging back to the device", g);
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

#else /* no CUDA */

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
