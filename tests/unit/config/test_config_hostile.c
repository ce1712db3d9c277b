/* Numbers a config must not take: NaN and infinity where a field must be finite, integers in
 * anything but decimal, and YAML tags that say the value is not of the field's type. Each error
 * is a full sentence (no uninitialised text); each refusal has an accepted twin. */
#include <stdlib.h>
#include <unistd.h>

#include "overrides/overrides.h"
#include "tests/unit/harness.h"

/* Applies one CLI token or one YAML text to a default config; the diagnostics stay in d. */
static tr_status apply_input(bool is_yaml, const char *input, tr_diags *d) {
    tr_config c;
    if (tr_config_init(&c, d) != TR_OK) abort();
    tr_status s;
    if (is_yaml) {
        tr_value root;
        s = tr_yaml_parse_text(&c, input, strlen(input), "t.yaml", &root, d);
        if (s == TR_OK) s = tr_yaml_apply(&c, &root, NULL, d);
        tr_value_free(&root);
    } else {
        const char *toks[] = {input};
        int argi[] = {1};
        s = tr_overrides_apply_argv(&c, toks, argi, 1, d);
    }
    tr_config_free(&c);
    return s;
}

/* The input is refused with one error whose message, printable throughout, holds the
 * fragments; with want_ok it must be accepted instead. */
static void expect(bool want_ok, bool is_yaml, const char *input, const char *frag1,
                   const char *frag2) {
    tr_diags d;
    tr_diags_init(&d);
    tr_status s = apply_input(is_yaml, input, &d);
    int before = tr_test_failures;
    if (want_ok) {
        CHECK_INT_EQ(s, TR_OK);
    } else {
        CHECK(s != TR_OK);
        CHECK_INT_EQ(d.n_errors, 1);
    }
    if (!want_ok && d.n_errors) {
        const char *m = d.items[0].message;
        CHECK_CONTAINS(m, frag1);
        if (frag2) CHECK_CONTAINS(m, frag2);
        for (const char *p = m; *p; p++)
            CHECK((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f);
    }
    if (tr_test_failures != before) {
        fprintf(stderr, "  input '%s':\n", input);
        tr_diags_print_text(&d, stderr, false);
    }
    tr_diags_free(&d);
}

static void refused(bool is_yaml, const char *input, const char *frag1, const char *frag2) {
    expect(false, is_yaml, input, frag1, frag2);
}

static void accepted(bool is_yaml, const char *input) {
    expect(true, is_yaml, input, NULL, NULL);
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

/* 010 is octal 8 in YAML 1.1 and 10 in YAML 1.2: refused, naming the key, not guessed. */
static void test_leading_zero_is_refused(void) {
    refused(false, "model.num_layers=010", "model.num_layers", "leading zero");
    refused(true, "model:\n  num_layers: 010\n", "model.num_layers", "leading zero");
    refused(false, "train.train_iters=-01", "leading zero", NULL);
    refused(false, "model.window_size=[4,08]", "leading zero", NULL);
    accepted(false, "model.num_layers=10");
    accepted(false, "train.train_iters=100");
    accepted(false, "model.window_size=[0,-1]");
    accepted(false, "optimizer.lr=0.001"); /* floats: a zero before the point is decimal */
}

/* A quoted scalar is a string: "4" for an integer, "1e-3" for a float or "true" for a bool is
 * refused in YAML and in an override unless a tag says the type. */
static void test_quoted_numbers_are_strings(void) {
    refused(true, "model:\n  num_layers: \"4\"\n", "model.num_layers", "the string \"4\"");
    refused(true, "model:\n  num_layers: '4'\n", "model.num_layers", NULL);
    refused(false, "model.num_layers=\"4\"", "model.num_layers", "the string \"4\"");
    refused(true, "optimizer:\n  lr: \"1e-3\"\n", "optimizer.lr", "string");
    refused(true, "model:\n  add_bias_linear: \"true\"\n", "model.add_bias_linear", "string");
    accepted(true, "model:\n  num_layers: !!int \"4\"\n");
    accepted(true, "model:\n  num_layers: 4\n");
    accepted(false, "model.num_layers=4");
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

/* 200k keys in one mapping: a quadratic reader took minutes, a linear one well under a second
 * (the alarm leaves room for sanitizers and a loaded machine). The duplicate at the end must
 * still be found, and reported once. */
static void test_yaml_with_many_keys_is_linear(void) {
    enum { KEYS = 200000 };
    size_t cap = (size_t)KEYS * 24 + 64, n = 0;
    char *text = malloc(cap);
    n += (size_t)snprintf(text + n, cap - n, "many:\n");
    for (int i = 0; i < KEYS; i++) n += (size_t)snprintf(text + n, cap - n, "  k%d: %d\n", i, i);
    n += (size_t)snprintf(text + n, cap - n, "  k17: again\n");
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    CHECK(tr_config_init(&c, &d) == TR_OK);
    tr_value root;
    tr_test_deadline(30, "the YAML reader is not linear in the number of keys");
    tr_status s = tr_yaml_parse_text(&c, text, n, "many.yaml", &root, &d);
    tr_test_deadline(0, NULL);
    CHECK(s != TR_OK);
    CHECK_INT_EQ(d.n_errors, 1);
    const tr_diag *g = tr_diags_find(&d, "override.yaml_duplicate");
    CHECK(g != NULL);
    if (g) CHECK_CONTAINS(g->message, "'k17' (first at line 19");
    tr_value_free(&root);
    tr_config_free(&c);
    tr_diags_free(&d);
    free(text);
}

TR_TEST_MAIN(TR_TEST(test_yaml_with_many_keys_is_linear),
             TR_TEST(test_nan_is_refused_with_a_reason),
             TR_TEST(test_infinity_only_where_the_range_names_it),
             TR_TEST(test_leading_zero_is_refused), TR_TEST(test_quoted_numbers_are_strings),
             TR_TEST(test_integers_are_decimal), TR_TEST(test_yaml_tags_are_honoured))
