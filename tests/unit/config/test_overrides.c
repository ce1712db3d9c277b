/* Command-line overrides: the Hydra value grammar, +/++/~ rules, shorthands, unknown keys and
 * precedence. Expected values are written from the grammar, never taken from the code. */
#include <stdlib.h>

#include "core/field_parse.h"
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

static tr_status apply1(fixture *f, const char *token) {
    const char *toks[] = {token};
    int argi[] = {7};
    return tr_overrides_apply_argv(&f->c, toks, argi, 1, &f->d);
}

static tr_status parse1(const char *token, tr_override *o, tr_diags *d) {
    tr_origin origin = tr_origin_make(TR_ORIGIN_CLI, NULL);
    origin.argi = 3;
    return tr_override_parse(token, &origin, o, d);
}

/* The one error of a failed token: its id, argv position and message fragments. */
static void check_error(const char *token, const char *id, const char *fragment) {
    fixture f;
    setup(&f);
    tr_status s = apply1(&f, token);
    CHECK(s != TR_OK);
    CHECK(f.d.n_errors >= 1);
    const tr_diag *dg = tr_diags_find(&f.d, id);
    if (!dg) {
        fprintf(stderr, "  token '%s': no diagnostic %s\n", token, id);
        tr_diags_print_text(&f.d, stderr, false);
        tr_test_failures++;
    } else {
        CHECK_INT_EQ(dg->origin.kind, TR_ORIGIN_CLI);
        CHECK_INT_EQ(dg->origin.argi, 7);
        CHECK_CONTAINS(dg->origin_text, "argv[7]");
        if (fragment) {
            char all[2048];
            snprintf(all, sizeof all, "%s | %s", dg->message, dg->hint ? dg->hint : "");
            CHECK_CONTAINS(all, fragment);
        }
    }
    teardown(&f);
}

static void test_scalars_of_every_type(void) {
    fixture f;
    setup(&f);
    const char *toks[] = {"model.tensor_model_parallel_size=4",
                          "optimizer.lr=3e-4",
                          "checkpoint.save=/ckpt/run-1",
                          "model.gated_linear_unit=true",
                          "model.normalization=RMSNorm",
                          "comm_overlap.tp_comm_overlap=false",
                          "train.train_iters=1000",
                          "optimizer.weight_decay=0.1"};
    CHECK_INT_EQ(tr_overrides_apply_argv(&f.c, toks, NULL, 8, &f.d), TR_OK);
    CHECK_INT_EQ(f.d.n_errors, 0);
    CHECK_INT_EQ(f.c.model.tensor_model_parallel_size, 4);
    CHECK(f.c.optimizer.lr == 3e-4);
    CHECK_STR_EQ(f.c.checkpoint.save, "/ckpt/run-1");
    CHECK(f.c.model.gated_linear_unit);
    CHECK_INT_EQ(f.c.model.normalization, TR_NORM_RMSNORM);
    CHECK_INT_EQ(f.c.comm_overlap.tp_comm_overlap, 0);
    CHECK_INT_EQ(f.c.train.train_iters, 1000);
    CHECK(f.c.optimizer.weight_decay == 0.1);
    /* Without argi the token index is the argv position. */
    CHECK_INT_EQ(f.c.origin[TR_FID_optimizer_lr].kind, TR_ORIGIN_CLI);
    CHECK_INT_EQ(f.c.origin[TR_FID_optimizer_lr].argi, 1);
    teardown(&f);
}

static void test_null_and_quoted_strings(void) {
    fixture f;
    setup(&f);
    CHECK_INT_EQ(apply1(&f, "checkpoint.save=/x"), TR_OK);
    CHECK_INT_EQ(apply1(&f, "checkpoint.save=null"), TR_OK);
    CHECK(f.c.checkpoint.save == NULL);
    /* Quoted, "null" is a string. */
    CHECK_INT_EQ(apply1(&f, "checkpoint.save='null'"), TR_OK);
    CHECK_STR_EQ(f.c.checkpoint.save, "null");
    CHECK_INT_EQ(apply1(&f, "checkpoint.save=\"a,b c\""), TR_OK);
    CHECK_STR_EQ(f.c.checkpoint.save, "a,b c");
    CHECK_INT_EQ(apply1(&f, "checkpoint.save='it\\'s'"), TR_OK);
    CHECK_STR_EQ(f.c.checkpoint.save, "it's");
    /* Escapes make special characters literal without quotes; blanks around a value go. */
    CHECK_INT_EQ(apply1(&f, "checkpoint.save=a\\,b\\=c"), TR_OK);
    CHECK_STR_EQ(f.c.checkpoint.save, "a,b=c");
    CHECK_INT_EQ(apply1(&f, "checkpoint.save=  /p q  "), TR_OK);
    CHECK_STR_EQ(f.c.checkpoint.save, "/p q");
    CHECK_INT_EQ(apply1(&f, "checkpoint.save=http://host:80/x"), TR_OK);
    CHECK_STR_EQ(f.c.checkpoint.save, "http://host:80/x");
    /* `key=` is the empty string, as in Hydra. */
    CHECK_INT_EQ(apply1(&f, "checkpoint.save="), TR_OK);
    CHECK_STR_EQ(f.c.checkpoint.save, "");
    CHECK_INT_EQ(apply1(&f, "checkpoint.save='\\${literal}'"), TR_OK);
    CHECK_STR_EQ(f.c.checkpoint.save, "${literal}");
    CHECK_INT_EQ(f.d.n_errors, 0);
    teardown(&f);
}

static void test_lists(void) {
    fixture f;
    setup(&f);
    CHECK_INT_EQ(apply1(&f, "dataset.data_path=[/d/part_1, /d/part_2,'a,b']"), TR_OK);
    CHECK_INT_EQ(f.c.dataset.data_path.n, 3);
    CHECK(!f.c.dataset.data_path.null);
    CHECK_STR_EQ(f.c.dataset.data_path.v[0], "/d/part_1");
    CHECK_STR_EQ(f.c.dataset.data_path.v[1], "/d/part_2");
    CHECK_STR_EQ(f.c.dataset.data_path.v[2], "a,b");
    CHECK_INT_EQ(apply1(&f, "dataset.data_path=[]"), TR_OK);
    CHECK_INT_EQ(f.c.dataset.data_path.n, 0);
    CHECK(!f.c.dataset.data_path.null);
    CHECK_INT_EQ(apply1(&f, "dataset.data_path=null"), TR_OK);
    CHECK(f.c.dataset.data_path.null);
    CHECK_INT_EQ(apply1(&f, "model.window_size=[ -1 , 128 ]"), TR_OK);
    CHECK_INT_EQ(f.c.model.window_size.n, 2);
    CHECK_INT_EQ(f.c.model.window_size.v[0], -1);
    CHECK_INT_EQ(f.c.model.window_size.v[1], 128);
    CHECK_INT_EQ(f.d.n_errors, 0);
    teardown(&f);
    /* 10k elements go through without trouble. */
    setup(&f);
    size_t cap = 10000 * 8 + 64;
    char *tok = malloc(cap);
    size_t n = (size_t)snprintf(tok, cap, "model.window_size=[");
    for (int i = 0; i < 10000; i++)
        n += (size_t)snprintf(tok + n, cap - n, "%s%d", i ? "," : "", i);
    snprintf(tok + n, cap - n, "]");
    CHECK_INT_EQ(apply1(&f, tok), TR_OK);
    CHECK_INT_EQ(f.c.model.window_size.n, 10000);
    CHECK_INT_EQ(f.c.model.window_size.v[9999], 9999);
    free(tok);
    teardown(&f);
}

static void test_syntax_errors_name_token_and_column(void) {
    check_error("model.window_size=[[1,2],[3]]", "override.nested_list", "nested lists");
    check_error("model.window_size=[1,2", "override.syntax", "unterminated list");
    check_error("model.window_size=[1,,2]", "override.syntax", "empty list element");
    check_error("model.window_size=[1,2,]", "override.syntax", "trailing comma");
    check_error("model.window_size=[1,2]x", "override.syntax", "after the value");
    check_error("checkpoint.save='abc", "override.syntax", "unterminated single-quoted");
    check_error("dataset.data_path=a,b", "override.sweep", "[a,b]");
    check_error("train.train_iters=choice(1,2)", "override.sweep", "choice");
    check_error("train.train_iters=${train.eval_iters}", "override.interpolation", "not supported");
    check_error("checkpoint.save=\"${oc.env:HOME}\"", "override.interpolation", "not supported");
    check_error("model={num_layers:2}", "override.dict", "one by one");
    check_error("train.train_iters", "override.no_value", "KEY=VALUE");
    check_error("--lr=3", "override.option", "option");
    check_error("-x", "override.option", "option");
    check_error("=3", "override.syntax", "missing key");
    check_error("model..num_layers=2", "override.syntax", "empty key segment");
    check_error("model.num layers=2", "override.syntax", "unexpected ' ' in the key");
    check_error("model@pkg=2", "override.package", "package");
    check_error("optimizer/adam=2", "override.package", "config groups");
    check_error("checkpoint.save=a=b", "override.syntax", "unexpected '='");
    check_error("checkpoint.save=a\nb", "override.encoding", "control character");
    check_error("checkpoint.save=\xff\xfe", "override.encoding", "UTF-8");
    check_error("", "override.syntax", "empty override");

    /* The column points at the offending character (1-based, within the token). */
    tr_diags d;
    tr_diags_init(&d);
    tr_override o;
    CHECK(parse1("model.window_size=[1,2", &o, &d) != TR_OK);
    CHECK_INT_EQ(d.n_errors, 1);
    CHECK_INT_EQ(d.items[0].origin.col, 19); /* the '[' */
    CHECK_CONTAINS(d.items[0].message, "column 19");
    CHECK_CONTAINS(d.items[0].message, "model.window_size=[1,2");
    tr_diags_clear(&d);
    CHECK(parse1("a.b=x,y", &o, &d) != TR_OK);
    CHECK_INT_EQ(d.items[0].origin.col, 6);
    tr_diags_free(&d);
}

static void test_parse_marks_ops_and_quotes(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_override o;
    CHECK_INT_EQ(parse1("++a.b='true'", &o, &d), TR_OK);
    CHECK_INT_EQ(o.op, TR_OVR_FORCE);
    CHECK_STR_EQ(o.key, "a.b");
    CHECK(o.has_value && o.value.kind == TR_VALUE_SCALAR && o.value.quoted);
    CHECK_STR_EQ(o.value.text, "true");
    CHECK_INT_EQ(o.origin.argi, 3);
    tr_override_free(&o);
    CHECK_INT_EQ(parse1("+a.b=true", &o, &d), TR_OK);
    CHECK_INT_EQ(o.op, TR_OVR_ADD);
    CHECK(!o.value.quoted);
    tr_override_free(&o);
    CHECK_INT_EQ(parse1("~a.b", &o, &d), TR_OK);
    CHECK_INT_EQ(o.op, TR_OVR_RESET);
    CHECK(!o.has_value);
    tr_override_free(&o);
    CHECK_INT_EQ(parse1("~a.b=[1]", &o, &d), TR_OK);
    CHECK(o.has_value && o.value.kind == TR_VALUE_LIST && o.value.n == 1);
    tr_override_free(&o);
    CHECK_INT_EQ(d.n, 0);
    tr_diags_free(&d);
}

static void test_add_force_and_reset(void) {
    fixture f;
    setup(&f);
    /* + only where null. */
    CHECK_INT_EQ(apply1(&f, "+optimizer.lr=1e-3"), TR_OK);
    CHECK(f.c.optimizer.lr == 1e-3);
    teardown(&f);
    check_error("+optimizer.weight_decay=0.2", "override.add_not_null", "++optimizer.weight_decay");
    setup(&f);
    CHECK_INT_EQ(apply1(&f, "optimizer.lr=1e-3"), TR_OK);
    CHECK(apply1(&f, "+optimizer.lr=2e-3") != TR_OK);
    CHECK_CONTAINS(tr_diags_find(&f.d, "override.add_not_null")->hint, "drop the '+'");
    CHECK(f.c.optimizer.lr == 1e-3);
    tr_diags_clear(&f.d);
    CHECK_INT_EQ(apply1(&f, "++optimizer.lr=2e-3"), TR_OK);
    CHECK(f.c.optimizer.lr == 2e-3);
    /* Unknown keys stay errors with + and ++ (no free-form additions). */
    CHECK(apply1(&f, "++optimizer.new_knob=1") != TR_OK);
    CHECK(tr_diags_find(&f.d, "override.unknown_key") != NULL);
    teardown(&f);

    /* ~key goes back to the recipe's value; without a recipe that is the table default. */
    setup(&f);
    tr_config before;
    CHECK_INT_EQ(tr_config_copy(&before, &f.c), TR_OK);
    f.c.model.num_layers = 16;
    f.c.optimizer.lr = 3e-4;
    tr_origin recipe = tr_origin_make(TR_ORIGIN_RECIPE, "test_recipe");
    CHECK_INT_EQ(tr_config_mark_changes(&f.c, &before, &recipe), TR_OK);
    CHECK_INT_EQ(tr_config_snapshot_recipe(&f.c), TR_OK);
    tr_config_free(&before);
    CHECK_INT_EQ(apply1(&f, "model.num_layers=4"), TR_OK);
    CHECK_INT_EQ(apply1(&f, "~model.num_layers"), TR_OK);
    CHECK_INT_EQ(f.c.model.num_layers, 16);
    /* ~key=v only when the value is v, compared as the field's type (0.0003 == 3e-4). */
    CHECK_INT_EQ(apply1(&f, "optimizer.lr=1e-3"), TR_OK);
    CHECK(apply1(&f, "~optimizer.lr=2e-3") != TR_OK);
    const tr_diag *dg = tr_diags_find(&f.d, "override.reset_mismatch");
    CHECK(dg != NULL);
    if (dg) CHECK_CONTAINS(dg->message, "not 2e-3");
    CHECK(f.c.optimizer.lr == 1e-3);
    tr_diags_clear(&f.d);
    CHECK_INT_EQ(apply1(&f, "~optimizer.lr=0.001"), TR_OK);
    CHECK(f.c.optimizer.lr == 3e-4);
    /* The value is type-checked like a set. */
    CHECK(apply1(&f, "~model.num_layers=abc") != TR_OK);
    CHECK(tr_diags_find(&f.d, "override.type") != NULL);
    teardown(&f);
}

static void test_shorthands_and_sections(void) {
    fixture f;
    setup(&f);
    CHECK_INT_EQ(apply1(&f, "mixed_precision=bf16_mixed"), TR_OK);
    CHECK_INT_EQ(f.c.mixed_precision.preset, TR_MPRESET_BF16_MIXED);
    CHECK_INT_EQ(apply1(&f, "peft=lora"), TR_OK);
    CHECK_INT_EQ(f.c.peft.scheme, TR_PEFT_LORA);
    CHECK_INT_EQ(apply1(&f, "peft=null"), TR_OK);
    CHECK_INT_EQ(f.c.peft.scheme, -1);
    CHECK_INT_EQ(apply1(&f, "mixed_precision=null"), TR_OK);
    CHECK_INT_EQ(f.c.mixed_precision.preset, -1);
    CHECK_INT_EQ(f.d.n_errors, 0);
    CHECK(apply1(&f, "peft=qlora") != TR_OK);
    CHECK(tr_diags_find(&f.d, "override.type") != NULL);
    teardown(&f);
    check_error("model=gpt", "override.section", "--help-config model");
    check_error("optimizer=adam", "override.section", "fields");
}

static void test_unknown_keys_suggest(void) {
    check_error("train.lr=1e-4", "override.unknown_key", "optimizer.lr");
    check_error("model.num_layer=2", "override.unknown_key", "model.num_layers");
    check_error("modle.num_layers=2", "override.unknown_key", "model.num_layers");
    check_error("zzzzzzzzzzzz.qqqqqqqqqqq=1", "override.unknown_key", "--help-config");
    /* At most three suggestions. */
    fixture f;
    setup(&f);
    CHECK(apply1(&f, "model.num_layer=2") != TR_OK);
    const tr_diag *dg = tr_diags_find(&f.d, "override.unknown_key");
    int commas = 0;
    for (const char *p = dg && dg->hint ? dg->hint : ""; *p; p++) commas += *p == ',';
    CHECK(commas <= 1);
    CHECK_CONTAINS(dg ? dg->hint : NULL, "did you mean model.num_layers");
    teardown(&f);
}

static void test_type_errors_name_key_value_and_origin(void) {
    check_error("train.train_iters=abc", "override.type", "train.train_iters");
    check_error("train.train_iters=abc", "override.type", "abc");
    check_error("model.tensor_model_parallel_size=0", "override.range", ">= 1");
    check_error("model.tensor_model_parallel_size=null", "override.type", "non-null");
    check_error("model.num_layers=[1,2]", "override.type", "model.num_layers");
    check_error("derived.world_size=8", "override.derived", "derived.world_size");
}

static void test_all_bad_tokens_reported_last_wins(void) {
    fixture f;
    setup(&f);
    const char *toks[] = {"train.train_iters=5", "bogus.key=1",        "train.train_iters=x",
                          "train.train_iters=7", "model.num_layers=[", "train.train_iters=9"};
    int argi[] = {2, 3, 4, 5, 6, 8};
    CHECK_INT_EQ(tr_overrides_apply_argv(&f.c, toks, argi, 6, &f.d), TR_ERR_INVALID);
    CHECK_INT_EQ(f.d.n_errors, 3);
    CHECK_INT_EQ(f.d.items[0].origin.argi, 3);
    CHECK_INT_EQ(f.d.items[1].origin.argi, 4);
    CHECK_INT_EQ(f.d.items[2].origin.argi, 6);
    /* Later tokens win, and the winner's origin is its argv slot. */
    CHECK_INT_EQ(f.c.train.train_iters, 9);
    CHECK_INT_EQ(f.c.origin[TR_FID_train_train_iters].argi, 8);
    teardown(&f);
}

TR_TEST_MAIN(TR_TEST(test_scalars_of_every_type), TR_TEST(test_null_and_quoted_strings),
             TR_TEST(test_lists), TR_TEST(test_syntax_errors_name_token_and_column),
             TR_TEST(test_parse_marks_ops_and_quotes), TR_TEST(test_add_force_and_reset),
             TR_TEST(test_shorthands_and_sections), TR_TEST(test_unknown_keys_suggest),
             TR_TEST(test_type_errors_name_key_value_and_origin),
             TR_TEST(test_all_bad_tokens_reported_last_wins))
