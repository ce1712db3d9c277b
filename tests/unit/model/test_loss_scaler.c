/* The loss scaler's state machine against the rules written out in runtime/optimizer/loss_scaler.h
 * (Megatron's DynamicGradScaler: growth 2 after `window` clean steps in a row, backoff 0.5 once
 * the hysteresis count is used up, floor at the minimum; a static scale never moves), and the
 * config mapping. */
#include "tests/unit/harness.h"
#include "recipes/resolve.h"
#include "runtime/optimizer/loss_scaler.h"

static void test_growth_after_window_clean_steps(void) {
    tr_loss_scaler s;
    tr_loss_scaler_init_dynamic(&s, 1024.0, 1.0, 3, 2);
    tr_loss_scaler_update(&s, false);
    tr_loss_scaler_update(&s, false);
    CHECK(s.scale == 1024.0); /* two clean steps: not yet */
    tr_loss_scaler_update(&s, false);
    CHECK(s.scale == 2048.0); /* the third completes the window */
    for (int i = 0; i < 3; i++) tr_loss_scaler_update(&s, false);
    CHECK(s.scale == 4096.0); /* and the count restarted after growing */
    /* An overflow restarts the clean-step count: 2 clean, overflow, 2 clean -> no growth. */
    tr_loss_scaler_update(&s, false);
    tr_loss_scaler_update(&s, false);
    tr_loss_scaler_update(&s, true);
    tr_loss_scaler_update(&s, false);
    tr_loss_scaler_update(&s, false);
    CHECK(s.scale == 4096.0);
    tr_loss_scaler_update(&s, false);
    CHECK(s.scale == 8192.0);
}

static void test_hysteresis_countdown(void) {
    tr_loss_scaler s;
    tr_loss_scaler_init_dynamic(&s, 1024.0, 1.0, 1000, 3);
    tr_loss_scaler_update(&s, true);
    tr_loss_scaler_update(&s, true);
    CHECK(s.scale == 1024.0); /* two of three tolerated overflows */
    tr_loss_scaler_update(&s, true);
    CHECK(s.scale == 512.0); /* the third halves */
    /* Clean steps do not restore the count (only growth does): each further overflow halves. */
    tr_loss_scaler_update(&s, false);
    tr_loss_scaler_update(&s, true);
    CHECK(s.scale == 256.0);
    tr_loss_scaler_update(&s, true);
    CHECK(s.scale == 128.0);
}

static void test_growth_restores_hysteresis(void) {
    tr_loss_scaler s;
    tr_loss_scaler_init_dynamic(&s, 64.0, 1.0, 2, 2);
    tr_loss_scaler_update(&s, true);
    tr_loss_scaler_update(&s, true);
    CHECK(s.scale == 32.0);
    tr_loss_scaler_update(&s, false);
    tr_loss_scaler_update(&s, false);
    CHECK(s.scale == 64.0);
    tr_loss_scaler_update(&s, true); /* tolerated again after the growth */
    CHECK(s.scale == 64.0);
    tr_loss_scaler_update(&s, true);
    CHECK(s.scale == 32.0);
}

static void test_floor_at_min_scale(void) {
    tr_loss_scaler s;
    tr_loss_scaler_init_dynamic(&s, 8.0, 3.0, 1000, 1);
    tr_loss_scaler_update(&s, true);
    CHECK(s.scale == 4.0);
    tr_loss_scaler_update(&s, true);
    CHECK(s.scale == 3.0); /* not 2 */
    tr_loss_scaler_update(&s, true);
    CHECK(s.scale == 3.0);
}

static void test_static_scale_never_moves(void) {
    tr_loss_scaler s;
    tr_loss_scaler_init_static(&s, 128.0);
    for (int i = 0; i < 5; i++) tr_loss_scaler_update(&s, i % 2 == 0);
    for (int i = 0; i < 2000; i++) tr_loss_scaler_update(&s, false);
    CHECK(s.scale == 128.0);
    CHECK(tr_loss_scaler_factor(&s) == 128.0f);
}

static tr_status scaler_of(const char **ov, int n, tr_loss_scaler *s, tr_diags *d) {
    tr_config c;
    tr_resolve_opts o = {
        .recipe = "llama_tiny_pretrain", .overrides = ov, .n_overrides = n, .world = {1, 1}};
    tr_diags_init(d);
    tr_status st = tr_resolve(&o, &c, d);
    if (st == TR_OK) st = tr_loss_scaler_from_config(&c, s, d);
    tr_config_free(&c);
    return st;
}

static void test_config_mapping(void) {
    tr_loss_scaler s;
    tr_diags d;
    const char *fp16[] = {"mixed_precision.preset=fp16_mixed", "mixed_precision.hysteresis=3",
                          "mixed_precision.loss_scale_window=50"};
    CHECK_INT_EQ(scaler_of(fp16, 3, &s, &d), TR_OK);
    CHECK(s.enabled && s.dynamic);
    CHECK(s.scale == 4294967296.0); /* Megatron's default 2^32 */
    CHECK_INT_EQ(s.hysteresis, 3);
    CHECK_INT_EQ(s.growth_interval, 50);
    tr_diags_free(&d);
    const char *stat[] = {"mixed_precision.preset=fp16_mixed", "mixed_precision.loss_scale=512"};
    CHECK_INT_EQ(scaler_of(stat, 2, &s, &d), TR_OK);
    CHECK(s.enabled && !s.dynamic && s.scale == 512.0);
    tr_diags_free(&d);
    const char *bf16[] = {"mixed_precision.preset=bf16_mixed"};
    CHECK_INT_EQ(scaler_of(bf16, 1, &s, &d), TR_OK);
    CHECK(!s.enabled);
    CHECK(tr_loss_scaler_factor(&s) == 1.0f);
    tr_diags_free(&d);
    const char *bad[] = {"mixed_precision.preset=fp16_mixed", "mixed_precision.min_loss_scale=8",
                         "mixed_precision.initial_loss_scale=4"};
    CHECK_INT_EQ(scaler_of(bad, 3, &s, &d), TR_ERR_CONFIG);
    CHECK(tr_diags_find(&d, "runtime.loss_scale") != NULL);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_growth_after_window_clean_steps), TR_TEST(test_hysteresis_countdown),
             TR_TEST(test_growth_restores_hysteresis), TR_TEST(test_floor_at_min_scale),
             TR_TEST(test_static_scale_never_moves), TR_TEST(test_config_mapping))
