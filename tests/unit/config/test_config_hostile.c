/* Numbers a config must not take: NaN and infinity where a field must be finite, integers in
 * anything but decimal, and YAML tags that say the value is not of the field's type. Each error
 * is a full sentence (no uninitialised text); each refusal has an accepted twin. */
#include <stdlib.h>

#include "overrides/overrides.h"
#include "tests/unit/harness.h"

typedef struct fixture {
    tr_config c;
    tr_diags d;
} fixture;

static void setup(fixture *f) {
    tr_diags_init(&f->d);
    if (tr_config_init(&f->c, &f->d) != TR_OK) abort();
}

static void teardown(fixture *f) {
    tr_config_free(&f->c);
    tr_diags_free(&f->d);
}

static tr_status cli(fixture *f, const char *token) {
    const char *toks[] = {token};
    int argi[] = {1};
    return tr_overrides_apply_argv(&f->c, toks, argi, 1, &f->d);
}

static tr_status yaml(fixture *f, const char *text) {
    tr_value root;
    tr_status s = tr_yaml_parse_text(&f->c, text, strlen(text), "t.yaml", &root, &f->d);
    if (s == TR_OK) s = tr_yaml_apply(&f->c, &root, NULL, &f->d);
    tr_value_free(&root);
    return s;
}

/* The token is refused with one error whose message contains every fragment. */
static void refused(bool is_yaml, const char *input, const char *frag1, const char *frag2) {
    fixture f;
    setup(&f);
    tr_status s = is_yaml ? yaml(&f, input) : cli(&f, input);
    CHECK(s != TR_OK);
    CHECK_INT_EQ(f.d.n_errors, 1);
    if (f.d.n_errors) {
        const char *m = f.d.items[0].message;
        CHECK_CONTAINS(m, frag1);
        if (frag2) CHECK_CONTAINS(m, frag2);
        for (const char *p = m; *p; p++)
            CHECK((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f);
        if (tr_test_failures) fprintf(stderr, "  input '%s': %s\n", input, m);
    }
    teardown(&f);
}

static void accepted(bool is_yaml, const char *input) {
    fixture f;
    setup(&f);
    tr_status s = is_yaml ? yaml(&f, input) : cli(&f, input);
    CHECK_INT_EQ(s, TR_OK);
    if (s != TR_OK) tr_diags_print_text(&f.d, stderr, false);
    teardown(&f);
}

static void test_nan_is_refused_with_a_reason(void) {
    refused(false, "optimizer.lr=nan", "must be a finite number", "got nan");
    refused(false, "optimizer.weight_decay=NaN", "finite", NULL);
    refused(true, "optimizer:\n  lr: .nan\n", "must be a finite number", NULL);
    refused(false, "optimizer.clip_grad=nan", "finite", NULL);
    accepted(false, "optimizer.lr=3e-4");
}

static void test_infinity_only_where_the_range_names_it(void) {
    refused(false, "optimizer.lr=inf", "finite", NULL);
    refused(true, "optimizer:\n  lr: .inf\n", "finite", NULL);
    refused(false, "optimizer.adam_beta1=-inf", "finite", NULL);
    accepted(false, "optimizer.grad_norm_skip_threshold=inf");
    accepted(true, "optimizer:\n  clip_grad: .inf\n");
}

static void test_integers_are_decimal(void) {
    refused(false, "model.num_layers=0x10", "model.num_layers", "0x10");
    refused(true, "model:\n  num_layers: 0x10\n", "model.num_layers", NULL);
    refused(false, "optimizer.lr=0x1p-4", "optimizer.lr", NULL);
    accepted(false, "model.num_layers=16");
    accepted(false, "train.train_iters=1e6"); /* an exact integer written as a float */
}

static void test_yaml_tags_are_honoured(void) {
    refused(true, "model:\n  num_layers: !!str 4\n", "!!str", "model.num_layers");
    refused(true, "model:\n  num_layers: !!float 4\n", "!!float", NULL);
    refused(true, "optimizer:\n  lr: !!str 1e-3\n", "!!str", NULL);
    refused(true, "model:\n  add_bias_linear: !!str true\n", "!!str", NULL);
    accepted(true, "model:\n  num_layers: !!int 4\n");
    accepted(true, "optimizer:\n  lr: !!float 1e-3\n");
    accepted(true, "optimizer:\n  lr: !!int 1\n");
}

TR_TEST_MAIN(TR_TEST(test_nan_is_refused_with_a_reason),
             TR_TEST(test_infinity_only_where_the_range_names_it),
             TR_TEST(test_integers_are_decimal), TR_TEST(test_yaml_tags_are_honoured))
