/* Fuzz target: YAML override text applied to a default config. */
#include <stddef.h>
#include <stdint.h>

#include "tests/fuzz/fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    if (tr_config_init(&c, &d) != TR_OK) tr_fuzz_fail("config init", &d);
    tr_value root;
    tr_status s = tr_yaml_parse_text(&c, (const char *)data, size, "fuzz.yaml", &root, &d);
    /* As tr_config_apply_yaml_file does: a partial tree still gets applied. */
    if (s == TR_OK || (s == TR_ERR_INVALID && root.kind == TR_VALUE_MAP)) {
        const char *const skip[] = {"base_recipe", NULL};
        tr_status a = tr_yaml_apply(&c, &root, skip, &d);
        if (s == TR_OK) s = a;
    }
    tr_value_free(&root);
    tr_fuzz_check_status(s, &d);
    if (s == TR_OK && size <= TR_FUZZ_ROUND_TRIP_MAX) tr_fuzz_check_round_trip(&c);
    tr_config_free(&c);
    tr_diags_free(&d);
    return 0;
}
