/* The backend-neutral front end of runtime/comm/comm.h: every call is checked and booked in the
 * per-group counters here, then handed to the backend, so that every backend counts alike. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/config.h"
#include "runtime/comm/comm.h"

static const char *const kind_names[TR_COMM_KIND_COUNT] = {
    "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "all_to_allv",
    "broadcast",  "send",           "recv",       "p2p_batch",  "barrier"};
static const char *const dtype_names[TR_COMM_DTYPE_COUNT] = {"f32", "f64", "i32", "i64", "bytes"};
static const size_t dtype_sizes[TR_COMM_DTYPE_COUNT] = {4, 8, 4, 8, 1};
static const char *const op_names[TR_COMM_OP_COUNT] = {"sum", "max", "min"};

/* MPI guarantees tags up to 32767; the MPI backend keeps 32767 for batched transfers. */
#define TR_COMM_MAX_TAG 32766

size_t tr_comm_dtype_size(tr_comm_dtype t) {
    return (unsigned)t < TR_COMM_DTYPE_COUNT ? dtype_sizes[t] : 0;
}
const char *tr_comm_dtype_name(tr_comm_dtype t) {
    return (unsigned)t < TR_COMM_DTYPE_COUNT ? dtype_names[t] : "?";
}
const char *tr_comm_op_name(tr_comm_op op) {
    return (unsigned)op < TR_COMM_OP_COUNT ? op_names[op] : "?";
}
const char *tr_comm_kind_name(tr_comm_kind k) {
    return (unsigned)k < TR_COMM_KIND_COUNT ? kind_names[k] : "?";
}
const char *tr_comm_group_name(int group) {
    if (group == TR_COMM_WORLD) return "world";
    if (group < 0 || group > TR_COMM_WORLD) return "?";
    return tr_group_kind_name((tr_group_kind)group);
}

static const volatile sig_atomic_t *stop_flag;

void tr_comm_set_stop_flag(const volatile sig_atomic_t *flag) {
    stop_flag = flag;
}

bool tr_comm_stop_requested(void) {
    return stop_flag && *stop_flag;
}

double tr_comm_timeout_from_config(const tr_config *cfg) {
    if (cfg->dist.distributed_timeout_seconds != TR_NULL_INT)
        return (double)cfg->dist.distributed_timeout_seconds;
    return 60.0 * (double)cfg->dist.distributed_timeout_minutes;
}

void tr_comm_counters_reset(tr_comm_counters *k) {
    memset(k, 0, sizeof *k);
}

uint64_t tr_comm_counters_bytes(const tr_comm_counters *k, int group, int kind) {
    uint64_t sum = 0;
    for (int g = 0; g < TR_COMM_GROUP_SLOTS; g++)
        for (int j = 0; j < TR_COMM_KIND_COUNT; j++)
            if ((group < 0 || g == group) && (kind < 0 || j == kind)) sum += k->bytes[g][j];
    return sum;
}

uint64_t tr_comm_counters_calls(const tr_comm_counters *k, int group, int kind) {
    uint64_t sum = 0;
    for (int g = 0; g < TR_COMM_GROUP_SLOTS; g++)
        for (int j = 0; j < TR_COMM_KIND_COUNT; j++)
            if ((group < 0 || g == group) && (kind < 0 || j == kind)) sum += k->calls[g][j];
    return sum;
}

uint64_t tr_comm_counters_bytes_sent(const tr_comm_counters *k, int group) {
    return tr_comm_counters_bytes(k, group, -1) - tr_comm_counters_bytes(k, group, TR_COMM_RECV);
}

void tr_comm_counters_print(FILE *out, const tr_comm_counters *k) {
    for (int g = 0; g < TR_COMM_GROUP_SLOTS; g++)
        for (int j = 0; j < TR_COMM_KIND_COUNT; j++)
            if (k->calls[g][j])
                fprintf(out, "%-20s %-15s %10llu calls %14llu bytes\n", tr_comm_group_name(g),
                        kind_names[j], (unsigned long long)k->calls[g][j],
                        (unsigned long long)k->bytes[g][j]);
}

static tr_status bad_call(tr_diags *diags, const tr_comm_call *call, const char *hint,
                          const char *what) {
    if (!diags) return TR_ERR_INVALID;
    tr_diag_add(diags, TR_SEV_ERROR, "comm.bad_call", NULL, NULL, hint, "%s on group %s: %s",
                tr_comm_kind_name(call->kind), tr_comm_group_name(call->group), what);
    return TR_ERR_INVALID;
}

static size_t sum_counts(const size_t *counts, int n) {
    size_t s = 0;
    for (int i = 0; i < n; i++) s += counts[i];
    return s;
}

static tr_status check_rank(tr_diags *diags, const tr_comm_call *call, int r, int size,
                            const char *role) {
    if (r >= 0 && r < size) return TR_OK;
    char what[96];
    snprintf(what, sizeof what, "%s %d is outside the group of %d ranks", role, r, size);
    return bad_call(diags, call, "name peers and roots by their rank inside the group", what);
}

static tr_status check_shape(const tr_comm_call *call, int size, tr_diags *diags) {
    if ((unsigned)call->dtype >= TR_COMM_DTYPE_COUNT)
        return bad_call(diags, call, "use one of the TR_COMM_* dtypes", "unknown dtype");
    bool reduces = call->kind == TR_COMM_ALL_REDUCE || call->kind == TR_COMM_REDUCE_SCATTER;
    if (reduces && (unsigned)call->op >= TR_COMM_OP_COUNT)
        return bad_call(diags, call, "use TR_COMM_SUM, TR_COMM_MAX or TR_COMM_MIN",
                        "unknown reduction");
    if (reduces && call->dtype == TR_COMM_BYTES)
        return bad_call(diags, call, "reduce a typed buffer (f32, f64, i32, i64)",
                        "bytes cannot be reduced");
    const char *in_place_hint = "pass a send buffer (only all_reduce, reduce_scatter and "
                                "all_gather have in-place forms)";
    switch (call->kind) {
    case TR_COMM_ALL_REDUCE:
    case TR_COMM_REDUCE_SCATTER:
    case TR_COMM_ALL_GATHER:
        if (call->count && !call->recv)
            return bad_call(diags, call, "pass the output buffer", "recv is NULL");
        return TR_OK;
    case TR_COMM_ALL_TO_ALL:
        if (call->count && (!call->send || !call->recv))
            return bad_call(diags, call, in_place_hint, "a buffer is NULL");
        return TR_OK;
    case TR_COMM_ALL_TO_ALLV:
        if (!call->send_counts || !call->recv_counts)
            return bad_call(diags, call, "pass send_counts and recv_counts (one per rank)",
                            "counts are NULL");
        if ((sum_counts(call->send_counts, size) && !call->send) ||
            (sum_counts(call->recv_counts, size) && !call->recv))
            return bad_call(diags, call, in_place_hint, "a buffer is NULL");
        return TR_OK;
    case TR_COMM_BROADCAST:
        if (call->count && !call->recv)
            return bad_call(diags, call, "pass the buffer", "buffer is NULL");
        return check_rank(diags, call, call->root, size, "root");
    case TR_COMM_SEND:
    case TR_COMM_RECV:
        if (call->count && !(call->kind == TR_COMM_SEND ? call->send : call->recv))
            return bad_call(diags, call, "pass the buffer", "buffer is NULL");
        if (call->tag < 0 || call->tag > TR_COMM_MAX_TAG)
            return bad_call(diags, call, "use a tag in 0..32766", "tag out of range");
        return check_rank(diags, call, call->peer, size, "peer");
    case TR_COMM_P2P_BATCH:
        if (call->n_p2p < 0 || (call->n_p2p && !call->p2p))
            return bad_call(diags, call, "pass n >= 0 transfers", "no transfer list");
        for (int i = 0; i < call->n_p2p; i++) {
            const tr_comm_p2p *p = &call->p2p[i];
            if ((unsigned)p->dtype >= TR_COMM_DTYPE_COUNT)
                return bad_call(diags, call, "use one of the TR_COMM_* dtypes", "unknown dtype");
            if (p->count && !p->buf)
                return bad_call(diags, call, "pass the buffer", "a transfer's buffer is NULL");
            TR_TRY(check_rank(diags, call, p->peer, size, "peer"));
        }
        return TR_OK;
    case TR_COMM_BARRIER:
        return TR_OK;
    default:
        return bad_call(diags, call, "use one of the TR_COMM_* kinds", "unknown operation");
    }
}

static void book(tr_comm_counters *k, int group, tr_comm_kind kind, uint64_t bytes) {
    k->calls[group][kind]++;
    k->bytes[group][kind] += bytes;
}

tr_status tr_comm_counters_book(tr_comm_counters *k, const tr_comm_call *call, int group_size,
                                tr_diags *diags) {
    if (call->group < 0 || call->group >= TR_COMM_GROUP_SLOTS)
        return bad_call(diags, call, "name a tr_group_kind or TR_COMM_WORLD", "unknown group");
    if (group_size <= 0)
        return bad_call(diags, call,
                        "only members may call a group's operations (embedding groups hold the "
                        "first and last pipeline stages only)",
                        "this rank is not in the group");
    TR_TRY(check_shape(call, group_size, diags));
    uint64_t es = tr_comm_dtype_size(call->dtype), p = (uint64_t)group_size, n = call->count;
    switch (call->kind) {
    case TR_COMM_ALL_REDUCE:
    case TR_COMM_ALL_GATHER:
    case TR_COMM_SEND:
    case TR_COMM_RECV:
        book(k, call->group, call->kind, n * es);
        break;
    case TR_COMM_REDUCE_SCATTER:
    case TR_COMM_ALL_TO_ALL:
        book(k, call->group, call->kind, p * n * es);
        break;
    case TR_COMM_ALL_TO_ALLV:
        book(k, call->group, call->kind, sum_counts(call->send_counts, group_size) * es);
        break;
    case TR_COMM_BROADCAST: {
        /* Only the root hands data over; the others are told their rank by the backend. */
        bool is_root = call->peer == call->root;
        book(k, call->group, call->kind, is_root ? n * es : 0);
        break;
    }
    case TR_COMM_P2P_BATCH:
        book(k, call->group, call->kind, 0);
        for (int i = 0; i < call->n_p2p; i++) {
            const tr_comm_p2p *t = &call->p2p[i];
            book(k, call->group, t->is_send ? TR_COMM_SEND : TR_COMM_RECV,
                 (uint64_t)t->count * tr_comm_dtype_size(t->dtype));
        }
        break;
    default:
        book(k, call->group, call->kind, 0);
    }
    return TR_OK;
}

int tr_comm_group_size(const tr_comm *c, int group) {
    if (group < 0 || group >= TR_COMM_GROUP_SLOTS) return 0;
    return c->backend->group_size(c, group);
}

int tr_comm_world_rank_of(const tr_comm *c, int group, int rank) {
    if (group < 0 || group >= TR_COMM_GROUP_SLOTS) return -1;
    return c->backend->world_rank_of(c, group, rank);
}

int tr_comm_group_rank(const tr_comm *c, int group) {
    if (group < 0 || group >= TR_COMM_GROUP_SLOTS) return -1;
    return c->backend->group_rank(c, group);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

tr_status tr_comm_start(tr_comm *c, const tr_comm_call *call, tr_comm_request **req) {
    *req = NULL;
    tr_comm_call booked = *call;
    int size = tr_comm_group_size(c, call->group);
    /* The broadcast counter needs this rank's position; peer is unused by broadcasts. */
    if (call->kind == TR_COMM_BROADCAST) booked.peer = tr_comm_group_rank(c, call->group);
    /* MPI forbids aliased buffers; an all-reduce onto itself is the in-place form. */
    if (call->kind == TR_COMM_ALL_REDUCE && call->send == call->recv) booked.send = NULL;
    if (call->kind == TR_COMM_ALL_GATHER && call->send && call->recv && size > 0 &&
        call->send == (const char *)call->recv + (size_t)tr_comm_group_rank(c, call->group) *
                                                     call->count * tr_comm_dtype_size(call->dtype))
        booked.send = NULL;
    TR_TRY(tr_comm_counters_book(&c->counters, &booked, size, c->diags));
    tr_comm_request *r = calloc(1, sizeof *r);
    if (!r) return TR_ERR_NOMEM;
    r->kind = call->kind;
    r->group = call->group;
    r->started_s = now_s();
    tr_status st = c->backend->start(c, &booked, r);
    if (st != TR_OK) {
        free(r);
        return st;
    }
    *req = r;
    return TR_OK;
}

static void drop(tr_comm *c, tr_comm_request **req) {
    c->backend->release(c, *req);
    free(*req);
    *req = NULL;
}

tr_status tr_comm_wait(tr_comm *c, tr_comm_request **req) {
    if (!*req) return TR_OK;
    tr_status st = c->backend->wait(c, *req);
    drop(c, req);
    return st;
}

tr_status tr_comm_test(tr_comm *c, tr_comm_request **req, bool *done) {
    *done = true;
    if (!*req) return TR_OK;
    tr_status st = c->backend->test(c, *req, done);
    if (st != TR_OK || *done) drop(c, req);
    if (st != TR_OK) *done = true;
    return st;
}

tr_status tr_comm_wait_all(tr_comm *c, tr_comm_request **reqs, int n) {
    /* After a failure the others may still be in flight: freeing them could let MPI write into
     * freed memory, so they stay with the caller, who is about to abort. */
    for (int i = 0; i < n; i++) TR_TRY(tr_comm_wait(c, &reqs[i]));
    return TR_OK;
}

static tr_status run(tr_comm *c, const tr_comm_call *call) {
    tr_comm_request *r;
    TR_TRY(tr_comm_start(c, call, &r));
    return tr_comm_wait(c, &r);
}

/* Call builders shared by the blocking and nonblocking forms. */
static tr_comm_call reduce_call(tr_comm_kind kind, int group, const void *send, void *recv,
                                size_t count, tr_comm_dtype t, tr_comm_op op) {
    return (tr_comm_call){.kind = kind,
                          .group = group,
                          .dtype = t,
                          .op = op,
                          .send = send,
                          .recv = recv,
                          .count = count};
}
static tr_comm_call move_call(tr_comm_kind kind, int group, const void *send, void *recv,
                              size_t count, tr_comm_dtype t) {
    return (tr_comm_call){
        .kind = kind, .group = group, .dtype = t, .send = send, .recv = recv, .count = count};
}
static tr_comm_call alltoallv_call(int group, const void *send, const size_t *sc, const size_t *sd,
                                   void *recv, const size_t *rc, const size_t *rd,
                                   tr_comm_dtype t) {
    return (tr_comm_call){.kind = TR_COMM_ALL_TO_ALLV,
                          .group = group,
                          .dtype = t,
                          .send = send,
                          .recv = recv,
                          .send_counts = sc,
                          .send_displs = sd,
                          .recv_counts = rc,
                          .recv_displs = rd};
}
static tr_comm_call bcast_call(int group, void *buf, size_t count, tr_comm_dtype t, int root) {
    return (tr_comm_call){.kind = TR_COMM_BROADCAST,
                          .group = group,
                          .dtype = t,
                          .recv = buf,
                          .count = count,
                          .root = root};
}
static tr_comm_call p2p_call(tr_comm_kind kind, int group, const void *send, void *recv,
                             size_t count, tr_comm_dtype t, int peer, int tag) {
    return (tr_comm_call){.kind = kind,
                          .group = group,
                          .dtype = t,
                          .send = send,
                          .recv = recv,
                          .count = count,
                          .peer = peer,
                          .tag = tag};
}
static tr_comm_call batch_call(int group, const tr_comm_p2p *ops, int n) {
    return (tr_comm_call){.kind = TR_COMM_P2P_BATCH, .group = group, .p2p = ops, .n_p2p = n};
}
static tr_comm_call barrier_call(int group) {
    return (tr_comm_call){.kind = TR_COMM_BARRIER, .group = group, .dtype = TR_COMM_BYTES};
}

tr_status tr_comm_iall_reduce(tr_comm *c, int group, const void *send, void *recv, size_t count,
                              tr_comm_dtype t, tr_comm_op op, tr_comm_request **req) {
    tr_comm_call call = reduce_call(TR_COMM_ALL_REDUCE, group, send, recv, count, t, op);
    return tr_comm_start(c, &call, req);
}
tr_status tr_comm_ireduce_scatter(tr_comm *c, int group, const void *send, void *recv, size_t count,
                                  tr_comm_dtype t, tr_comm_op op, tr_comm_request **req) {
    tr_comm_call call = reduce_call(TR_COMM_REDUCE_SCATTER, group, send, recv, count, t, op);
    return tr_comm_start(c, &call, req);
}
tr_status tr_comm_iall_gather(tr_comm *c, int group, const void *send, void *recv, size_t count,
                              tr_comm_dtype t, tr_comm_request **req) {
    tr_comm_call call = move_call(TR_COMM_ALL_GATHER, group, send, recv, count, t);
    return tr_comm_start(c, &call, req);
}
tr_status tr_comm_iall_to_all(tr_comm *c, int group, const void *send, void *recv, size_t count,
                              tr_comm_dtype t, tr_comm_request **req) {
    tr_comm_call call = move_call(TR_COMM_ALL_TO_ALL, group, send, recv, count, t);
    return tr_comm_start(c, &call, req);
}
tr_status tr_comm_iall_to_allv(tr_comm *c, int group, const void *send, const size_t *send_counts,
                               const size_t *send_displs, void *recv, const size_t *recv_counts,
                               const size_t *recv_displs, tr_comm_dtype t, tr_comm_request **req) {
    tr_comm_call call =
        alltoallv_call(group, send, send_counts, send_displs, recv, recv_counts, recv_displs, t);
    return tr_comm_start(c, &call, req);
}
tr_status tr_comm_ibroadcast(tr_comm *c, int group, void *buf, size_t count, tr_comm_dtype t,
                             int root, tr_comm_request **req) {
    tr_comm_call call = bcast_call(group, buf, count, t, root);
    return tr_comm_start(c, &call, req);
}
tr_status tr_comm_isend(tr_comm *c, int group, const void *buf, size_t count, tr_comm_dtype t,
                        int peer, int tag, tr_comm_request **req) {
    tr_comm_call call = p2p_call(TR_COMM_SEND, group, buf, NULL, count, t, peer, tag);
    return tr_comm_start(c, &call, req);
}
tr_status tr_comm_irecv(tr_comm *c, int group, void *buf, size_t count, tr_comm_dtype t, int peer,
                        int tag, tr_comm_request **req) {
    tr_comm_call call = p2p_call(TR_COMM_RECV, group, NULL, buf, count, t, peer, tag);
    return tr_comm_start(c, &call, req);
}
tr_status tr_comm_ip2p_batch(tr_comm *c, int group, const tr_comm_p2p *ops, int n,
                             tr_comm_request **req) {
    tr_comm_call call = batch_call(group, ops, n);
    return tr_comm_start(c, &call, req);
}
tr_status tr_comm_ibarrier(tr_comm *c, int group, tr_comm_request **req) {
    tr_comm_call call = barrier_call(group);
    return tr_comm_start(c, &call, req);
}

tr_status tr_comm_all_reduce(tr_comm *c, int group, const void *send, void *recv, size_t count,
                             tr_comm_dtype t, tr_comm_op op) {
    tr_comm_call call = reduce_call(TR_COMM_ALL_REDUCE, group, send, recv, count, t, op);
    return run(c, &call);
}
tr_status tr_comm_all_reduce_inplace(tr_comm *c, int group, void *buf, size_t count,
                                     tr_comm_dtype t, tr_comm_op op) {
    tr_comm_call call = reduce_call(TR_COMM_ALL_REDUCE, group, NULL, buf, count, t, op);
    return run(c, &call);
}
tr_status tr_comm_reduce_scatter(tr_comm *c, int group, const void *send, void *recv, size_t count,
                                 tr_comm_dtype t, tr_comm_op op) {
    tr_comm_call call = reduce_call(TR_COMM_REDUCE_SCATTER, group, send, recv, count, t, op);
    return run(c, &call);
}
tr_status tr_comm_reduce_scatter_inplace(tr_comm *c, int group, void *buf, size_t count,
                                         tr_comm_dtype t, tr_comm_op op) {
    tr_comm_call call = reduce_call(TR_COMM_REDUCE_SCATTER, group, NULL, buf, count, t, op);
    return run(c, &call);
}
tr_status tr_comm_all_gather(tr_comm *c, int group, const void *send, void *recv, size_t count,
                             tr_comm_dtype t) {
    tr_comm_call call = move_call(TR_COMM_ALL_GATHER, group, send, recv, count, t);
    return run(c, &call);
}
tr_status tr_comm_all_gather_inplace(tr_comm *c, int group, void *buf, size_t count,
                                     tr_comm_dtype t) {
    tr_comm_call call = move_call(TR_COMM_ALL_GATHER, group, NULL, buf, count, t);
    return run(c, &call);
}
tr_status tr_comm_all_to_all(tr_comm *c, int group, const void *send, void *recv, size_t count,
                             tr_comm_dtype t) {
    tr_comm_call call = move_call(TR_COMM_ALL_TO_ALL, group, send, recv, count, t);
    return run(c, &call);
}
tr_status tr_comm_all_to_allv(tr_comm *c, int group, const void *send, const size_t *send_counts,
                              const size_t *send_displs, void *recv, const size_t *recv_counts,
                              const size_t *recv_displs, tr_comm_dtype t) {
    tr_comm_call call =
        alltoallv_call(group, send, send_counts, send_displs, recv, recv_counts, recv_displs, t);
    return run(c, &call);
}
tr_status tr_comm_broadcast(tr_comm *c, int group, void *buf, size_t count, tr_comm_dtype t,
                            int root) {
    tr_comm_call call = bcast_call(group, buf, count, t, root);
    return run(c, &call);
}
tr_status tr_comm_send(tr_comm *c, int group, const void *buf, size_t count, tr_comm_dtype t,
                       int peer, int tag) {
    tr_comm_call call = p2p_call(TR_COMM_SEND, group, buf, NULL, count, t, peer, tag);
    return run(c, &call);
}
tr_status tr_comm_recv(tr_comm *c, int group, void *buf, size_t count, tr_comm_dtype t, int peer,
                       int tag) {
    tr_comm_call call = p2p_call(TR_COMM_RECV, group, NULL, buf, count, t, peer, tag);
    return run(c, &call);
}
tr_status tr_comm_p2p_batch(tr_comm *c, int group, const tr_comm_p2p *ops, int n) {
    tr_comm_call call = batch_call(group, ops, n);
    return run(c, &call);
}
tr_status tr_comm_barrier(tr_comm *c, int group) {
    tr_comm_call call = barrier_call(group);
    return run(c, &call);
}

void tr_comm_destroy(tr_comm *c) {
    if (c) c->backend->destroy(c);
}

void tr_comm_abort_on_error(tr_comm *c, tr_status st) {
    if (st == TR_OK) return;
    if (c->diags && c->diags->n) tr_diags_print_text(c->diags, stderr, false);
    fprintf(stderr, "trestle: communication failed (%s); ending every rank\n", tr_status_name(st));
    fflush(stderr);
    c->backend->abort(c, 2);
    exit(2); /* a backend's abort does not return; this guards one that would */
}
