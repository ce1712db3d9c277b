/* The MPI comm backend on one rank (an MPI singleton): every operation's single-rank meaning,
 * in-place forms, nonblocking handles, counters through the real front end, and the timeout of
 * a receive nobody answers. Multi-rank behaviour is tested under mpirun in tests/comm/. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm/comm.h"
#include "runtime/parallel/state.h"
#include "tests/unit/harness.h"

static tr_parallel_state g_ps;

typedef struct fixture {
    tr_diags diags;
    tr_comm *comm;
} fixture;

static void open_comm(fixture *f, double timeout_s, tr_comm_reduce_mode mode) {
    tr_diags_init(&f->diags);
    tr_comm_options opt = {timeout_s, mode};
    CHECK_INT_EQ(tr_comm_mpi_create(&g_ps, &opt, &f->diags, &f->comm), TR_OK);
}

static void close_comm(fixture *f) {
    tr_comm_destroy(f->comm);
    tr_diags_free(&f->diags);
}

static void test_groups_of_one(void) {
    fixture f;
    open_comm(&f, 5, TR_COMM_REDUCE_NATIVE);
    for (int g = 0; g < TR_COMM_GROUP_SLOTS; g++) {
        CHECK_INT_EQ(tr_comm_group_size(f.comm, g), 1);
        CHECK_INT_EQ(tr_comm_group_rank(f.comm, g), 0);
    }
    CHECK_INT_EQ(tr_comm_group_size(f.comm, -1), 0);
    close_comm(&f);
}

static void run_collectives(tr_comm_reduce_mode mode) {
    fixture f;
    open_comm(&f, 5, mode);
    tr_comm *c = f.comm;
    float x[5] = {1.5f, -2, 3, 0.25f, 8}, y[5] = {0};
    CHECK_INT_EQ(tr_comm_all_reduce(c, TR_GROUP_TP, x, y, 5, TR_COMM_F32, TR_COMM_SUM), TR_OK);
    CHECK(memcmp(x, y, sizeof x) == 0);
    double d[3] = {1, 2, 3};
    CHECK_INT_EQ(tr_comm_all_reduce_inplace(c, TR_GROUP_DP, d, 3, TR_COMM_F64, TR_COMM_MAX), TR_OK);
    CHECK(d[0] == 1 && d[1] == 2 && d[2] == 3);
    int64_t q[2] = {7, -9}, qr[2] = {0};
    CHECK_INT_EQ(tr_comm_reduce_scatter(c, TR_COMM_WORLD, q, qr, 2, TR_COMM_I64, TR_COMM_MIN),
                 TR_OK);
    CHECK(qr[0] == 7 && qr[1] == -9);
    int32_t rs[3] = {4, 5, 6};
    CHECK_INT_EQ(tr_comm_reduce_scatter_inplace(c, TR_GROUP_EP, rs, 3, TR_COMM_I32, TR_COMM_SUM),
                 TR_OK);
    CHECK(rs[0] == 4 && rs[1] == 5 && rs[2] == 6);
    char bytes[4] = "abc", gathered[4] = {0};
    CHECK_INT_EQ(tr_comm_all_gather(c, TR_GROUP_CP, bytes, gathered, 4, TR_COMM_BYTES), TR_OK);
    CHECK_STR_EQ(gathered, "abc");
    CHECK_INT_EQ(tr_comm_all_gather_inplace(c, TR_GROUP_CP, gathered, 4, TR_COMM_BYTES), TR_OK);
    CHECK_STR_EQ(gathered, "abc");
    CHECK_INT_EQ(tr_comm_all_gather(c, TR_GROUP_CP, gathered, gathered, 4, TR_COMM_BYTES), TR_OK);
    CHECK_STR_EQ(gathered, "abc");
    CHECK_INT_EQ(tr_comm_all_reduce(c, TR_GROUP_TP, x, x, 5, TR_COMM_F32, TR_COMM_MIN), TR_OK);
    CHECK(x[0] == 1.5f && x[4] == 8);
    memset(y, 0, sizeof y);
    CHECK_INT_EQ(tr_comm_all_to_all(c, TR_GROUP_EP, x, y, 5, TR_COMM_F32), TR_OK);
    CHECK(memcmp(x, y, sizeof x) == 0);
    size_t sc[1] = {3}, sd[1] = {2}, rc[1] = {3}, rd[1] = {1};
    memset(y, 0, sizeof y);
    CHECK_INT_EQ(tr_comm_all_to_allv(c, TR_GROUP_EP, x, sc, sd, y, rc, rd, TR_COMM_F32), TR_OK);
    CHECK(y[0] == 0 && y[1] == 3 && y[2] == 0.25f && y[3] == 8 && y[4] == 0);
    CHECK_INT_EQ(tr_comm_broadcast(c, TR_GROUP_TP, x, 5, TR_COMM_F32, 0), TR_OK);
    CHECK_INT_EQ(tr_comm_barrier(c, TR_GROUP_PP), TR_OK);
    CHECK_INT_EQ(f.diags.n, 0);
    close_comm(&f);
}

static void test_collectives_native(void) {
    run_collectives(TR_COMM_REDUCE_NATIVE);
}
static void test_collectives_rank_order(void) {
    run_collectives(TR_COMM_REDUCE_RANK_ORDER);
}

static void test_send_recv_self_and_handles(void) {
    fixture f;
    open_comm(&f, 5, TR_COMM_REDUCE_NATIVE);
    tr_comm *c = f.comm;
    int32_t out[4] = {1, 2, 3, 4}, in[4] = {0};
    tr_comm_request *r = NULL, *s = NULL;
    CHECK_INT_EQ(tr_comm_irecv(c, TR_GROUP_PP, in, 4, TR_COMM_I32, 0, 11, &r), TR_OK);
    bool done = true;
    CHECK_INT_EQ(tr_comm_test(c, &r, &done), TR_OK);
    CHECK(!done); /* nothing sent yet */
    CHECK(r != NULL);
    CHECK_INT_EQ(tr_comm_isend(c, TR_GROUP_PP, out, 4, TR_COMM_I32, 0, 11, &s), TR_OK);
    tr_comm_request *both[2] = {s, r};
    CHECK_INT_EQ(tr_comm_wait_all(c, both, 2), TR_OK);
    CHECK(both[0] == NULL && both[1] == NULL);
    CHECK(memcmp(out, in, sizeof in) == 0);

    /* Batched transfers to self, as a ring of one. */
    double a[3] = {1, 2, 3}, b[3] = {0};
    tr_comm_p2p ops[2] = {{false, 0, b, 3, TR_COMM_F64}, {true, 0, a, 3, TR_COMM_F64}};
    CHECK_INT_EQ(tr_comm_p2p_batch(c, TR_GROUP_PP, ops, 2), TR_OK);
    CHECK(b[0] == 1 && b[1] == 2 && b[2] == 3);

    /* Waiting on a completed (NULL) handle is fine. */
    tr_comm_request *none = NULL;
    CHECK_INT_EQ(tr_comm_wait(c, &none), TR_OK);

    CHECK_INT_EQ(tr_comm_counters_bytes(&c->counters, TR_GROUP_PP, TR_COMM_SEND), 16 + 24);
    CHECK_INT_EQ(tr_comm_counters_bytes(&c->counters, TR_GROUP_PP, TR_COMM_RECV), 16 + 24);
    CHECK_INT_EQ(tr_comm_counters_calls(&c->counters, TR_GROUP_PP, TR_COMM_P2P_BATCH), 1);
    close_comm(&f);
}

static void test_bad_call_reaches_diags(void) {
    fixture f;
    open_comm(&f, 5, TR_COMM_REDUCE_NATIVE);
    float x = 1;
    CHECK_INT_EQ(tr_comm_send(f.comm, TR_GROUP_PP, &x, 1, TR_COMM_F32, 1, 0), TR_ERR_INVALID);
    CHECK(tr_diags_find(&f.diags, "comm.bad_call") != NULL);
    CHECK_INT_EQ(tr_comm_counters_calls(&f.comm->counters, -1, -1), 0);
    close_comm(&f);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_recv_timeout_names_peer(void) {
    fixture f;
    open_comm(&f, 0.3, TR_COMM_REDUCE_NATIVE);
    float x[2];
    double t0 = now_s();
    CHECK_INT_EQ(tr_comm_recv(f.comm, TR_GROUP_PP, x, 2, TR_COMM_F32, 0, 3), TR_ERR_COMM);
    double took = now_s() - t0;
    CHECK(took >= 0.3 && took < 3.0);
    const tr_diag *e = tr_diags_find(&f.diags, "comm.timeout");
    CHECK(e != NULL);
    if (e) {
        CHECK_CONTAINS(e->message, "recv on group pp");
        CHECK_CONTAINS(e->message, "recv from world rank 0");
        CHECK_CONTAINS(e->message, "within 0.3 s");
        CHECK_CONTAINS(e->keys, "dist.distributed_timeout_seconds");
        CHECK(e->hint != NULL);
    }
    /* The withdrawn receive does not swallow a later message with the same tag. */
    float sent[2] = {5, 6};
    tr_comm_request *s = NULL;
    CHECK_INT_EQ(tr_comm_isend(f.comm, TR_GROUP_PP, sent, 2, TR_COMM_F32, 0, 3, &s), TR_OK);
    CHECK_INT_EQ(tr_comm_recv(f.comm, TR_GROUP_PP, x, 2, TR_COMM_F32, 0, 3), TR_OK);
    CHECK_INT_EQ(tr_comm_wait(f.comm, &s), TR_OK);
    CHECK(x[0] == 5 && x[1] == 6);
    close_comm(&f);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    tr_parallel_dims dims;
    tr_parallel_dims_init(&dims, 1);
    tr_diags d;
    tr_diags_init(&d);
    if (tr_parallel_state_init(&g_ps, &dims, MPI_COMM_WORLD, &d) != TR_OK) {
        fprintf(stderr, "cannot build the parallel state of one rank\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    static const tr_test_case tests[] = {
        TR_TEST(test_groups_of_one),          TR_TEST(test_collectives_native),
        TR_TEST(test_collectives_rank_order), TR_TEST(test_send_recv_self_and_handles),
        TR_TEST(test_bad_call_reaches_diags), TR_TEST(test_recv_timeout_names_peer),
    };
    int rc = tr_test_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
    tr_parallel_state_free(&g_ps);
    tr_diags_free(&d);
    MPI_Finalize();
    return rc;
}
