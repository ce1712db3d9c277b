#include "core/input/key_index.h"

#include <stdlib.h>
#include <string.h>

static size_t hash_bytes(const char *k, size_t len) {
    size_t h = 14695981039346656037u; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)k[i]) * 1099511628211u;
    return h;
}

static size_t key_len(char *const *keys, const size_t *lens, int i) {
    return lens ? lens[i] : strlen(keys[i]);
}

/* The slot holding key, or the free slot where it would go. */
static size_t probe(const tr_key_index *ix, char *const *keys, const size_t *lens, const char *key,
                    size_t len) {
    size_t mask = ix->cap - 1;
    for (size_t i = hash_bytes(key, len) & mask;; i = (i + 1) & mask) {
        int at = ix->slot[i] - 1;
        if (at < 0) return i;
        if (key_len(keys, lens, at) == len && memcmp(keys[at], key, len) == 0) return i;
    }
}

int tr_key_index_find(const tr_key_index *ix, char *const *keys, const size_t *lens,
                      const char *key, size_t len) {
    if (!ix->cap) return -1;
    return ix->slot[probe(ix, keys, lens, key, len)] - 1;
}

tr_status tr_key_index_add(tr_key_index *ix, char *const *keys, const size_t *lens, int n) {
    if (!ix->cap || (size_t)n > ix->cap / 2) {
        size_t cap = ix->cap ? ix->cap * 2 : 16;
        while ((size_t)n > cap / 2) cap *= 2;
        int *slot = calloc(cap, sizeof *slot);
        if (!slot) return TR_ERR_NOMEM;
        free(ix->slot);
        ix->slot = slot;
        ix->cap = cap;
        for (int k = 0; k < n - 1; k++)
            ix->slot[probe(ix, keys, lens, keys[k], key_len(keys, lens, k))] = k + 1;
    }
    ix->slot[probe(ix, keys, lens, keys[n - 1], key_len(keys, lens, n - 1))] = n;
    return TR_OK;
}

void tr_key_index_free(tr_key_index *ix) {
    free(ix->slot);
    ix->slot = NULL;
    ix->cap = 0;
}
