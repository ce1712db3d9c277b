/* The comm layer's call checks and byte counters, without any communication: each expected byte
 * count is written out from the definition in runtime/comm/comm.h (elements x element size). */
#include <stdlib.h>

#include "core/config.h"
#include "runtime/comm/comm.h"
#include "tests/unit/harness.h"

static tr_comm_call call_of(tr_comm_kind kind, int group, tr_comm_dtype t, size_t count) {
    static float dummy[64];
    return (tr_comm_call){.kind = kind,
                          .group = group,
                          .dtype = t,
                          .op = TR_COMM_SUM,
                          .send = dummy,
                          .recv = dummy,
                          .count = count};
}

static void test_payload_per_kind(void) {
    tr_comm_counters k;
    tr_comm_counters_reset(&k);
    const int p = 4;
    tr_comm_call c = call_of(TR_COMM_ALL_REDUCE, TR_GROUP_DP, TR_COMM_F32, 1000);
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, p, NULL), TR_OK);
    CHECK_INT_EQ(tr_comm_counters_bytes(&k, TR_GROUP_DP, TR_COMM_ALL_REDUCE), 4000);

    c = call_of(TR_COMM_REDUCE_SCATTER, TR_GROUP_DP, TR_COMM_F64, 10); /* input: 4 blocks of 10 */
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, p, NULL), TR_OK);
    CHECK_INT_EQ(tr_comm_counters_bytes(&k, TR_GROUP_DP, TR_COMM_REDUCE_SCATTER), 4 * 10 * 8);

    c = call_of(TR_COMM_ALL_GATHER, TR_GROUP_TP, TR_COMM_I32, 7); /* own block only */
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, p, NULL), TR_OK);
    CHECK_INT_EQ(tr_comm_counters_bytes(&k, TR_GROUP_TP, TR_COMM_ALL_GATHER), 28);

    c = call_of(TR_COMM_ALL_TO_ALL, TR_GROUP_EP, TR_COMM_BYTES, 3);
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, p, NULL), TR_OK);
    CHECK_INT_EQ(tr_comm_counters_bytes(&k, TR_GROUP_EP, TR_COMM_ALL_TO_ALL), 12);

    size_t sc[4] = {0, 5, 1, 2}, rc[4] = {3, 3, 3, 3};
    c = call_of(TR_COMM_ALL_TO_ALLV, TR_GROUP_EP, TR_COMM_I64, 0);
    c.send_counts = sc;
    c.recv_counts = rc;
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, p, NULL), TR_OK);
    CHECK_INT_EQ(tr_comm_counters_bytes(&k, TR_GROUP_EP, TR_COMM_ALL_TO_ALLV), 8 * 8);

    c = call_of(TR_COMM_SEND, TR_GROUP_PP, TR_COMM_F32, 6);
    c.peer = 1;
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, p, NULL), TR_OK);
    c.kind = TR_COMM_RECV;
    c.count = 2;
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, p, NULL), TR_OK);
    CHECK_INT_EQ(tr_comm_counters_bytes(&k, TR_GROUP_PP, TR_COMM_SEND), 24);
    CHECK_INT_EQ(tr_comm_counters_bytes(&k, TR_GROUP_PP, TR_COMM_RECV), 8);
    CHECK_INT_EQ(tr_comm_counters_bytes_sent(&k, TR_GROUP_PP), 24);

    /* Totals: every booked call once, and the sent bytes exclude receives. */
    CHECK_INT_EQ(tr_comm_counters_calls(&k, -1, -1), 7);
    CHECK_INT_EQ(tr_comm_counters_bytes_sent(&k, -1), 4000 + 320 + 28 + 12 + 64 + 24);
    tr_comm_counters_reset(&k);
    CHECK_INT_EQ(tr_comm_counters_bytes(&k, -1, -1), 0);
    CHECK_INT_EQ(tr_comm_counters_calls(&k, -1, -1), 0);
}

static void test_broadcast_counts_root_only(void) {
    tr_comm_counters k;
    tr_comm_counters_reset(&k);
    tr_comm_call c = call_of(TR_COMM_BROADCAST, TR_COMM_WORLD, TR_COMM_F32, 10);
    c.root = 2;
    c.peer = 1; /* this rank is not the root */
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, 4, NULL), TR_OK);
    CHECK_INT_EQ(tr_comm_counters_bytes(&k, TR_COMM_WORLD, TR_COMM_BROADCAST), 0);
    c.peer = 2;
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, 4, NULL), TR_OK);
    CHECK_INT_EQ(tr_comm_counters_bytes(&k, TR_COMM_WORLD, TR_COMM_BROADCAST), 40);
    CHECK_INT_EQ(tr_comm_counters_calls(&k, TR_COMM_WORLD, TR_COMM_BROADCAST), 2);
}

static void test_batch_books_sends_and_recvs(void) {
    tr_comm_counters k;
    tr_comm_counters_reset(&k);
    float a[8], b[8];
    tr_comm_p2p ops[3] = {
        {true, 1, a, 8, TR_COMM_F32}, {false, 3, b, 8, TR_COMM_F32}, {true, 3, a, 2, TR_COMM_F64}};
    tr_comm_call c = {.kind = TR_COMM_P2P_BATCH, .group = TR_GROUP_PP, .p2p = ops, .n_p2p = 3};
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, 4, NULL), TR_OK);
    CHECK_INT_EQ(tr_comm_counters_bytes(&k, TR_GROUP_PP, TR_COMM_SEND), 32 + 16);
    CHECK_INT_EQ(tr_comm_counters_bytes(&k, TR_GROUP_PP, TR_COMM_RECV), 32);
    CHECK_INT_EQ(tr_comm_counters_calls(&k, TR_GROUP_PP, TR_COMM_SEND), 2);
    CHECK_INT_EQ(tr_comm_counters_calls(&k, TR_GROUP_PP, TR_COMM_P2P_BATCH), 1);
    CHECK_INT_EQ(tr_comm_counters_bytes(&k, TR_GROUP_PP, TR_COMM_P2P_BATCH), 0);
}

/* Each malformed call is refused with comm.bad_call and counts nothing. */
static void expect_bad(tr_comm_call c, int size, const char *needle) {
    tr_comm_counters k;
    tr_comm_counters_reset(&k);
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, size, &d), TR_ERR_INVALID);
    const tr_diag *e = tr_diags_find(&d, "comm.bad_call");
    CHECK(e != NULL);
    if (e) {
        CHECK_CONTAINS(e->message, needle);
        CHECK(e->hint != NULL);
    }
    CHECK_INT_EQ(tr_comm_counters_calls(&k, -1, -1), 0);
    tr_diags_free(&d);
}

static void test_bad_calls(void) {
    tr_comm_call c = call_of(TR_COMM_ALL_REDUCE, TR_GROUP_TP, TR_COMM_BYTES, 4);
    expect_bad(c, 2, "bytes cannot be reduced");
    c = call_of(TR_COMM_ALL_REDUCE, TR_GROUP_TP, TR_COMM_F32, 4);
    c.op = (tr_comm_op)7;
    expect_bad(c, 2, "unknown reduction");
    c = call_of(TR_COMM_ALL_REDUCE, TR_GROUP_TP, TR_COMM_F32, 4);
    c.recv = NULL;
    expect_bad(c, 2, "recv is NULL");
    c = call_of(TR_COMM_ALL_TO_ALL, TR_GROUP_EP, TR_COMM_F32, 4);
    c.send = NULL;
    expect_bad(c, 2, "NULL");
    c = call_of(TR_COMM_SEND, TR_GROUP_PP, TR_COMM_F32, 4);
    c.peer = 2;
    expect_bad(c, 2, "peer 2 is outside the group of 2 ranks");
    c.peer = -1;
    expect_bad(c, 2, "peer -1");
    c.peer = 0;
    c.tag = 40000;
    expect_bad(c, 2, "tag");
    c = call_of(TR_COMM_BROADCAST, TR_GROUP_TP, TR_COMM_F32, 4);
    c.root = 5;
    expect_bad(c, 4, "root 5");
    c = call_of(TR_COMM_ALL_TO_ALLV, TR_GROUP_EP, TR_COMM_F32, 0);
    expect_bad(c, 2, "counts are NULL");
    c = call_of(TR_COMM_BARRIER, TR_GROUP_EMBEDDING, TR_COMM_BYTES, 0);
    expect_bad(c, 0, "not in the group");
    c.group = TR_COMM_GROUP_SLOTS;
    expect_bad(c, 1, "unknown group");
    tr_comm_p2p ops[1] = {{true, 9, NULL, 0, TR_COMM_F32}};
    c = (tr_comm_call){.kind = TR_COMM_P2P_BATCH, .group = TR_GROUP_PP, .p2p = ops, .n_p2p = 1};
    expect_bad(c, 2, "peer 9");

    /* The same shapes with valid values pass. */
    tr_comm_counters k;
    tr_comm_counters_reset(&k);
    ops[0].peer = 1;
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, 2, NULL), TR_OK);
    c = call_of(TR_COMM_SEND, TR_GROUP_PP, TR_COMM_F32, 4);
    c.peer = 1;
    c.tag = 32766;
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, 2, NULL), TR_OK);
    c = call_of(TR_COMM_ALL_REDUCE, TR_GROUP_TP, TR_COMM_F32, 4);
    c.send = NULL; /* in place */
    CHECK_INT_EQ(tr_comm_counters_book(&k, &c, 2, NULL), TR_OK);
}

static void test_names(void) {
    CHECK_STR_EQ(tr_comm_group_name(TR_COMM_WORLD), "world");
    CHECK_STR_EQ(tr_comm_group_name(TR_GROUP_TP), "tp");
    CHECK_STR_EQ(tr_comm_kind_name(TR_COMM_ALL_TO_ALLV), "all_to_allv");
    CHECK_STR_EQ(tr_comm_op_name(TR_COMM_MAX), "max");
    CHECK_INT_EQ(tr_comm_dtype_size(TR_COMM_F64), 8);
    CHECK_INT_EQ(tr_comm_dtype_size(TR_COMM_BYTES), 1);
}

static void test_timeout_from_config(void) {
    tr_config *cfg = malloc(sizeof *cfg);
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_config_init(cfg, &d), TR_OK);
    cfg->dist.distributed_timeout_minutes = 3;
    CHECK_CLOSE(tr_comm_timeout_from_config(cfg), 180.0, 0, 0);
    cfg->dist.distributed_timeout_seconds = 2; /* the seconds override wins */
    CHECK_CLOSE(tr_comm_timeout_from_config(cfg), 2.0, 0, 0);
    tr_config_free(cfg);
    free(cfg);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_payload_per_kind), TR_TEST(test_broadcast_counts_root_only),
             TR_TEST(test_batch_books_sends_and_recvs), TR_TEST(test_bad_calls),
             TR_TEST(test_names), TR_TEST(test_timeout_from_config))
