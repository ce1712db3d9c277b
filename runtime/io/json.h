/* A small strict JSON reader (RFC 8259) for tokenizer files and JSONL records: parses into a tree,
 * reports the first error with line and column, and bounds nesting so hostile input cannot
 * exhaust the stack. Strings are decoded to UTF-8 (surrogate pairs joined; lone surrogates and
 * invalid UTF-8 rejected). */
#ifndef TR_DATA_JSON_H
#define TR_DATA_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"
#include "core/status.h"

typedef enum tr_json_type {
    TR_JSON_NULL,
    TR_JSON_FALSE,
    TR_JSON_TRUE,
    TR_JSON_NUMBER,
    TR_JSON_STRING,
    TR_JSON_ARRAY,
    TR_JSON_OBJECT
} tr_json_type;

typedef struct tr_json tr_json;
struct tr_json {
    tr_json_type type;
    double number;
    char *str; /* STRING: decoded UTF-8, NUL-terminated (may also contain NULs: use len) */
    size_t len;
    tr_json *items; /* ARRAY/OBJECT: n children; for OBJECT keys[i] names items[i] */
    char **keys;
    size_t *key_lens;
    size_t n;
    int line; /* where the value starts, for messages */
};

/* Parses text (not NUL-terminated; len bytes). name is the file name in messages. On error *out
 * is left empty (type NULL, nothing to free) and one diagnostic "data.json_syntax" is added. */
tr_status tr_json_parse(const char *text, size_t len, const char *name, tr_json *out,
                        tr_diags *diags);
void tr_json_free(tr_json *v);

/* The member named key of an object (first match), or NULL. */
const tr_json *tr_json_get(const tr_json *obj, const char *key);
/* Integer value of a NUMBER that is a whole number in [lo, hi]. */
bool tr_json_int(const tr_json *v, int64_t lo, int64_t hi, int64_t *out);

/* Reads a whole file into a NUL-terminated buffer; diagnostic "data.file_open" on failure. */
tr_status tr_read_file(const char *path, const char *key, char **out, size_t *len, tr_diags *diags);

#endif
