/* Diagnostics: every problem found in the input, collected rather than thrown, so that one
 * pass reports all of them. Errors and warnings carry a stable rule id, the keys involved,
 * the origin of the offending value and a fix hint. */
#ifndef TR_DIAG_H
#define TR_DIAG_H

#include <stdbool.h>
#include <stdio.h>

#include "core/origin.h"
#include "core/status.h"

typedef enum tr_severity { TR_SEV_NOTE = 0, TR_SEV_WARNING, TR_SEV_ERROR } tr_severity;

typedef struct tr_diag {
    tr_severity severity;
    char *id;      /* stable rule id, e.g. "parallel.heads_divisible_by_tp" */
    char *keys;    /* comma-separated dotted keys the message is about */
    char *message; /* what is wrong, with the values */
    char *hint;    /* how to fix it; may be NULL */
    tr_origin origin;
    char origin_text[160]; /* formatted origin, kept because origin.name may not outlive us */
} tr_diag;

typedef struct tr_diags {
    tr_diag *items;
    int n, cap;
    int n_errors, n_warnings;
} tr_diags;

void tr_diags_init(tr_diags *d);
void tr_diags_free(tr_diags *d);
void tr_diags_clear(tr_diags *d);

/* Append a diagnostic. keys and hint may be NULL; origin may be NULL. Returns TR_ERR_INVALID for
 * errors and TR_OK for warnings/notes so callers can `return tr_diag_add(...)`. */
tr_status tr_diag_add(tr_diags *d, tr_severity sev, const char *id, const tr_origin *origin,
                      const char *keys, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* Does any diagnostic have this id? (tests) */
const tr_diag *tr_diags_find(const tr_diags *d, const char *id);

/* Warnings become errors (run_recipe --strict). */
void tr_diags_promote_warnings(tr_diags *d);

void tr_diags_print_text(const tr_diags *d, FILE *out, bool color);
void tr_diags_print_json(const tr_diags *d, FILE *out);

#endif
