/* A hash index over the keys of one mapping (a YAML mapping, a JSON object), so that finding a
 * duplicate stays linear in the number of keys. The keys live in the caller's array; the index
 * holds positions into it. lens may be NULL when the keys are NUL-terminated. */
#ifndef TR_KEY_INDEX_H
#define TR_KEY_INDEX_H

#include <stddef.h>

#include "core/status.h"

typedef struct tr_key_index {
    int *slot; /* position + 1; 0 = free */
    size_t cap;
} tr_key_index;

/* Position of key among keys[0..n), or -1. */
int tr_key_index_find(const tr_key_index *ix, char *const *keys, const size_t *lens,
                      const char *key, size_t len);
/* Adds keys[n - 1], the one just appended (kept at most half full: rehashes as it grows). */
tr_status tr_key_index_add(tr_key_index *ix, char *const *keys, const size_t *lens, int n);
void tr_key_index_free(tr_key_index *ix);

#endif
