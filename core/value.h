/* A parsed but untyped value, as YAML and the command line produce it. The field table turns a
 * tr_value into a typed field; keeping the two apart lets both front ends share one type checker.
 */
#ifndef TR_VALUE_H
#define TR_VALUE_H

#include <stdbool.h>

#include "core/origin.h"
#include "core/status.h"

typedef enum tr_value_kind {
    TR_VALUE_NULL = 0,
    TR_VALUE_SCALAR,
    TR_VALUE_LIST,
    TR_VALUE_MAP
} tr_value_kind;

typedef struct tr_value {
    tr_value_kind kind;
    bool quoted;            /* scalar was quoted: "null" and "true" stay strings */
    char tag;               /* YAML core tag: 's' !!str, 'i' !!int, 'f' !!float, 'b' !!bool, 0 */
    char *text;             /* scalar text (owned) */
    struct tr_value *items; /* list elements or map values (owned) */
    char **keys;            /* map keys (owned), parallel to items */
    int n;
    int cap;          /* allocated items (and keys): grown geometrically by tr_value_push */
    tr_origin origin; /* where the value starts */
} tr_value;

void tr_value_free(tr_value *v); /* frees the contents, not v itself */
tr_status tr_value_scalar(tr_value *v, const char *text, bool quoted, tr_origin origin);
/* Append an element (list) or key/value (map). The pushed value is moved into the container. */
tr_status tr_value_push(tr_value *list_or_map, const char *key, tr_value *item);
/* Render compactly ("[1, 2]", "null", "abc") for messages. */
void tr_value_format(const tr_value *v, char *buf, int cap);

#endif
