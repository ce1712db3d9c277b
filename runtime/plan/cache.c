/* The planner's memo (runtime/plan/plan.h): the results of the runtime's sizing calls, keyed by
 * everything each call reads, so a search that plans thousands of layouts calls each one once
 * per distinct input. An entry is a key (the bytes of the inputs) and a value of up to
 * TR_PLAN_CACHE_VAL bytes, both in one allocation; the table is open addressing over a power of
 * two, grown at half full. The table holds only the small slot headers: a fresh search creates
 * one and fills two thousand entries, so slots that held the values inline made most of its
 * bytes zeroed and copied on growth for nothing. */
#include <stdlib.h>
#include <string.h>

#include "runtime/plan/plan_internal.h"

typedef struct entry {
    uint64_t hash;
    int kind;
    uint32_t key_len, val_len;
    unsigned char *key; /* key_len bytes of key, then val_len bytes of value */
} entry;

struct tr_plan_cache {
    entry *e;
    size_t cap, n;
    int64_t hits, misses;
    void *aux;
    void (*aux_free)(void *);
};

void *tr_plan_cache_aux(tr_plan_cache *c) {
    return c ? c->aux : NULL;
}

void tr_plan_cache_set_aux(tr_plan_cache *c, void *aux, void (*aux_free)(void *)) {
    if (c->aux && c->aux_free) c->aux_free(c->aux);
    c->aux = aux;
    c->aux_free = aux_free;
}

tr_status tr_plan_cache_create(tr_plan_cache **out) {
    tr_plan_cache *c = calloc(1, sizeof *c);
    if (!c) return TR_ERR_NOMEM;
    c->cap = 8192; /* a search of a few thousand layouts (two thousand entries) without growing */
    c->e = calloc(c->cap, sizeof *c->e);
    if (!c->e) {
        free(c);
        return TR_ERR_NOMEM;
    }
    *out = c;
    return TR_OK;
}

void tr_plan_cache_free(tr_plan_cache *c) {
    if (!c) return;
    if (c->aux && c->aux_free) c->aux_free(c->aux);
    for (size_t i = 0; i < c->cap; i++) free(c->e[i].key);
    free(c->e);
    free(c);
}

void tr_plan_cache_stats(const tr_plan_cache *c, int64_t *hits, int64_t *misses) {
    *hits = c ? c->hits : 0;
    *misses = c ? c->misses : 0;
}

/* A multiply-xorshift hash over the key's 8-byte words (the tail zero-padded) and its kind. */
static uint64_t hash_of(int kind, const void *key, size_t n) {
    const unsigned char *p = key;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)kind << 32) ^ n;
    size_t i = 0;
    /* whole words with a fixed-size copy (one load), two lanes so the multiplies overlap */
    uint64_t h2 = h ^ 0xC2B2AE3D27D4EB4Full;
    for (; i + 16 <= n; i += 16) {
        uint64_t w, w2;
        memcpy(&w, p + i, 8);
        memcpy(&w2, p + i + 8, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h2 = (h2 ^ w2) * 0xC4CEB9FE1A85EC53ull;
        h ^= h >> 32;
        h2 ^= h2 >> 29;
    }
    for (; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i < 8 ? n - i : 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    h = (h ^ h2 * 0x9E3779B97F4A7C15ull) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    return h ? h : 1;
}

static entry *slot(tr_plan_cache *c, uint64_t h, int kind, const void *key, size_t n) {
    for (size_t i = h & (c->cap - 1);; i = (i + 1) & (c->cap - 1)) {
        entry *e = &c->e[i];
        if (!e->hash) return e;
        if (e->hash == h && e->kind == kind && e->key_len == n && !memcmp(e->key, key, n)) return e;
    }
}

bool tr_plan_cache_get(tr_plan_cache *c, int kind, const void *key, size_t n, void *val,
                       size_t val_len) {
    if (!c || val_len > TR_PLAN_CACHE_VAL) return false;
    entry *e = slot(c, hash_of(kind, key, n), kind, key, n);
    if (!e->hash) {
        c->misses++;
        return false;
    }
    if (e->val_len != val_len) { /* a caller's kind always stores one size */
        c->misses++;
        return false;
    }
    c->hits++;
    memcpy(val, e->key + e->key_len, val_len);
    return true;
}

static tr_status grow(tr_plan_cache *c) {
    entry *old = c->e;
    size_t cap = c->cap;
    c->e = calloc(2 * cap, sizeof *c->e);
    if (!c->e) {
        c->e = old;
        return TR_ERR_NOMEM;
    }
    c->cap = 2 * cap;
    for (size_t i = 0; i < cap; i++)
        if (old[i].hash) *slot(c, old[i].hash, old[i].kind, old[i].key, old[i].key_len) = old[i];
    free(old);
    return TR_OK;
}

void tr_plan_cache_put(tr_plan_cache *c, int kind, const void *key, size_t n, const void *val,
                       size_t val_len) {
    if (!c || val_len > TR_PLAN_CACHE_VAL || n > UINT32_MAX / 2) return;
    if (2 * (c->n + 1) > c->cap && grow(c) != TR_OK) return;
    uint64_t h = hash_of(kind, key, n);
    entry *e = slot(c, h, kind, key, n);
    if (e->hash) return;
    e->key = malloc(n + val_len ? n + val_len : 1);
    if (!e->key) return; /* a memo that cannot grow only loses speed */
    memcpy(e->key, key, n);
    memcpy(e->key + n, val, val_len);
    e->hash = h;
    e->kind = kind;
    e->key_len = (uint32_t)n;
    e->val_len = (uint32_t)val_len;
    c->n++;
}
