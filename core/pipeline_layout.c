#include "core/pipeline_layout.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum { LAYOUT_MAX = 65536 };

typedef struct layout_buf {
    char *s;
    size_t n;
    const char *err;
} layout_buf;

static void put(layout_buf *b, const char *s, size_t n) {
    if (b->err) return;
    if (b->n + n >= LAYOUT_MAX) {
        b->err = "expands to more than 65536 symbols";
        return;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
}

static const char *expand_seq(const char *p, layout_buf *b, int depth) {
    while (*p && *p != ')' && !b->err) {
        size_t start = b->n;
        if (*p == '(') {
            if (depth > 8) {
                b->err = "nests parentheses too deeply";
                return p;
            }
            p = expand_seq(p + 1, b, depth + 1);
            if (*p != ')') {
                if (!b->err) b->err = "has an unclosed '('";
                return p;
            }
            p++;
        } else if (strchr("EtmL|", *p)) {
            put(b, p++, 1);
        } else if (*p == ',' || isspace((unsigned char)*p)) {
            p++;
            continue;
        } else {
            b->err = "contains a character other than E, t, m, L, |, (, ), * and digits";
            return p;
        }
        if (*p == '*') {
            char *end;
            long k = strtol(p + 1, &end, 10);
            if (end == p + 1 || k < 0 || k > LAYOUT_MAX) {
                b->err = "has '*' without a repeat count";
                return end;
            }
            p = end;
            size_t len = b->n - start;
            if (k == 0) b->n = start;
            for (long r = 1; r < k && !b->err; r++) put(b, b->s + start, len);
        }
    }
    return p;
}

tr_status tr_pipeline_layout_expand(const char *layout, char **out, size_t *n, const char **err) {
    *out = NULL;
    *n = 0;
    *err = NULL;
    layout_buf b = {malloc(LAYOUT_MAX), 0, NULL};
    if (!b.s) return TR_ERR_NOMEM;
    const char *end = expand_seq(layout, &b, 0);
    if (!b.err && *end == ')') b.err = "has an unmatched ')'";
    if (b.err) {
        free(b.s);
        *err = b.err;
        return TR_ERR_INVALID;
    }
    b.s[b.n] = '\0';
    *out = b.s;
    *n = b.n;
    return TR_OK;
}
