/* LR and WD schedules against values worked out by hand from Megatron's formulas
 * (OptimizerParamScheduler): warmup 100 samples from 0 to 1e-3, decay to 1e-4 at 1000. */
#include "tests/unit/harness.h"
#include "recipes/resolve.h"
#include "runtime/optimizer/lr_schedule.h"

static tr_lr_schedule base(int style) {
    return (tr_lr_schedule){.style = style,
                            .max_lr = 1e-3,
                            .min_lr = 1e-4,
                            .init_lr = 0.0,
                            .warmup_steps = 100,
                            .decay_steps = 1000,
                            .wd_style = TR_WDINC_CONSTANT,
                            .start_wd = 0.1,
                            .end_wd = 0.1,
                            .wd_incr_steps = 1000};
}

static void test_warmup_is_linear_from_init(void) {
    tr_lr_schedule s = base(TR_SCHED_LINEAR);
    CHECK_CLOSE(tr_lr_at(&s, 0), 0.0, 0, 1e-15);
    CHECK_CLOSE(tr_lr_at(&s, 50), 5e-4, 1e-12, 0);
    CHECK_CLOSE(tr_lr_at(&s, 100), 1e-3, 1e-12, 0);
    s.init_lr = 1e-4;
    CHECK_CLOSE(tr_lr_at(&s, 50), 5.5e-4, 1e-12, 0);
}

static void test_linear_and_cosine_decay(void) {
    tr_lr_schedule s = base(TR_SCHED_LINEAR);
    CHECK_CLOSE(tr_lr_at(&s, 550), 5.5e-4, 1e-12, 0);
    CHECK_CLOSE(tr_lr_at(&s, 1000), 1e-4, 1e-12, 0);
    CHECK_CLOSE(tr_lr_at(&s, 5000), 1e-4, 1e-12, 0); /* past the decay: min_lr */
    s.style = TR_SCHED_COSINE;
    CHECK_CLOSE(tr_lr_at(&s, 550), 5.5e-4, 1e-12, 0);
    CHECK_CLOSE(tr_lr_at(&s, 325), 8.681980515e-4, 1e-9, 0); /* 1e-4 + 0.8535534 * 9e-4 */
    CHECK_CLOSE(tr_lr_at(&s, 1000), 1e-4, 1e-12, 0);
}

static void test_constant_and_inverse_sqrt(void) {
    tr_lr_schedule s = base(TR_SCHED_CONSTANT);
    CHECK_CLOSE(tr_lr_at(&s, 50), 5e-4, 1e-12, 0); /* warmup still applies */
    CHECK_CLOSE(tr_lr_at(&s, 5000), 1e-3, 1e-12, 0);
    s.style = TR_SCHED_INVERSE_SQRT;
    CHECK_CLOSE(tr_lr_at(&s, 400), 5e-4, 1e-12, 0); /* 1e-3 * sqrt(100) / sqrt(400) */
    CHECK_CLOSE(tr_lr_at(&s, 900), 1e-3 / 3.0, 1e-12, 0);
}

static void test_wsd_decay_styles(void) {
    tr_lr_schedule s = base(TR_SCHED_WSD);
    s.wsd_decay_steps = 200; /* anneal from sample 800 to 1000 */
    s.wsd_style = TR_WSD_LINEAR;
    CHECK_CLOSE(tr_lr_at(&s, 700), 1e-3, 1e-12, 0);
    CHECK_CLOSE(tr_lr_at(&s, 800), 1e-3, 1e-12, 0);
    CHECK_CLOSE(tr_lr_at(&s, 900), 5.5e-4, 1e-12, 0);
    s.wsd_style = TR_WSD_COSINE;
    CHECK_CLOSE(tr_lr_at(&s, 900), 5.5e-4, 1e-12, 0);
    s.wsd_style = TR_WSD_EXPONENTIAL; /* 2 * 0.5^0.5 - 1 = 0.41421356 */
    CHECK_CLOSE(tr_lr_at(&s, 900), 4.727922061e-4, 1e-9, 0);
    s.wsd_style = TR_WSD_MINUS_SQRT; /* 1 - sqrt(0.5) = 0.29289322 */
    CHECK_CLOSE(tr_lr_at(&s, 900), 3.636038969e-4, 1e-9, 0);
    CHECK_CLOSE(tr_lr_at(&s, 1000), 1e-4, 1e-9, 0);
}

static void test_weight_decay_schedule(void) {
    tr_lr_schedule s = base(TR_SCHED_LINEAR);
    CHECK_CLOSE(tr_wd_at(&s, 500), 0.1, 1e-12, 0);
    s.start_wd = 0.0;
    s.wd_style = TR_WDINC_LINEAR;
    CHECK_CLOSE(tr_wd_at(&s, 250), 0.025, 1e-12, 0);
    s.wd_style = TR_WDINC_COSINE; /* 0.5 * (cos(0.75 pi) + 1) = 0.14644661 */
    CHECK_CLOSE(tr_wd_at(&s, 250), 0.01464466094, 1e-9, 0);
    CHECK_CLOSE(tr_wd_at(&s, 2000), 0.1, 1e-12, 0);
}

/* The schedule reads the derived step counts: llama_tiny_pretrain has GBS 8, 200 iterations,
 * 10 warmup iterations, lr 1e-3, min_lr 1e-4, so warmup is 80 samples and decay 1600. */
static void test_from_config(void) {
    const char *ov[] = {"scheduler.lr_decay_style=cosine"};
    tr_resolve_opts o = {
        .recipe = "llama_tiny_pretrain", .overrides = ov, .n_overrides = 1, .world = {1, 1}};
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_resolve(&o, &c, &d), TR_OK);
    tr_lr_schedule s;
    CHECK_INT_EQ(tr_lr_schedule_from_config(&c, &s, &d), TR_OK);
    CHECK_INT_EQ(s.warmup_steps, 80);
    CHECK_INT_EQ(s.decay_steps, 1600);
    CHECK_CLOSE(tr_lr_at(&s, 40), 5e-4, 1e-12, 0);
    CHECK_CLOSE(tr_lr_at(&s, 840), 5.5e-4, 1e-12, 0); /* halfway through the cosine */
    tr_config_free(&c);
    tr_diags_free(&d);
}

static void test_missing_lr_is_reported(void) {
    tr_resolve_opts o = {.recipe = "llama_tiny_pretrain", .world = {1, 1}};
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_resolve(&o, &c, &d), TR_OK);
    c.optimizer.lr = tr_null_float();
    tr_lr_schedule s;
    CHECK(tr_lr_schedule_from_config(&c, &s, &d) != TR_OK);
    CHECK(tr_diags_find(&d, "runtime.no_lr") != NULL);
    tr_config_free(&c);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_warmup_is_linear_from_init), TR_TEST(test_linear_and_cosine_decay),
             TR_TEST(test_constant_and_inverse_sqrt), TR_TEST(test_wsd_decay_styles),
             TR_TEST(test_weight_decay_schedule), TR_TEST(test_from_config),
             TR_TEST(test_missing_lr_is_reported))
