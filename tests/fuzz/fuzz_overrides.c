/* Fuzz target: NUL-separated command-line tokens applied to a default config. */
#include <stddef.h>
#include <stdint.h>

#include "tests/fuzz/fuzz_check.h"

/* Each unknown key costs a did-you-mean search over the whole field table; more tokens than this
 * add run time, not coverage. */
#define MAX_TOKENS 6

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    const char *tokens[MAX_TOKENS];
    int n = 0;
    for (size_t i = 0; i <= size && n < MAX_TOKENS;) {
        tokens[n++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    if (tr_config_init(&c, &d) != TR_OK) tr_fuzz_fail("config init", &d);
    /* A recipe snapshot makes ~key exercise the restore path, not only the defaults path. */
    if (tr_config_snapshot_recipe(&c) != TR_OK) tr_fuzz_fail("snapshot", NULL);
    tr_status s = tr_overrides_apply_argv(&c, tokens, NULL, n, &d);
    tr_fuzz_check_status(s, &d);
    if (s == TR_OK && size <= TR_FUZZ_ROUND_TRIP_MAX) tr_fuzz_check_round_trip(&c);
    /* --explain must cope with any key, known or not: try the first token's key. */
    char *key = buf + strspn(buf, "+~");
    key[strcspn(key, "=")] = '\0';
    FILE *null = fopen("/dev/null", "w");
    if (null) {
        tr_diags e;
        tr_diags_init(&e);
        tr_status es = tr_config_explain(&c, key, null, &e);
        if (es != TR_OK && e.n_errors == 0) tr_fuzz_fail("explain error without diagnostic", &e);
        tr_diags_free(&e);
        fclose(null);
    }
    tr_config_free(&c);
    tr_diags_free(&d);
    free(buf);
    return 0;
}
