/* files.launch_inputs_exist on dataset blends: Megatron's one-string blend ("0.7 a 0.3 b") and
 * the list form name the same .bin/.idx pairs; weights are not paths. */
#include <stdio.h>

#include "tests/unit/harness.h"
#include "tests/unit/config/rules_fixture.h"

/* Validates the dense fixture with dataset.data_path = data_path, checking files; the
 * diagnostics land in d. */
static const tr_diag *launch_error(const char *data_path, tr_diags *d) {
    tr_config c;
    CHECK_INT_EQ(fixture_dense(&c, d), TR_OK);
    tr_origin o = tr_origin_make(TR_ORIGIN_API, NULL);
    CHECK_INT_EQ(tr_config_set_text(&c, "dataset.data_path", data_path, &o, d), TR_OK);
    tr_validate_opts opts = {.catalog_mode = false, .check_files = true};
    fixture_resolve(&c, 1, 1, &opts, d);
    tr_config_free(&c);
    return tr_diags_find(d, "files.launch_inputs_exist");
}

static void test_blend_string_names_existing_pairs(void) {
    char blend[1024];
    snprintf(blend, sizeof blend, "0.7 %s/tests/data/gpt/ds_a 0.3 %s/tests/data/gpt/ds_b",
             TRESTLE_SOURCE_DIR, TRESTLE_SOURCE_DIR);
    tr_diags d;
    tr_diags_init(&d);
    CHECK(launch_error(blend, &d) == NULL);
    tr_diags_free(&d);
}

static void test_missing_prefix_in_blend_string_is_named(void) {
    char blend[1024];
    snprintf(blend, sizeof blend, "0.7 %s/tests/data/gpt/ds_a 0.3 /nonexistent/ds_z",
             TRESTLE_SOURCE_DIR);
    tr_diags d;
    tr_diags_init(&d);
    const tr_diag *e = launch_error(blend, &d);
    CHECK(e != NULL);
    if (e) {
        CHECK_CONTAINS(e->message, "/nonexistent/ds_z.bin");
        CHECK(!strstr(e->message, "0.3"));
        CHECK_CONTAINS(e->keys, "dataset.data_path");
    }
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_blend_string_names_existing_pairs),
             TR_TEST(test_missing_prefix_in_blend_string_is_named))
