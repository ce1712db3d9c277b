/* MoE recomputation (runtime/moe/recompute.c) against the layer that keeps everything: two
 * microbatches in flight (two slots) forwarded, then each recomputed and backpropagated, must give
 * bitwise the same input gradients, parameter gradients, balancing-loss statistics, logged tokens
 * and expert-bias counts as forward, forward, backward, backward without recomputation; the
 * rerun of the whole layer must count none of them again. Routing exercises what the rerun must
 * redraw or hold: jitter, a capacity factor, expert bias, the global aux loss (whose running
 * counts have moved on by the backward), the z-loss and a gated shared expert. */
#include <stdlib.h>
#include <string.h>

#include "runtime/moe/moe.h"
#include "tests/unit/harness.h"

enum { H = 8, B = 2, S = 4, T = B * S, SLOTS = 2, E = 4 };

typedef struct run {
    tr_moe_layer *L;
    float *p, *g, *rc;
    int32_t *irc;
    float dx[SLOTS][T * H], y[SLOTS][T * H];
    double lb, z, tokens[E], counts[E];
    int n;
    int64_t numel;
} run;

static uint64_t rng_state;
static float urand(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

static tr_moe_spec spec(void) {
    tr_moe_spec s = {.experts = E, .topk = 2, .ffn = 6, .topk_scale = 1.0f, .shared_ffn = 5};
    s.layers[0] = 1;
    s.shared_gate = true;
    s.score = TR_MOE_SIGMOID;
    s.expert_bias = true;
    s.bias_rate = 1e-3f;
    s.balance = TR_MOE_LB_GLOBAL_AUX;
    s.aux_coeff = 0.01f;
    s.z_coeff = 1e-3f;
    s.capacity = 1.0f;
    s.jitter = 0.05f;
    return s;
}

/* The two microbatches through a layer recomputing `rc` (0: none). */
static void train(run *r, unsigned rc, const float *x, const float *dy) {
    tr_moe_spec s = spec();
    memset(r, 0, sizeof *r);
    tr_moe_dims d = {.hidden = H, .batch = B, .seq = S, .slots = SLOTS, .swiglu = true, .rc = rc};
    int64_t ints = 0, floats = tr_moe_rc_bytes(&s, &d, &ints);
    CHECK(rc == 0 ? floats == 0 : floats > 0 && ints >= 0);
    r->rc = calloc((size_t)floats + 64, 1);
    r->irc = calloc((size_t)ints + 64, 1);
    d.rc_buf = r->rc;
    d.rc_ibuf = r->irc;
    int n = tr_moe_param_count(&s);
    tr_moe_param *info = calloc((size_t)n, sizeof *info);
    int64_t *off = calloc((size_t)n, sizeof *off), numel = 0;
    CHECK_INT_EQ(tr_moe_params(&s, 0, H, true, info), TR_OK);
    for (int i = 0; i < n; i++) {
        off[i] = numel;
        numel += (int64_t)info[i].rows * info[i].cols;
    }
    r->p = calloc((size_t)numel, sizeof *r->p);
    r->g = calloc((size_t)numel, sizeof *r->g);
    rng_state = 7;
    for (int64_t i = 0; i < numel; i++) r->p[i] = 0.5f * urand();
    CHECK_INT_EQ(tr_moe_create(&r->L, &s, &d, tr_ops_cpu()), TR_OK);
    tr_moe_bind(r->L, r->p, r->g, off);
    for (int m = 0; m < SLOTS; m++)
        CHECK_INT_EQ(tr_moe_forward(r->L, m, x + m * T * H, r->y[m], true, 11, (uint64_t)m), TR_OK);
    for (int m = 0; m < SLOTS; m++) {
        if (rc) {
            float y[T * H];
            CHECK_INT_EQ(tr_moe_recompute(r->L, m, x + m * T * H, y, 11, (uint64_t)m), TR_OK);
            if (rc & TR_MOE_RC_ALL) CHECK(!memcmp(y, r->y[m], sizeof y));
        }
        CHECK_INT_EQ(tr_moe_backward(r->L, m, dy + m * T * H, r->dx[m], 0.5f), TR_OK);
    }
    tr_moe_take_stats(r->L, &r->lb, &r->z, &r->n);
    tr_moe_take_tokens(r->L, r->tokens);
    memcpy(r->counts, tr_moe_step_counts(r->L), sizeof r->counts);
    CHECK_INT_EQ(tr_moe_step_end(r->L), TR_OK);
    r->numel = numel;
    free(info);
    free(off);
}

static void done(run *r) {
    tr_moe_free(r->L);
    free(r->p);
    free(r->g);
    free(r->rc);
    free(r->irc);
}

static void test_same_bits(void) {
    static float x[SLOTS * T * H], dy[SLOTS * T * H];
    rng_state = 3;
    for (int i = 0; i < SLOTS * T * H; i++) x[i] = urand(), dy[i] = urand();
    run ref;
    train(&ref, 0, x, dy);
    CHECK(ref.lb > 0.0 && ref.z > 0.0);
    const unsigned modes[] = {TR_MOE_RC_ALL, TR_MOE_RC_ACT, TR_MOE_RC_SHARED,
                              TR_MOE_RC_ACT | TR_MOE_RC_SHARED};
    for (size_t k = 0; k < sizeof modes / sizeof *modes; k++) {
        run r;
        train(&r, modes[k], x, dy);
        CHECK(!memcmp(r.dx, ref.dx, sizeof r.dx));
        CHECK(!memcmp(r.y, ref.y, sizeof r.y));
        CHECK_INT_EQ(r.n, ref.n);
        CHECK(r.lb == ref.lb && r.z == ref.z);
        CHECK(!memcmp(r.tokens, ref.tokens, sizeof r.tokens));
        CHECK(!memcmp(r.counts, ref.counts, sizeof r.counts));
        /* every gradient, and the expert bias the step's counts updated */
        CHECK_INT_EQ(r.numel, ref.numel);
        CHECK(!memcmp(r.g, ref.g, (size_t)ref.numel * sizeof(float)));
        CHECK(!memcmp(r.p, ref.p, (size_t)ref.numel * sizeof(float)));
        done(&r);
    }
    done(&ref);
}

/* A layer that shares its recompute state needs the caller's storage. */
static void test_needs_storage(void) {
    tr_moe_spec s = spec();
    tr_moe_dims d = {.hidden = H, .batch = B, .seq = S, .slots = 1, .rc = TR_MOE_RC_ALL};
    tr_moe_layer *L = NULL;
    CHECK_INT_EQ(tr_moe_create(&L, &s, &d, tr_ops_cpu()), TR_ERR_INVALID);
    CHECK(L == NULL);
}

TR_TEST_MAIN(TR_TEST(test_same_bits), TR_TEST(test_needs_storage))
