#include "core/value.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tr_value_free(tr_value *v) {
    if (!v) return;
    free(v->text);
    for (int i = 0; i < v->n; i++) {
        tr_value_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    memset(v, 0, sizeof *v);
}

tr_status tr_value_scalar(tr_value *v, const char *text, bool quoted, tr_origin origin) {
    memset(v, 0, sizeof *v);
    v->kind = TR_VALUE_SCALAR;
    v->quoted = quoted;
    v->origin = origin;
    v->text = strdup(text);
    return v->text ? TR_OK : TR_ERR_NOMEM;
}

tr_status tr_value_push(tr_value *c, const char *key, tr_value *item) {
    if (c->n >= c->cap) {
        /* Doubling: a mapping of n keys costs O(n) copies, not O(n^2). */
        int cap = c->cap ? c->cap * 2 : 4;
        tr_value *items = realloc(c->items, (size_t)cap * sizeof *items);
        if (!items) return TR_ERR_NOMEM;
        c->items = items;
        if (c->kind == TR_VALUE_MAP) {
            char **keys = realloc(c->keys, (size_t)cap * sizeof *keys);
            if (!keys) return TR_ERR_NOMEM;
            c->keys = keys;
        }
        c->cap = cap;
    }
    if (c->kind == TR_VALUE_MAP) {
        c->keys[c->n] = strdup(key ? key : "");
        if (!c->keys[c->n]) return TR_ERR_NOMEM;
    }
    c->items[c->n++] = *item;
    memset(item, 0, sizeof *item);
    return TR_OK;
}

static int fmt_into(const tr_value *v, char *buf, int cap) {
    int used = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int k_ = snprintf(buf + used, used < cap ? (size_t)(cap - used) : 0, __VA_ARGS__);         \
        if (k_ > 0) used += k_;                                                                    \
    } while (0)
    switch (v->kind) {
    case TR_VALUE_NULL:
        PUT("null");
        break;
    case TR_VALUE_SCALAR:
        if (v->quoted)
            PUT("\"%s\"", v->text);
        else
            PUT("%s", v->text);
        break;
    case TR_VALUE_LIST:
    case TR_VALUE_MAP:
        PUT(v->kind == TR_VALUE_LIST ? "[" : "{");
        for (int i = 0; i < v->n; i++) {
            if (i) PUT(", ");
            if (v->kind == TR_VALUE_MAP) PUT("%s: ", v->keys[i]);
            used += fmt_into(&v->items[i], buf + (used < cap ? used : cap),
                             used < cap ? cap - used : 0);
        }
        PUT(v->kind == TR_VALUE_LIST ? "]" : "}");
        break;
    }
#undef PUT
    return used;
}

void tr_value_format(const tr_value *v, char *buf, int cap) {
    if (cap <= 0) return;
    buf[0] = '\0';
    int used = fmt_into(v, buf, cap);
    if (used >= cap && cap > 4) strcpy(buf + cap - 4, "...");
}
