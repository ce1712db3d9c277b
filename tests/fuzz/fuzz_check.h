/* Invariants every fuzz input must keep, shared by the harnesses. A violation aborts, which both
 * libFuzzer and the replay runner report as a crash with the offending input. */
#ifndef TR_FUZZ_CHECK_H
#define TR_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "overrides/overrides.h"

/* Only inputs this small get the dump round trip: longer strings would hit the fixed-size
 * formatting buffers of the dump, which truncate by design. */
#define TR_FUZZ_ROUND_TRIP_MAX 2048

static inline void tr_fuzz_fail(const char *what, const tr_diags *d) {
    fprintf(stderr, "fuzz invariant violated: %s\n", what);
    if (d) tr_diags_print_text(d, stderr, false);
    abort();
}

/* An error status comes with at least one error diagnostic, and success with none. */
static inline void tr_fuzz_check_status(tr_status s, const tr_diags *d) {
    if (s == TR_ERR_NOMEM) return;
    if (s != TR_OK && d->n_errors == 0) tr_fuzz_fail("error status without an error diagnostic", d);
    if (s == TR_OK && d->n_errors != 0) tr_fuzz_fail("success with error diagnostics", d);
}

/* Whatever was accepted must dump to YAML that loads back to the same config. */
static inline void tr_fuzz_check_round_trip(const tr_config *c) {
    char *dump = tr_config_dump_yaml_string(c);
    if (!dump) return;
    tr_diags d;
    tr_diags_init(&d);
    tr_config back;
    if (tr_config_init(&back, &d) != TR_OK) tr_fuzz_fail("config init", &d);
    tr_value root;
    tr_status s = tr_yaml_parse_text(&back, dump, strlen(dump), "dump.yaml", &root, &d);
    if (s == TR_OK) s = tr_yaml_apply(&back, &root, NULL, &d);
    tr_value_free(&root);
    if (s != TR_OK) {
        fprintf(stderr, "%s", dump);
        tr_fuzz_fail("the dump of an accepted config does not load", &d);
    }
    for (int i = 0; i < tr_field_count; i++) {
        if (!tr_config_field_equal(c, &back, &tr_fields[i])) {
            fprintf(stderr, "field %s changed\n", tr_fields[i].path);
            tr_fuzz_fail("the dump does not reproduce the config", NULL);
        }
    }
    tr_config_free(&back);
    tr_diags_free(&d);
    free(dump);
}

#endif
