/* Questions about a config that finalize() and the validation rules both ask: whether an
 * optional value is set, its value or a fallback, sizes derived from several fields, and names
 * of enum values for messages. Inline and free of side effects. */
#ifndef TR_CONFIG_QUERY_H
#define TR_CONFIG_QUERY_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/config.h"

/* Format into a local char array and yield it: TR_FMT(buf, "set %s", x). */
#define TR_FMT(buf, ...) (snprintf(buf, sizeof buf, __VA_ARGS__), (const char *)buf)

static inline long long tr_ll(int64_t v) {
    return (long long)v;
}
static inline bool tr_is_set(int64_t v) {
    return v != TR_NULL_INT;
}
static inline int64_t tr_or(int64_t v, int64_t fallback) {
    return v == TR_NULL_INT ? fallback : v;
}
/* VPP as a number of model chunks: 1 when interleaving is off. */
static inline int64_t tr_vpp_chunks(const tr_config *c) {
    return tr_or(c->model.virtual_pipeline_model_parallel_size, 1);
}
static inline bool tr_is_moe(const tr_config *c) {
    return tr_is_set(c->model.num_moe_experts);
}
static inline bool tr_strlist_has(const tr_str_list *l, const char *s) {
    if (l->null) return false;
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->v[i], s) == 0) return true;
    return false;
}
static inline bool tr_strlist_set(const tr_str_list *l) {
    return !l->null && l->n > 0;
}
static inline int64_t tr_gcd(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}
static inline int64_t tr_lcm(int64_t a, int64_t b) {
    return a / tr_gcd(a, b) * b;
}
/* Canonical name of an enum value for messages ("null" for an unset OENUM). */
static inline const char *tr_enum_str(const tr_enum_def *e, int32_t v) {
    return v >= 0 && v < e->n ? e->values[v].name : "null";
}

#endif
