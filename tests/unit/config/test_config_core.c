/* The field table and typed access: defaults, every type parser, errors, copy, dump. */
#include <math.h>
#include <stdlib.h>

#include "core/config.h"
#include "core/field_parse.h"
#include "tests/unit/harness.h"

static tr_origin cli(int i) {
    tr_origin o = tr_origin_make(TR_ORIGIN_CLI, NULL);
    o.argi = i;
    return o;
}

static void test_table_is_consistent(void) {
    CHECK(tr_field_count > 200);
    for (int i = 0; i < tr_field_count; i++) {
        const tr_field *f = &tr_fields[i];
        CHECK_INT_EQ(f->id, i);
        CHECK(tr_field_by_path(f->path) == f);
        CHECK(f->doc && f->doc[0]);
        if (f->type == TR_T_ENUM || f->type == TR_T_OENUM) CHECK(f->enm && f->enm->n > 0);
        for (int j = 0; j < i; j++) CHECK(strcmp(tr_fields[j].path, f->path) != 0);
    }
}

static void test_sections_tile_the_table(void) {
    int next = 0;
    for (int s = 0; s < tr_section_count; s++) {
        CHECK_INT_EQ(tr_sections[s].first, next);
        CHECK(tr_sections[s].count > 0);
        for (int i = tr_sections[s].first; i < tr_sections[s].first + tr_sections[s].count; i++)
            CHECK_INT_EQ(tr_fields[i].section, s);
        next += tr_sections[s].count;
    }
    CHECK_INT_EQ(next, tr_field_count);
    CHECK(tr_field_by_path("model") == NULL);
    CHECK(tr_field_by_path("mode.num_layers") == NULL);
    CHECK(tr_field_by_path("model.") == NULL);
    CHECK(tr_field_by_path("derived.world_size") == &tr_fields[TR_FID_derived_world_size]);
}

static void test_defaults_parse(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    CHECK_INT_EQ(tr_config_init(&c, &d), TR_OK);
    CHECK_INT_EQ(d.n, 0);
    CHECK_INT_EQ(c.model.tensor_model_parallel_size, 1);
    CHECK_INT_EQ(c.model.num_query_groups, TR_NULL_INT);
    CHECK_INT_EQ(c.model.normalization, TR_NORM_LAYERNORM);
    CHECK(tr_is_null_float(c.optimizer.lr));
    CHECK(c.model.hierarchical_context_parallel_sizes.null);
    CHECK_INT_EQ(c.origin[TR_FID_model_tensor_model_parallel_size].kind, TR_ORIGIN_DEFAULT);
    tr_config_free(&c);
    tr_diags_free(&d);
}

static void test_scalar_parsers(void) {
    bool b;
    CHECK(tr_parse_bool("True", &b) && b);
    CHECK(tr_parse_bool("off", &b) && !b);
    CHECK(!tr_parse_bool("maybe", &b));
    int64_t i;
    CHECK(tr_parse_int("-12", &i) && i == -12);
    CHECK(!tr_parse_int("12abc", &i));
    CHECK(!tr_parse_int("99999999999999999999", &i));
    CHECK(!tr_parse_int("", &i));
    double x;
    CHECK(tr_parse_float("3e-4", &x) && x == 3e-4);
    CHECK(tr_parse_float(".inf", &x) && isinf(x) && x > 0);
    CHECK(tr_parse_float("-inf", &x) && isinf(x) && x < 0);
    CHECK(!tr_parse_float("1e999", &x));
    CHECK(!tr_parse_float("abc", &x));
    CHECK(tr_text_is_null("null") && tr_text_is_null("~") && tr_text_is_null("None"));
    CHECK(!tr_text_is_null("nil"));
    char why[64];
    CHECK(tr_range_check("1..", 1, why, sizeof why));
    CHECK(!tr_range_check("1..", 0, why, sizeof why));
    CHECK_STR_EQ(why, ">= 1");
    CHECK(!tr_range_check("0..1", 1.5, why, sizeof why));
    CHECK_STR_EQ(why, "between 0 and 1");
}

static void test_float_format_round_trips(void) {
    const double xs[] = {3e-4, 0.1, 1.0, 1e-8, 123456789.0, 2.5e10, -0.033, 4294967296.0};
    for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
        char buf[64];
        tr_format_float(xs[k], buf, sizeof buf);
        double back;
        CHECK(tr_parse_float(buf, &back) && back == xs[k]);
    }
    char buf[64];
    tr_format_float(1.0, buf, sizeof buf);
    CHECK_STR_EQ(buf, "1.0");
    tr_format_float(3e-4, buf, sizeof buf);
    CHECK_STR_EQ(buf, "0.0003");
}

static void test_string_quoting(void) {
    char buf[128];
    tr_format_string("plain/path", buf, sizeof buf);
    CHECK_STR_EQ(buf, "plain/path");
    tr_format_string("null", buf, sizeof buf);
    CHECK_STR_EQ(buf, "\"null\"");
    tr_format_string("1.5", buf, sizeof buf);
    CHECK_STR_EQ(buf, "\"1.5\"");
    tr_format_string("a: b", buf, sizeof buf);
    CHECK_STR_EQ(buf, "\"a: b\"");
    tr_format_string("say \"hi\"", buf, sizeof buf);
    CHECK_STR_EQ(buf, "\"say \\\"hi\\\"\"");
    tr_format_string("", buf, sizeof buf);
    CHECK_STR_EQ(buf, "\"\"");
}

static void test_set_each_type(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    tr_config_init(&c, &d);
    tr_origin o = cli(3);
    CHECK_INT_EQ(tr_config_set_text(&c, "model.tensor_model_parallel_size", "4", &o, &d), TR_OK);
    CHECK_INT_EQ(c.model.tensor_model_parallel_size, 4);
    CHECK_INT_EQ(c.origin[TR_FID_model_tensor_model_parallel_size].argi, 3);
    CHECK_INT_EQ(tr_config_set_text(&c, "model.sequence_parallel", "true", &o, &d), TR_OK);
    CHECK(c.model.sequence_parallel);
    CHECK_INT_EQ(tr_config_set_text(&c, "optimizer.lr", "3e-4", &o, &d), TR_OK);
    CHECK(c.optimizer.lr == 3e-4);
    CHECK_INT_EQ(tr_config_set_text(&c, "optimizer.lr", "null", &o, &d), TR_OK);
    CHECK(tr_is_null_float(c.optimizer.lr));
    CHECK_INT_EQ(tr_config_set_text(&c, "model.normalization", "rmsnorm", &o, &d), TR_OK);
    CHECK_INT_EQ(c.model.normalization, TR_NORM_RMSNORM);
    CHECK_INT_EQ(tr_config_set_text(&c, "model.params_dtype", "bfloat16", &o, &d), TR_OK);
    CHECK_INT_EQ(c.model.params_dtype, TR_DTYPE_BF16);
    CHECK_INT_EQ(tr_config_set_text(&c, "model.num_query_groups", "8", &o, &d), TR_OK);
    CHECK_INT_EQ(c.model.num_query_groups, 8);
    CHECK_INT_EQ(tr_config_set_text(&c, "model.num_query_groups", "~", &o, &d), TR_OK);
    CHECK_INT_EQ(c.model.num_query_groups, TR_NULL_INT);
    CHECK_INT_EQ(tr_config_set_text(&c, "train.train_iters", "1e6", &o, &d), TR_OK);
    CHECK_INT_EQ(c.train.train_iters, 1000000);

    tr_value list = {.kind = TR_VALUE_LIST};
    tr_value item;
    tr_value_scalar(&item, "2", false, o);
    tr_value_push(&list, NULL, &item);
    tr_value_scalar(&item, "4", false, o);
    tr_value_push(&list, NULL, &item);
    const tr_field *hcp = tr_field_by_path("model.hierarchical_context_parallel_sizes");
    CHECK_INT_EQ(tr_config_set(&c, hcp, &list, &o, &d), TR_OK);
    CHECK_INT_EQ(c.model.hierarchical_context_parallel_sizes.n, 2);
    CHECK_INT_EQ(c.model.hierarchical_context_parallel_sizes.v[1], 4);
    tr_value_free(&list);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_config_free(&c);
    tr_diags_free(&d);
}

static void test_type_errors_name_key_value_type_origin(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    tr_config_init(&c, &d);
    tr_origin o = cli(5);
    CHECK_INT_EQ(tr_config_set_text(&c, "model.tensor_model_parallel_size", "two", &o, &d),
                 TR_ERR_INVALID);
    CHECK_INT_EQ(d.n_errors, 1);
    CHECK_STR_EQ(d.items[0].id, "override.type");
    CHECK_CONTAINS(d.items[0].message, "model.tensor_model_parallel_size");
    CHECK_CONTAINS(d.items[0].message, "two");
    CHECK_CONTAINS(d.items[0].message, "integer");
    CHECK_CONTAINS(d.items[0].origin_text, "argv[5]");
    CHECK_INT_EQ(c.model.tensor_model_parallel_size, 1); /* unchanged */

    tr_diags_clear(&d);
    CHECK_INT_EQ(tr_config_set_text(&c, "model.tensor_model_parallel_size", "0", &o, &d),
                 TR_ERR_INVALID);
    CHECK_STR_EQ(d.items[0].id, "override.range");
    CHECK_CONTAINS(d.items[0].message, ">= 1");

    tr_diags_clear(&d);
    CHECK_INT_EQ(tr_config_set_text(&c, "model.tensor_model_parallel_size", "null", &o, &d),
                 TR_ERR_INVALID);
    CHECK_CONTAINS(d.items[0].message, "non-null");

    tr_diags_clear(&d);
    CHECK_INT_EQ(tr_config_set_text(&c, "model.normalization", "BatchNorm", &o, &d),
                 TR_ERR_INVALID);
    CHECK_CONTAINS(d.items[0].message, "LayerNorm|RMSNorm");

    tr_diags_clear(&d);
    CHECK_INT_EQ(tr_config_set_text(&c, "model.sequence_parallel", "sometimes", &o, &d),
                 TR_ERR_INVALID);
    CHECK_CONTAINS(d.items[0].message, "bool");

    tr_diags_clear(&d);
    CHECK_INT_EQ(tr_config_set_text(&c, "derived.data_parallel_size", "4", &o, &d), TR_ERR_INVALID);
    CHECK_STR_EQ(d.items[0].id, "override.derived");
    tr_config_free(&c);
    tr_diags_free(&d);
}

static void test_suggestions(void) {
    const tr_field *out[4];
    int n = tr_field_suggest("model.tensor_model_paralel_size", out, 4);
    CHECK(n >= 1);
    if (n) CHECK_STR_EQ(out[0]->path, "model.tensor_model_parallel_size");
    n = tr_field_suggest("train.lr", out, 4);
    CHECK(n >= 1);
    if (n) CHECK_STR_EQ(out[0]->path, "optimizer.lr");
    n = tr_field_suggest("zzzz.qqqqqqqqqqqq", out, 4);
    CHECK_INT_EQ(n, 0);
}

static void test_copy_equal_and_history(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config a, b;
    tr_config_init(&a, &d);
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, tr_config_intern(&a, "x.yaml"));
    o.line = 3, o.col = 7;
    tr_config_set_text(&a, "model.hidden_size", "256", &o, &d);
    tr_config_set_text(&a, "model.hidden_size", "512", &o, &d);
    CHECK_INT_EQ(tr_config_copy(&b, &a), TR_OK);
    for (int i = 0; i < tr_field_count; i++) CHECK(tr_config_field_equal(&a, &b, &tr_fields[i]));
    CHECK_INT_EQ(b.n_history, 2);
    CHECK_STR_EQ(b.history[1].value_text, "512");
    CHECK(b.origin[TR_FID_model_hidden_size].name != a.origin[TR_FID_model_hidden_size].name);
    CHECK_STR_EQ(b.origin[TR_FID_model_hidden_size].name, "x.yaml");
    tr_config_free(&a); /* b must stand alone */
    char buf[64];
    tr_origin_format(&b.origin[TR_FID_model_hidden_size], buf, sizeof buf);
    CHECK_STR_EQ(buf, "x.yaml:3:7");
    tr_config_free(&b);
    tr_diags_free(&d);
}

static void test_dump_and_fingerprint(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config a, b;
    tr_config_init(&a, &d);
    tr_config_init(&b, &d);
    CHECK(tr_config_fingerprint(&a) == tr_config_fingerprint(&b));
    char *text = tr_config_dump_yaml_string(&a);
    CHECK(text != NULL);
    CHECK_CONTAINS(text, "model:\n  ");
    CHECK_CONTAINS(text, "  tensor_model_parallel_size: 1\n");
    free(text);
    tr_origin o = cli(1);
    tr_config_set_text(&b, "optimizer.lr", "0.0003", &o, &d);
    CHECK(tr_config_fingerprint(&a) != tr_config_fingerprint(&b));
    tr_config_free(&a);
    tr_config_free(&b);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_table_is_consistent), TR_TEST(test_sections_tile_the_table),
             TR_TEST(test_defaults_parse), TR_TEST(test_scalar_parsers),
             TR_TEST(test_float_format_round_trips), TR_TEST(test_string_quoting),
             TR_TEST(test_set_each_type), TR_TEST(test_type_errors_name_key_value_type_origin),
             TR_TEST(test_suggestions), TR_TEST(test_copy_equal_and_history),
             TR_TEST(test_dump_and_fingerprint))
