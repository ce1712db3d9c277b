/* Two single-rank training runs that must be bitwise equal, for features whose only effect is
 * where values live (the weight copy, half-precision saved activations): tiny recipes through
 * tr_train_run, 4 iterations of 2 sequences of 32 tokens. The runs differ in their
 * tr_train_opts; a probe of the model after training tells that the feature was on in the first
 * run and off in the second, so two runs of the same thing cannot pass. */
#ifndef TR_TESTS_TRAIN_COMPARE_H
#define TR_TESTS_TRAIN_COMPARE_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "recipes/resolve.h"
#include "runtime/model/model.h"
#include "runtime/train/train.h"
#include "tests/unit/harness.h"

enum { TR_TEST_TRAIN_ITERS = 4 };

typedef struct tr_test_final {
    bool (*probe)(const tr_model *m);
    float *params;
    int64_t n;
    bool probed; /* probe's answer on the model after the last iteration */
} tr_test_final;

static inline tr_status tr_test_capture_final(void *ctx, const tr_model *m) {
    tr_test_final *c = ctx;
    c->n = m->n_params;
    c->probed = c->probe(m);
    c->params = malloc((size_t)c->n * sizeof(float));
    if (!c->params) return TR_ERR_NOMEM;
    memcpy(c->params, m->params, (size_t)c->n * sizeof(float));
    return TR_OK;
}

/* One run with opts o (losses and on_finish are set here); precision and extra are overrides. */
static inline tr_status tr_test_train_tiny(const char *recipe, const char *precision,
                                           const char *extra, tr_train_opts o, float *losses,
                                           tr_test_final *cap) {
    const char *ov[] = {"train.train_iters=4",
                        "train.global_batch_size=2",
                        "validation.eval_iters=0",
                        "logger.log_interval=100",
                        "model.seq_length=32",
                        "dataset.seq_length=32",
                        "optimizer.lr=3e-3",
                        precision,
                        extra};
    tr_resolve_opts ro = {.recipe = recipe, .overrides = ov, .n_overrides = 9, .world = {1, 1}};
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    tr_status s = tr_resolve(&ro, &c, &d);
    o.losses = losses;
    o.losses_cap = TR_TEST_TRAIN_ITERS;
    o.on_finish = tr_test_capture_final;
    o.on_finish_ctx = cap;
    tr_train_result r;
    if (s == TR_OK) s = tr_train_run(&c, &o, &r, &d);
    if (s != TR_OK) tr_diags_print_text(&d, stderr, false);
    tr_config_free(&c);
    tr_diags_free(&d);
    return s;
}

/* Runs with on and off: probe true after on, false after off; losses and final parameters
 * bitwise equal; the loss moved (it trained). what names the pair in the printed line. */
static inline void tr_test_train_bitwise(const char *recipe, const char *precision,
                                         const char *extra, tr_train_opts on, tr_train_opts off,
                                         bool (*probe)(const tr_model *m), const char *what) {
    float lon[TR_TEST_TRAIN_ITERS], loff[TR_TEST_TRAIN_ITERS];
    tr_test_final a = {.probe = probe}, b = {.probe = probe};
    CHECK_INT_EQ(tr_test_train_tiny(recipe, precision, extra, on, lon, &a), TR_OK);
    CHECK_INT_EQ(tr_test_train_tiny(recipe, precision, extra, off, loff, &b), TR_OK);
    CHECK(a.probed && !b.probed);
    CHECK(memcmp(lon, loff, sizeof lon) == 0);
    CHECK(a.n == b.n && a.params && b.params &&
          memcmp(a.params, b.params, (size_t)a.n * sizeof(float)) == 0);
    CHECK(lon[TR_TEST_TRAIN_ITERS - 1] != lon[0]);
    printf("  %s %s: losses %.6f -> %.6f, bitwise equal %s\n", recipe, precision, (double)lon[0],
           (double)lon[TR_TEST_TRAIN_ITERS - 1], what);
    free(a.params);
    free(b.params);
}

#endif
