/* The static schedule check catches deliberately broken schedules: each test builds a correct
 * schedule (which passes), breaks one thing, and expects the matching diagnostic naming the
 * rank and the action. */
#include <stdlib.h>
#include <string.h>

#include "runtime/pipeline/pipeline.h"
#include "tests/unit/harness.h"

typedef struct world {
    tr_pp_schedule rk[8];
    int pp;
} world;

static void build(world *w, int pp, int vpp, int m, bool batched, bool overlapped) {
    tr_pp_plan p = {pp, vpp, m, pp, batched, overlapped, true, 4096};
    w->pp = pp;
    for (int r = 0; r < pp; r++) CHECK(tr_pp_schedule_build_plan(&p, r, &w->rk[r]) == TR_OK);
}

static void drop(world *w) {
    for (int r = 0; r < w->pp; r++) tr_pp_schedule_free(&w->rk[r]);
}

/* Index of the first action on `rank` with this op and microbatch (mb < 0: any). */
static int find(const world *w, int rank, tr_pp_op op, int mb) {
    const tr_pp_schedule *s = &w->rk[rank];
    for (int i = 0; i < s->n; i++)
        if (s->actions[i].op == op && (mb < 0 || s->actions[i].mb == mb)) return i;
    return -1;
}

static void erase(world *w, int rank, int i) {
    tr_pp_schedule *s = &w->rk[rank];
    memmove(&s->actions[i], &s->actions[i + 1], (size_t)(s->n - i - 1) * sizeof s->actions[0]);
    s->n--;
}

static void insert(world *w, int rank, int i, tr_pp_action a) {
    tr_pp_schedule *s = &w->rk[rank];
    CHECK(tr_pp_schedule_push(s, a) == TR_OK);
    memmove(&s->actions[i + 1], &s->actions[i], (size_t)(s->n - 1 - i) * sizeof s->actions[0]);
    s->actions[i] = a;
}

static void swap(world *w, int rank, int i, int j) {
    tr_pp_action t = w->rk[rank].actions[i];
    w->rk[rank].actions[i] = w->rk[rank].actions[j];
    w->rk[rank].actions[j] = t;
}

/* Runs the check; returns the first diagnostic's message (static buffer) or NULL on success. */
static const char *check(world *w, const char *want_id) {
    static char msg[1024];
    tr_diags d;
    tr_diags_init(&d);
    tr_status st = tr_pp_check(w->rk, w->pp, NULL, &d);
    const char *out = NULL;
    if (st != TR_OK && d.n > 0) {
        snprintf(msg, sizeof msg, "%s", d.items[0].message);
        out = msg;
        if (want_id) CHECK_STR_EQ(d.items[0].id, want_id);
        CHECK(d.items[0].hint != NULL);
    }
    if (want_id)
        CHECK(st == TR_ERR_CONFIG);
    else
        CHECK(st == TR_OK);
    tr_diags_free(&d);
    return out;
}

/* PP=2 interleaved, batched: rank 0's steady exchanges carry an activation and a gradient to
 * rank 1 in one batch; the receiver expects the activation first on that channel. */
static void test_swap_two_sends(void) {
    world w;
    build(&w, 2, 2, 4, true, false);
    check(&w, NULL);
    int i = -1;
    tr_pp_schedule *s = &w.rk[0];
    for (int k = 0; k + 1 < s->n && i < 0; k++)
        if (s->actions[k].op == TR_PP_SEND_ACT && s->actions[k + 1].op == TR_PP_SEND_GRAD &&
            s->actions[k].group == s->actions[k + 1].group)
            i = k;
    CHECK(i >= 0);
    swap(&w, 0, i, i + 1);
    const char *m = check(&w, "pipeline.schedule_mismatch");
    CHECK(m != NULL);
    if (m) {
        CHECK_CONTAINS(m, "from pp rank 0 to 1");
        CHECK_CONTAINS(m, "SEND_GRAD");
    }
    drop(&w);

    /* moving a send ahead of the step that produces it is caught too */
    build(&w, 4, 1, 8, true, false);
    swap(&w, 0, find(&w, 0, TR_PP_SEND_ACT, 1), find(&w, 0, TR_PP_SEND_ACT, 2));
    m = check(&w, "pipeline.schedule_dependency");
    if (m) CHECK_CONTAINS(m, "pp rank 0 action");
    drop(&w);
}

/* Rank 1 drops the receive of microbatch 1's activation; everything after it on that channel
 * pairs with the wrong send. */
static void test_drop_a_receive(void) {
    world w;
    build(&w, 2, 1, 4, true, false);
    check(&w, NULL);
    int i = find(&w, 1, TR_PP_RECV_ACT, 1);
    CHECK(i >= 0);
    erase(&w, 1, i);
    const char *m = check(&w, "pipeline.schedule_dependency");
    if (m) CHECK_CONTAINS(m, "pp rank 1 action 6: FWD (mb 1, chunk 0) runs before its input");
    drop(&w);

    /* dropping the only receive (and its WAIT): the forward would run on no input */
    build(&w, 2, 1, 1, true, false);
    i = find(&w, 1, TR_PP_RECV_ACT, 0);
    erase(&w, 1, i);
    erase(&w, 1, i);
    const char *m2 = check(&w, "pipeline.schedule_dependency");
    if (m2) CHECK_CONTAINS(m2, "pp rank 1 action 0: FWD (mb 0, chunk 0)");
    drop(&w);
}

static void test_mismatched_tag(void) {
    world w;
    build(&w, 4, 2, 8, false, true);
    check(&w, NULL);
    int i = find(&w, 2, TR_PP_RECV_GRAD, 3);
    CHECK(i >= 0);
    w.rk[2].actions[i].mb = 4;
    const char *m = check(&w, "pipeline.schedule_mismatch");
    if (m) {
        CHECK_CONTAINS(m, "from pp rank 3 to 2");
        CHECK_CONTAINS(m, "mb 4");
    }
    drop(&w);

    /* same tag, different payload size */
    build(&w, 3, 1, 3, true, false);
    w.rk[1].actions[find(&w, 1, TR_PP_RECV_ACT, 0)].bytes = 2048;
    m = check(&w, "pipeline.schedule_mismatch");
    if (m) CHECK_CONTAINS(m, "2048 bytes");
    drop(&w);
}

static void test_wrong_peer(void) {
    world w;
    build(&w, 4, 1, 4, true, false);
    int i = find(&w, 1, TR_PP_SEND_ACT, 0);
    w.rk[1].actions[i].peer = 3;
    const char *m = check(&w, "pipeline.schedule_peer");
    if (m) {
        CHECK_CONTAINS(m, "pp rank 1 action");
        CHECK_CONTAINS(m, "activations go to pp rank 2");
    }
    drop(&w);
}

/* Blocking, one call per transfer: rank 0 sends then receives, rank 1 (odd) receives then
 * sends. Making rank 1 send first too leaves each rank waiting for the other. */
static void test_cyclic_wait_blocking(void) {
    world w;
    build(&w, 2, 1, 2, false, false);
    check(&w, NULL);
    int r = find(&w, 1, TR_PP_RECV_ACT, 1), s = find(&w, 1, TR_PP_SEND_GRAD, 0);
    CHECK(r >= 0 && s == r + 2);
    swap(&w, 1, r, s);         /* the transfers */
    swap(&w, 1, r + 1, s + 1); /* and their WAITs */
    const char *m = check(&w, "pipeline.schedule_deadlock");
    if (m) {
        CHECK_CONTAINS(m, "every unfinished pp rank is blocked");
        CHECK_CONTAINS(m, "pp rank 0 at action");
        CHECK_CONTAINS(m, "SEND_ACT peer 1 tag (mb 1, chunk 0)");
    }
    /* the same two transfers posted as one batch cannot deadlock */
    w.rk[1].actions[s].group = w.rk[1].actions[r].group;
    erase(&w, 1, r + 1); /* first WAIT; the second now completes the merged group */
    w.rk[1].actions[r + 2].group = w.rk[1].actions[r].group;
    check(&w, NULL);
    drop(&w);
}

/* Batched semantics: each rank waits for its receive in a batch posted before its send. */
static void test_cyclic_wait_batched(void) {
    world w;
    build(&w, 2, 1, 1, true, false);
    check(&w, NULL);
    /* rank 0: F0 [SEND_ACT RECV_GRAD] W B0  ->  F0 [RECV_GRAD] W [SEND_ACT] W B0 */
    int s = find(&w, 0, TR_PP_SEND_ACT, 0), r = find(&w, 0, TR_PP_RECV_GRAD, 0);
    CHECK(r == s + 1);
    int g = w.rk[0].actions[s].group, fresh = w.rk[0].n;
    swap(&w, 0, s, r);
    w.rk[0].actions[r].group = fresh;
    insert(&w, 0, r, (tr_pp_action){TR_PP_WAIT, -1, -1, -1, g, 0});
    w.rk[0].actions[r + 2].group = fresh;
    const char *m = check(&w, "pipeline.schedule_deadlock");
    if (m) CHECK_CONTAINS(m, "RECV_GRAD peer 1 tag (mb 0, chunk 0)");
    drop(&w);
}

static void test_coverage_and_waits(void) {
    world w;
    build(&w, 1, 1, 3, true, false);
    w.rk[0].actions[find(&w, 0, TR_PP_BWD, 2)].mb = 1; /* B1 twice, B2 never */
    const char *m = check(&w, "pipeline.schedule_coverage");
    if (m) CHECK_CONTAINS(m, "microbatch 1 of chunk 0 forward 1 times and backward 2 times");
    drop(&w);

    /* a transfer that is posted but never waited on (the last send is alone in its group) */
    build(&w, 2, 1, 2, true, false);
    int i = find(&w, 1, TR_PP_SEND_GRAD, 1);
    CHECK_INT_EQ(w.rk[1].actions[i + 1].op, TR_PP_WAIT);
    erase(&w, 1, i + 1);
    m = check(&w, "pipeline.schedule_wait");
    if (m) CHECK_CONTAINS(m, "never waited on");
    drop(&w);

    /* a forward that runs before its input arrived */
    build(&w, 2, 1, 2, true, false);
    i = find(&w, 1, TR_PP_FWD, 0);
    swap(&w, 1, i, i - 1); /* FWD before the WAIT of its receive */
    m = check(&w, "pipeline.schedule_dependency");
    if (m) CHECK_CONTAINS(m, "before its input activation has been received");
    drop(&w);
}

/* The embedding-group all-reduce is a collective of ranks 0 and PP-1: one side missing it
 * hangs the other. */
static void test_embedding_allreduce_pairing(void) {
    world w;
    build(&w, 3, 1, 3, true, false);
    check(&w, NULL);
    CHECK(find(&w, 1, TR_PP_EMBED_GRAD_ALLREDUCE, -1) < 0);
    erase(&w, 2, find(&w, 2, TR_PP_EMBED_GRAD_ALLREDUCE, -1));
    const char *m = check(&w, "pipeline.schedule_deadlock");
    if (m) CHECK_CONTAINS(m, "EMBED_GRAD_ALLREDUCE peer 2");
    drop(&w);
}

TR_TEST_MAIN(TR_TEST(test_swap_two_sends), TR_TEST(test_drop_a_receive),
             TR_TEST(test_mismatched_tag), TR_TEST(test_wrong_peer),
             TR_TEST(test_cyclic_wait_blocking), TR_TEST(test_cyclic_wait_batched),
             TR_TEST(test_coverage_and_waits), TR_TEST(test_embedding_allreduce_pairing))
