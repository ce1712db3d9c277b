/* Pipeline schedules: the worked orderings of megatron-core.md §3 (hard-coded from the
 * reference text), then properties over a grid of configs checked independently of the
 * simulator, then the static check and the bubble. */
#include <stdlib.h>
#include <string.h>

#include "core/validate.h"
#include "runtime/pipeline/pipeline.h"
#include "tests/unit/harness.h"

static tr_pp_plan plan(int pp, int vpp, int m, bool batched, bool overlapped) {
    tr_pp_plan p = {pp, vpp, m, pp, batched, overlapped, true, 4096};
    return p;
}

/* The compute order of one rank in the reference's notation. */
static char *order(const tr_pp_plan *p, int rank) {
    tr_pp_schedule s;
    if (tr_pp_schedule_build_plan(p, rank, &s) != TR_OK) return NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tr_pp_schedule_print_one(f, &s, true);
    fclose(f);
    tr_pp_schedule_free(&s);
    buf[strcspn(buf, "\n")] = '\0';
    return buf;
}

static void expect_order(const tr_pp_plan *p, int rank, const char *want) {
    char *got = order(p, rank);
    CHECK(got != NULL);
    if (got) CHECK_STR_EQ(got, want);
    free(got);
}

/* §3.1: PP=4, M=8, per-rank op order. */
static void test_1f1b_reference_order(void) {
    tr_pp_plan p = plan(4, 1, 8, true, false);
    expect_order(&p, 0, "rank0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
    expect_order(&p, 1, "rank1: F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
    expect_order(&p, 2, "rank2: F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
    expect_order(&p, 3, "rank3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
    /* the order does not depend on how transfers are issued */
    tr_pp_plan q = plan(4, 1, 8, false, false);
    expect_order(&q, 2, "rank2: F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
}

/* §3.2: PP=2, VP=2, M=4: the table and both ranks' orders. */
static void test_interleaved_reference_order(void) {
    tr_pp_slot *t;
    CHECK(tr_pp_interleaved_table(4, 2, 2, &t) == TR_OK);
    static const int want[8][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, 0}, {3, 0}, {2, 1}, {3, 1}};
    for (int k = 0; k < 8; k++) {
        CHECK_INT_EQ(t[k].mb, want[k][0]);
        CHECK_INT_EQ(t[k].chunk, want[k][1]);
    }
    free(t);
    tr_pp_plan p = plan(2, 2, 4, true, true);
    expect_order(&p, 0,
                 "rank0: F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 B2c1 B3c1 "
                 "B2c0 B3c0");
    expect_order(&p, 1,
                 "rank1: F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 B2c1 F3c1 B3c1 "
                 "B2c0 B3c0");
    /* warmup W = (PP - rank - 1) * 2 + (C - 1) * G, capped at M * C */
    CHECK_INT_EQ(tr_pp_interleaved_warmup(2, 0, 2, 2, 4), 4);
    CHECK_INT_EQ(tr_pp_interleaved_warmup(2, 1, 2, 2, 4), 2);
    CHECK_INT_EQ(tr_pp_interleaved_warmup(8, 0, 4, 8, 8), 32);
}

/* A short last group (M % G >= PP) runs chunk by chunk over the remaining microbatches. */
static void test_interleaved_partial_group(void) {
    tr_pp_slot *t;
    CHECK(tr_pp_interleaved_table(5, 2, 3, &t) == TR_OK); /* groups {0,1,2} and {3,4} */
    static const int want[10][2] = {{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1},
                                    {2, 1}, {3, 0}, {4, 0}, {3, 1}, {4, 1}};
    for (int k = 0; k < 10; k++) {
        CHECK_INT_EQ(t[k].mb, want[k][0]);
        CHECK_INT_EQ(t[k].chunk, want[k][1]);
    }
    free(t);
}

static void test_no_pipeline_is_gradient_accumulation(void) {
    tr_pp_plan p = plan(1, 1, 3, true, false);
    expect_order(&p, 0, "rank0: F0 B0 F1 B1 F2 B2");
    tr_pp_schedule s;
    CHECK(tr_pp_schedule_build_plan(&p, 0, &s) == TR_OK);
    for (int i = 0; i < s.n; i++) CHECK(s.actions[i].op != TR_PP_SEND_ACT);
    CHECK_INT_EQ(s.actions[s.n - 1].op, TR_PP_DP_GRAD_REDUCE);
    tr_pp_schedule_free(&s);
}

static bool is_send(tr_pp_op op) {
    return op == TR_PP_SEND_ACT || op == TR_PP_SEND_GRAD;
}

/* Properties checked here without the simulator: one FWD and one BWD per (mb, chunk), FWD
 * first; the transfers from each rank to each other rank carry the same (kind, mb, stage
 * boundary) sequence the receiver expects; the DP reduction follows the last backward. */
static int independent_properties(const tr_pp_schedule *rk, int pp, int v, int m) {
    int bad = 0;
    for (int r = 0; r < pp; r++) {
        int *f = calloc((size_t)(m * v), sizeof(int)), *b = calloc((size_t)(m * v), sizeof(int));
        int last_bwd = -1, dp = -1;
        for (int i = 0; i < rk[r].n; i++) {
            const tr_pp_action *a = &rk[r].actions[i];
            if (a->op == TR_PP_FWD) f[a->mb * v + a->chunk]++;
            if (a->op == TR_PP_BWD) {
                if (!f[a->mb * v + a->chunk]) bad++;
                b[a->mb * v + a->chunk]++;
                last_bwd = i;
            }
            if (a->op == TR_PP_DP_GRAD_REDUCE) dp = i;
        }
        for (int k = 0; k < m * v; k++) bad += f[k] != 1 || b[k] != 1;
        bad += dp < last_bwd;
        free(f), free(b);
    }
    for (int src = 0; src < pp && pp > 1; src++)
        for (int dst = 0; dst < pp; dst++) {
            /* sequences of (kind, mb, boundary) on the channel src -> dst */
            int ns = 0, nr = 0, cap = 4 * m * v + 4;
            int *s = malloc((size_t)cap * 3 * sizeof(int)),
                *q = malloc((size_t)cap * 3 * sizeof(int));
            for (int i = 0; i < rk[src].n; i++) {
                const tr_pp_action *a = &rk[src].actions[i];
                if (!is_send(a->op) || a->peer != dst) continue;
                int stage = a->chunk * pp + src;
                s[3 * ns] = a->op == TR_PP_SEND_ACT, s[3 * ns + 1] = a->mb;
                s[3 * ns + 2] = a->op == TR_PP_SEND_ACT ? stage : stage - 1;
                ns++;
            }
            for (int i = 0; i < rk[dst].n; i++) {
                const tr_pp_action *a = &rk[dst].actions[i];
                if ((a->op != TR_PP_RECV_ACT && a->op != TR_PP_RECV_GRAD) || a->peer != src)
                    continue;
                int stage = a->chunk * pp + dst;
                q[3 * nr] = a->op == TR_PP_RECV_ACT, q[3 * nr + 1] = a->mb;
                q[3 * nr + 2] = a->op == TR_PP_RECV_ACT ? stage - 1 : stage;
                nr++;
            }
            bad += ns != nr || memcmp(s, q, (size_t)ns * 3 * sizeof(int)) != 0;
            free(s), free(q);
        }
    return bad;
}

/* PP 1..8, VPP 1..4, M 1..24, every config Megatron accepts with the default G = PP, under all
 * four transfer modes: properties hold and the static check passes. */
static void test_grid_all_valid_configs_pass(void) {
    int configs = 0;
    for (int pp = 1; pp <= 8; pp++)
        for (int v = 1; v <= 4; v++)
            for (int m = 1; m <= 24; m++) {
                if (v > 1 && (pp == 1 || m < pp || (m % pp && m % pp < pp))) continue;
                for (int mode = 0; mode < 4; mode++) {
                    tr_pp_plan p = plan(pp, v, m, mode & 1, mode & 2);
                    tr_pp_schedule rk[8];
                    for (int r = 0; r < pp; r++)
                        CHECK(tr_pp_schedule_build_plan(&p, r, &rk[r]) == TR_OK);
                    int bad = independent_properties(rk, pp, v, m);
                    tr_diags d;
                    tr_diags_init(&d);
                    tr_status st = tr_pp_check(rk, pp, NULL, &d);
                    if (bad || st != TR_OK) {
                        fprintf(stderr, "  PP=%d VPP=%d M=%d mode=%d: %d property failures, %s\n",
                                pp, v, m, mode, bad, d.n ? d.items[0].message : "");
                        tr_test_failures++;
                    }
                    tr_diags_free(&d);
                    for (int r = 0; r < pp; r++) tr_pp_schedule_free(&rk[r]);
                    configs++;
                }
            }
    CHECK(configs > 500);
}

/* Non-multiple microbatch counts with a larger group, where Megatron allows them. */
static void test_interleaved_group_sizes(void) {
    for (int pp = 2; pp <= 4; pp++)
        for (int g = pp; g <= 2 * pp + 1; g++)
            for (int m = g; m <= 3 * g; m++) {
                if (m % g && m % g < pp) continue;
                for (int mode = 0; mode < 4; mode++) {
                    tr_pp_plan p = plan(pp, 2, m, mode & 1, mode & 2);
                    p.group_size = g;
                    tr_pp_schedule rk[4];
                    for (int r = 0; r < pp; r++)
                        CHECK(tr_pp_schedule_build_plan(&p, r, &rk[r]) == TR_OK);
                    tr_diags d;
                    tr_diags_init(&d);
                    int bad = independent_properties(rk, pp, 2, m);
                    if (bad || tr_pp_check(rk, pp, NULL, &d) != TR_OK) {
                        fprintf(stderr, "  PP=%d G=%d M=%d mode=%d: %s\n", pp, g, m, mode,
                                d.n ? d.items[0].message : "property failure");
                        tr_test_failures++;
                    }
                    tr_diags_free(&d);
                    for (int r = 0; r < pp; r++) tr_pp_schedule_free(&rk[r]);
                }
            }
}

static tr_pp_bubble simulate(int pp, int v, int m, bool batched, bool overlapped) {
    tr_pp_plan p = plan(pp, v, m, batched, overlapped);
    tr_pp_schedule rk[8];
    for (int r = 0; r < pp; r++) tr_pp_schedule_build_plan(&p, r, &rk[r]);
    tr_diags d;
    tr_diags_init(&d);
    tr_pp_sim sim;
    tr_pp_bubble b = {0};
    if (tr_pp_check(rk, pp, &sim, &d) == TR_OK) {
        tr_pp_bubble_from_sim(&sim, pp, v, m, &b);
        tr_pp_sim_free(&sim);
    } else {
        b.simulated = -1;
    }
    tr_diags_free(&d);
    for (int r = 0; r < pp; r++) tr_pp_schedule_free(&rk[r]);
    return b;
}

/* 1F1B with free transfers takes (m + p - 1) forward+backward slots: bubble (p-1)/m exactly.
 * Interleaving shrinks the bubble toward (p-1)/(v*m). */
static void test_bubble(void) {
    CHECK_CLOSE(tr_pp_bubble_expected(4, 1, 8), 3.0 / 8, 1e-12, 0);
    CHECK_CLOSE(tr_pp_bubble_expected(4, 2, 8), 3.0 / 16, 1e-12, 0);
    for (int pp = 2; pp <= 8; pp *= 2)
        for (int m = pp; m <= 4 * pp; m += pp)
            for (int mode = 0; mode < 2; mode++) {
                tr_pp_bubble b = simulate(pp, 1, m, mode, false);
                CHECK_CLOSE(b.simulated, (double)(pp - 1) / m, 1e-12, 0);
                CHECK_CLOSE(b.simulated, b.expected, 1e-12, 0);
            }
    /* with the default group size and M a multiple of PP, interleaving reaches the paper's
     * (p-1)/(v*m) exactly, in every transfer mode */
    int pps[] = {2, 3, 4, 8};
    for (int i = 0; i < 4; i++)
        for (int v = 2; v <= 4; v++)
            for (int m = pps[i]; m <= 3 * pps[i]; m += pps[i])
                for (int mode = 0; mode < 4; mode++) {
                    tr_pp_bubble b = simulate(pps[i], v, m, mode & 1, mode & 2);
                    CHECK_CLOSE(b.simulated, (double)(pps[i] - 1) / (v * m), 1e-12, 0);
                    CHECK_CLOSE(b.per_rank_max, b.per_rank_min, 1e-12, 0);
                }
    tr_pp_bubble one = simulate(4, 1, 8, true, false);
    tr_pp_bubble two = simulate(4, 2, 8, true, true);
    CHECK(two.simulated > 0);
    CHECK(two.simulated < one.simulated);
    CHECK(two.simulated >= two.expected - 1e-12);
    tr_pp_bubble none = simulate(1, 1, 4, true, false);
    CHECK_CLOSE(none.simulated, 0.0, 1e-12, 0);
}

static void test_from_config(void) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_config_init(&c, &d) == TR_OK);
    c.model.pipeline_model_parallel_size = 4;
    c.model.virtual_pipeline_model_parallel_size = 2;
    c.model.microbatch_group_size_per_vp_stage = 4;
    c.model.overlap_p2p_comm = true;
    c.model.batch_p2p_comm = false;
    c.model.seq_length = 128;
    c.model.hidden_size = 64;
    c.model.params_dtype = TR_DTYPE_BF16;
    c.model.pipeline_dtype = -1;
    c.train.micro_batch_size = 2;
    c.derived.num_microbatches = 8;
    CHECK(tr_pp_schedule_check_all(&c, &d) == TR_OK);
    tr_pp_schedule s;
    CHECK(tr_pp_schedule_build(&c, 3, &s, &d) == TR_OK);
    CHECK_INT_EQ(s.kind, TR_PP_INTERLEAVED);
    CHECK_INT_EQ(s.message_bytes, 128 * 2 * 64 * 2);
    /* the last rank all-reduces the tied embedding grads with rank 0 after the DP reduction */
    CHECK_INT_EQ(s.actions[s.n - 1].op, TR_PP_EMBED_GRAD_ALLREDUCE);
    CHECK_INT_EQ(s.actions[s.n - 1].peer, 0);
    CHECK_INT_EQ(s.actions[s.n - 2].op, TR_PP_DP_GRAD_REDUCE);
    tr_pp_schedule_free(&s);
    CHECK(tr_pp_schedule_build(&c, 4, &s, &d) == TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "pipeline.schedule_rank") != NULL);

    /* printing: header, check result, bubble and one line per rank */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(tr_pp_schedule_print(f, &c, -1, true, &d) == TR_OK);
    fclose(f);
    CHECK_CONTAINS(buf, "interleaved 1F1B");
    CHECK_CONTAINS(buf, "static check: passed");
    CHECK_CONTAINS(buf, "expected (p-1)/(v*m) = 0.1875");
    CHECK_CONTAINS(buf, "rank3: F0c0");
    free(buf);

    /* a config Megatron refuses (M % G < PP) is refused here too */
    c.derived.num_microbatches = 6;
    tr_diags_clear(&d);
    CHECK(tr_pp_schedule_check_all(&c, &d) == TR_ERR_CONFIG);
    CHECK(tr_diags_find(&d, "pipeline.schedule_config") != NULL);
    tr_config_free(&c);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_1f1b_reference_order), TR_TEST(test_interleaved_reference_order),
             TR_TEST(test_interleaved_partial_group),
             TR_TEST(test_no_pipeline_is_gradient_accumulation),
             TR_TEST(test_grid_all_valid_configs_pass), TR_TEST(test_interleaved_group_sizes),
             TR_TEST(test_bubble), TR_TEST(test_from_config))
