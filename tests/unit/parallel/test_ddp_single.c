/* DDP, distributed optimizer and clipping on one rank, through a loopback comm backend (no MPI,
 * so leak-checked under ASan): sequencing rules, error paths, the counted mask of the grad norm,
 * and equality with a plain serial loop. Multi-rank equivalence is tests/dp. */
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "runtime/distributed/ddp.h"
#include "runtime/distributed/dist_optimizer.h"
#include "runtime/distributed/grad_clip.h"

/* One rank in every group. Collectives complete only when waited for (test never reports them
 * done), so requests stay in flight observably. */
static int lb_size(const tr_comm *c, int g) {
    (void)c, (void)g;
    return 1;
}
static int lb_rank(const tr_comm *c, int g) {
    (void)c, (void)g;
    return 0;
}
static int lb_world(const tr_comm *c, int g, int r) {
    (void)c, (void)g;
    return r == 0 ? 0 : -1;
}
static tr_status lb_start(tr_comm *c, const tr_comm_call *call, tr_comm_request *req) {
    (void)c, (void)req;
    if (call->send && call->recv && call->kind == TR_COMM_ALL_REDUCE)
        memcpy(call->recv, call->send, call->count * tr_comm_dtype_size(call->dtype));
    return TR_OK;
}
static tr_status lb_test(tr_comm *c, tr_comm_request *req, bool *done) {
    (void)c, (void)req;
    *done = false;
    return TR_OK;
}
static tr_status lb_wait(tr_comm *c, tr_comm_request *req) {
    (void)c, (void)req;
    return TR_OK;
}
static void lb_release(tr_comm *c, tr_comm_request *req) {
    (void)c, (void)req;
}
static void lb_abort(tr_comm *c, int code) {
    (void)c;
    exit(code);
}
static void lb_destroy(tr_comm *c) {
    (void)c;
}
static const tr_comm_backend k_loopback = {"loopback", lb_size, lb_rank,    lb_world, lb_start,
                                           lb_test,    lb_wait, lb_release, lb_abort, lb_destroy};

static tr_comm loopback(tr_diags *d) {
    tr_comm c;
    memset(&c, 0, sizeof c);
    c.backend = &k_loopback;
    c.timeout_s = 10;
    c.diags = d;
    return c;
}

enum { NP = 4 };
static const int64_t k_numel[NP] = {40, 7, 130, 9};

static void layout(tr_grad_layout *L, bool sharded, int64_t bucket_size, bool replicate1) {
    tr_grad_param p[NP];
    memset(p, 0, sizeof p);
    for (int i = 0; i < NP; i++) {
        snprintf(p[i].name, sizeof p[i].name, "w%d", i);
        p[i].numel = k_numel[i];
        p[i].no_weight_decay = i % 2 == 1;
    }
    p[1].tp_replicated = replicate1;
    tr_grad_layout_options o = tr_grad_layout_defaults(1, bucket_size, sharded);
    CHECK(tr_grad_layout_build(L, p, NP, &o, NULL) == TR_OK);
}

static float grad_of(float x, int s, int64_t i) {
    return sinf(x * (float)(s + 1) + 0.1f * (float)i) + 0.01f * (float)s;
}

/* One rank, 3 microbatches, 2 steps: the DP path must reproduce a plain loop bit for bit. */
static void run_equivalence(bool sharded, bool overlap, int64_t bucket_size) {
    tr_diags d;
    tr_diags_init(&d);
    tr_comm c = loopback(&d);
    const tr_ops *ops = tr_ops_cpu();
    tr_grad_layout L;
    layout(&L, sharded, bucket_size, false);
    float *x = calloc((size_t)L.numel, 4), *g = calloc((size_t)L.numel, 4);
    int64_t total = L.param_numel;
    float *rx = malloc((size_t)total * 4), *rg = malloc((size_t)total * 4);
    float *rm = calloc((size_t)total, 4), *rv = calloc((size_t)total, 4);
    int64_t pos = 0;
    for (int p = 0; p < NP; p++)
        for (int64_t i = 0; i < k_numel[p]; i++, pos++)
            rx[pos] = x[L.params[p].offset + i] = 0.1f * (float)(i % 13) - 0.4f + (float)p;
    tr_ddp ddp;
    tr_dist_opt opt;
    tr_ddp_options dopt = {.group = TR_GROUP_DP_CP, .overlap_grad_reduce = overlap};
    tr_dist_opt_options oopt = {.kind = TR_DIST_OPT_ADAMW,
                                .beta1 = 0.9f,
                                .beta2 = 0.999f,
                                .eps = 1e-8f,
                                .group = TR_GROUP_DP_CP,
                                .overlap_param_gather = sharded && overlap};
    CHECK(tr_ddp_create(&ddp, &L, g, &c, ops, &dopt, &d) == TR_OK);
    CHECK(tr_dist_opt_create(&opt, &L, x, g, &c, ops, &oopt, &d) == TR_OK);
    for (int step = 1; step <= 2; step++) {
        CHECK(tr_ddp_start_iteration(&ddp, 1.0f / 3) == TR_OK);
        for (int s = 0; s < 3; s++) {
            tr_ddp_set_last_microbatch(&ddp, s == 2);
            for (int p = NP - 1; p >= 0; p--) {
                for (int64_t i = 0; i < k_numel[p]; i++)
                    g[L.params[p].offset + i] += grad_of(x[L.params[p].offset + i], s, i);
                CHECK(tr_ddp_grad_ready(&ddp, p) == TR_OK);
            }
        }
        CHECK_INT_EQ(ddp.started_early, overlap ? L.n_buckets : 0);
        CHECK(tr_ddp_finish_grad_sync(&ddp) == TR_OK);
        CHECK(tr_dist_opt_step(&opt, 0.01f, 0.1f) == TR_OK);
        CHECK(tr_dist_opt_wait_all_params(&opt) == TR_OK);
        /* The plain loop. */
        memset(rg, 0, (size_t)total * 4);
        for (int s = 0; s < 3; s++) {
            pos = total;
            for (int p = NP - 1; p >= 0; p--) {
                pos -= k_numel[p];
                for (int64_t i = 0; i < k_numel[p]; i++) rg[pos + i] += grad_of(rx[pos + i], s, i);
            }
        }
        pos = 0;
        for (int p = 0; p < NP; p++) {
            for (int64_t i = 0; i < k_numel[p]; i++) rg[pos + i] *= 1.0f / 3;
            tr_adamw_params ap = {.lr = 0.01f,
                                  .beta1 = 0.9f,
                                  .beta2 = 0.999f,
                                  .eps = 1e-8f,
                                  .weight_decay = p % 2 ? 0.0f : 0.1f,
                                  .step = step};
            CHECK(ops->adamw(rx + pos, rg + pos, rm + pos, rv + pos, k_numel[p], &ap) == TR_OK);
            pos += k_numel[p];
        }
    }
    int mismatches = 0;
    pos = 0;
    for (int p = 0; p < NP; p++)
        for (int64_t i = 0; i < k_numel[p]; i++, pos++)
            mismatches += memcmp(&rx[pos], &x[L.params[p].offset + i], 4) != 0;
    CHECK_INT_EQ(mismatches, 0);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_dist_opt_free(&opt);
    tr_ddp_free(&ddp);
    tr_grad_layout_free(&L);
    free(x), free(g), free(rx), free(rg), free(rm), free(rv);
    tr_diags_free(&d);
}

static void test_equivalence(void) {
    for (int sharded = 0; sharded < 2; sharded++)
        for (int overlap = 0; overlap < 2; overlap++)
            for (int b = 0; b < 2; b++) run_equivalence(sharded, overlap, b ? 50 : 0);
}

static void test_sequencing(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_comm c = loopback(&d);
    tr_grad_layout L;
    layout(&L, true, 50, false);
    float *g = calloc((size_t)L.numel, 4);
    tr_ddp ddp;
    tr_ddp_options o = {.group = TR_GROUP_DP_CP, .overlap_grad_reduce = true};
    CHECK(tr_ddp_create(&ddp, &L, g, &c, tr_ops_cpu(), &o, &d) == TR_OK);
    /* Earlier microbatches only accumulate. */
    tr_ddp_set_last_microbatch(&ddp, false);
    CHECK(tr_ddp_grad_ready(&ddp, 3) == TR_OK);
    CHECK_INT_EQ(ddp.started_early, 0);
    tr_ddp_set_last_microbatch(&ddp, true);
    CHECK(tr_ddp_grad_ready(&ddp, 3) == TR_OK);
    CHECK(tr_ddp_grad_ready(&ddp, 2) == TR_OK);
    CHECK_INT_EQ(ddp.started_early, 1); /* bucket 0 = {w3, w2} complete: started, in flight */
    CHECK(ddp.requests[0] != NULL);
    /* The next iteration cannot start over collectives in flight. */
    CHECK(tr_ddp_start_iteration(&ddp, 1.0f) == TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "ddp.sequence") != NULL);
    CHECK(tr_ddp_grad_ready(&ddp, 2) == TR_ERR_INVALID); /* twice */
    CHECK(tr_ddp_grad_ready(&ddp, -1) == TR_ERR_INVALID);
    CHECK(tr_ddp_finish_grad_sync(&ddp) == TR_OK);
    CHECK(tr_ddp_finish_grad_sync(&ddp) == TR_OK); /* idempotent */
    CHECK(ddp.requests[0] == NULL);
    CHECK(tr_ddp_start_iteration(&ddp, 1.0f) == TR_OK);
    CHECK(tr_ddp_scale_grads(&ddp, 0.5f) == TR_ERR_INVALID); /* before finish */
    /* Counters: one reduce-scatter per bucket over the whole padded buffer. */
    tr_comm_counters_reset(&c.counters);
    CHECK(tr_ddp_finish_grad_sync(&ddp) == TR_OK);
    CHECK_INT_EQ(tr_comm_counters_bytes(&c.counters, TR_GROUP_DP_CP, TR_COMM_REDUCE_SCATTER),
                 4 * L.numel);
    CHECK_INT_EQ(tr_comm_counters_calls(&c.counters, TR_GROUP_DP_CP, -1), L.n_buckets);
    tr_ddp_free(&ddp); /* waits nothing: all complete */

    /* Requests left in flight are waited for by free (no leak under ASan). */
    CHECK(tr_ddp_create(&ddp, &L, g, &c, tr_ops_cpu(), &o, &d) == TR_OK);
    CHECK(tr_ddp_grad_ready(&ddp, 3) == TR_OK && tr_ddp_grad_ready(&ddp, 2) == TR_OK);
    tr_ddp_free(&ddp);

    /* Optimizer misuse. */
    tr_dist_opt opt;
    tr_dist_opt_options oo = {.group = TR_GROUP_DP_CP, .overlap_param_gather = true};
    tr_grad_layout U;
    layout(&U, false, 0, false);
    float *x = calloc((size_t)U.numel, 4);
    CHECK(tr_dist_opt_create(&opt, &U, x, g, &c, tr_ops_cpu(), &oo, &d) == TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "ddp.overlap_param_gather") != NULL);
    oo.overlap_param_gather = false;
    CHECK(tr_dist_opt_create(&opt, &U, x, g, &c, tr_ops_cpu(), &oo, &d) == TR_OK);
    CHECK(tr_dist_opt_wait_param(&opt, U.n_buckets) == TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "ddp.wait_param") != NULL);
    tr_dist_opt_free(&opt);
    tr_grad_layout_free(&U);
    tr_grad_layout_free(&L);
    free(x);
    free(g);
    tr_diags_free(&d);
}

static void test_nan_check(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_comm c = loopback(&d);
    tr_grad_layout L;
    layout(&L, false, 50, false);
    float *g = calloc((size_t)L.numel, 4);
    tr_ddp ddp;
    tr_ddp_options o = {.group = TR_GROUP_DP_CP, .check_for_nan_in_grad = false};
    CHECK(tr_ddp_create(&ddp, &L, g, &c, tr_ops_cpu(), &o, &d) == TR_OK);
    g[L.params[0].offset + 5] = INFINITY;
    CHECK(tr_ddp_finish_grad_sync(&ddp) == TR_OK); /* check off: passes */
    tr_ddp_free(&ddp);
    o.check_for_nan_in_grad = true;
    CHECK(tr_ddp_create(&ddp, &L, g, &c, tr_ops_cpu(), &o, &d) == TR_OK);
    CHECK(tr_ddp_finish_grad_sync(&ddp) == TR_OK); /* create zeroed the buffer */
    CHECK(tr_ddp_start_iteration(&ddp, 1.0f) == TR_OK);
    g[L.params[0].offset + 5] = NAN;
    CHECK(tr_ddp_finish_grad_sync(&ddp) == TR_ERR_INVALID);
    const tr_diag *e = tr_diags_find(&d, "ddp.nan_in_grad");
    CHECK(e != NULL);
    if (e) CHECK_CONTAINS(e->message, "'w0'");
    tr_ddp_free(&ddp);
    tr_grad_layout_free(&L);
    free(g);
    tr_diags_free(&d);
}

/* The norm counts each counted element once; a TP-replicated parameter only on TP rank 0. */
static void test_clip(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_comm c = loopback(&d);
    tr_grad_layout L;
    layout(&L, true, 0, true);
    float *g = calloc((size_t)L.numel, 4);
    for (int p = 0; p < NP; p++)
        for (int64_t i = 0; i < k_numel[p]; i++) g[L.params[p].offset + i] = p == 1 ? 2.0f : 0.5f;
    tr_grad_owned w;
    CHECK(tr_grad_owned_build(&w, &L, 0) == TR_OK);
    uint8_t counted[NP];
    tr_grad_counted_mask(&L, 1, counted);
    CHECK(counted[0] && !counted[1] && counted[2] && counted[3]);
    /* Elements other than w1's: 40 + 130 + 9 = 179 of 0.25 each. */
    double norm = 0;
    bool clipped = true;
    CHECK(tr_grad_clip(&c, TR_GROUP_TP_PP, &L, &w, g, counted, tr_ops_cpu(), 100.0, &norm,
                       &clipped) == TR_OK);
    CHECK_CLOSE(norm, sqrt(179 * 0.25), 1e-12, 0);
    CHECK(!clipped && g[L.params[2].offset] == 0.5f);
    tr_grad_counted_mask(&L, 0, counted);
    CHECK(tr_grad_clip(&c, TR_GROUP_TP_PP, &L, &w, g, counted, tr_ops_cpu(), 1.0, &norm,
                       &clipped) == TR_OK);
    CHECK_CLOSE(norm, sqrt(179 * 0.25 + 7 * 4.0), 1e-12, 0);
    CHECK(clipped);
    CHECK_CLOSE(g[L.params[1].offset], 2.0 / (norm + 1e-6), 1e-6, 0);
    CHECK_CLOSE(g[L.params[3].offset + 8], 0.5 / (norm + 1e-6), 1e-6, 0);
    /* A non-finite norm is reported, nothing is scaled. */
    g[L.params[2].offset] = NAN;
    CHECK(tr_grad_clip(&c, TR_GROUP_TP_PP, &L, &w, g, NULL, tr_ops_cpu(), 1.0, &norm, &clipped) ==
          TR_OK);
    CHECK(isnan(norm) && !clipped);
    CHECK_INT_EQ(tr_grad_norm_group(true), TR_GROUP_INTRA_DIST_OPT);
    CHECK_INT_EQ(tr_grad_norm_group(false), TR_GROUP_TP_PP);
    tr_grad_owned_free(&w);
    tr_grad_layout_free(&L);
    free(g);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_equivalence), TR_TEST(test_sequencing), TR_TEST(test_nan_check),
             TR_TEST(test_clip))
