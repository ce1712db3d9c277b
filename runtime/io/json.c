#include "runtime/io/json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/input/file.h"
#include "core/input/key_index.h"

enum { MAX_DEPTH = 256 };

typedef struct parser {
    const char *s, *end, *name;
    const char *line_start;
    int line;
    char err[200];
} parser;

static bool fail(parser *p, const char *what) {
    if (!p->err[0]) snprintf(p->err, sizeof p->err, "%s", what);
    return false;
}

static void skip_ws(parser *p) {
    while (p->s < p->end) {
        char c = *p->s;
        if (c == '\n') {
            p->line++;
            p->line_start = p->s + 1;
        } else if (c != ' ' && c != '\t' && c != '\r') {
            return;
        }
        p->s++;
    }
}

static bool literal(parser *p, const char *word, tr_json *v, tr_json_type t) {
    size_t n = strlen(word);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n) != 0)
        return fail(p, "unexpected character");
    p->s += n;
    v->type = t;
    return true;
}

static bool number(parser *p, tr_json *v) {
    const char *start = p->s, *q = p->s;
    if (q < p->end && *q == '-') q++;
    if (q >= p->end || *q < '0' || *q > '9') return fail(p, "invalid number");
    if (*q == '0')
        q++;
    else
        while (q < p->end && *q >= '0' && *q <= '9') q++;
    if (q < p->end && *q == '.') {
        q++;
        if (q >= p->end || *q < '0' || *q > '9') return fail(p, "invalid number");
        while (q < p->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < p->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < p->end && (*q == '+' || *q == '-')) q++;
        if (q >= p->end || *q < '0' || *q > '9') return fail(p, "invalid number");
        while (q < p->end && *q >= '0' && *q <= '9') q++;
    }
    char buf[64];
    size_t n = (size_t)(q - start);
    if (n >= sizeof buf) {
        char *tmp = strndup(start, n);
        if (!tmp) return fail(p, "out of memory");
        v->number = strtod(tmp, NULL);
        free(tmp);
    } else {
        memcpy(buf, start, n);
        buf[n] = '\0';
        v->number = strtod(buf, NULL);
    }
    v->type = TR_JSON_NUMBER;
    p->s = q;
    return true;
}

static int hex4(const char *s) {
    int x = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        x = x * 16 + d;
    }
    return x;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if it is not one. */
static size_t utf8_len(const unsigned char *s, const unsigned char *end) {
    unsigned c = s[0];
    size_t n;
    uint32_t min;
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0)
        n = 2, min = 0x80;
    else if ((c & 0xf0) == 0xe0)
        n = 3, min = 0x800;
    else if ((c & 0xf8) == 0xf0)
        n = 4, min = 0x10000;
    else
        return 0;
    if ((size_t)(end - s) < n) return 0;
    uint32_t cp = c & (0x7f >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

static bool string(parser *p, char **out, size_t *out_len) {
    p->s++; /* opening quote */
    const char *q = p->s;
    size_t cap = 16;
    while (q < p->end && *q != '"') q += (*q == '\\' && q + 1 < p->end) ? 2 : 1;
    cap += (size_t)(q - p->s); /* escapes never grow: \uXXXX (6) -> at most 4 bytes */
    char *buf = malloc(cap);
    if (!buf) return fail(p, "out of memory");
    size_t n = 0;
    for (;;) {
        if (p->s >= p->end) {
            free(buf);
            return fail(p, "unterminated string");
        }
        unsigned char c = (unsigned char)*p->s;
        if (c == '"') break;
        if (c < 0x20) {
            free(buf);
            return fail(p, "control character in string (escape it)");
        }
        if (c != '\\') {
            size_t k = utf8_len((const unsigned char *)p->s, (const unsigned char *)p->end);
            if (k == 0) {
                free(buf);
                return fail(p, "invalid UTF-8 in string");
            }
            memcpy(buf + n, p->s, k);
            n += k, p->s += k;
            continue;
        }
        if (p->end - p->s < 2) {
            free(buf);
            return fail(p, "unterminated string");
        }
        char e = p->s[1];
        p->s += 2;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            buf[n++] = map[simple - "\"\\/bfnrt"];
            continue;
        }
        if (e != 'u' || p->end - p->s < 4 || hex4(p->s) < 0) {
            free(buf);
            return fail(p, "invalid escape in string");
        }
        uint32_t cp = (uint32_t)hex4(p->s);
        p->s += 4;
        if (cp >= 0xd800 && cp <= 0xdbff) {
            int lo = p->end - p->s >= 6 && p->s[0] == '\\' && p->s[1] == 'u' ? hex4(p->s + 2) : -1;
            if (lo < 0xdc00 || lo > 0xdfff) {
                free(buf);
                return fail(p, "unpaired surrogate escape in string");
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
            p->s += 6;
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            free(buf);
            return fail(p, "unpaired surrogate escape in string");
        }
        n += put_utf8(buf + n, cp);
    }
    p->s++; /* closing quote */
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return true;
}

static bool value(parser *p, tr_json *v, int depth);

static bool push(parser *p, tr_json *v, size_t *cap) {
    if (v->n < *cap) return true;
    size_t nc = *cap ? *cap * 2 : 4;
    tr_json *items = realloc(v->items, nc * sizeof *items);
    if (!items) return fail(p, "out of memory");
    v->items = items;
    if (v->type == TR_JSON_OBJECT) {
        char **keys = realloc(v->keys, nc * sizeof *keys);
        if (keys) v->keys = keys;
        size_t *kl = realloc(v->key_lens, nc * sizeof *kl);
        if (kl) v->key_lens = kl;
        if (!keys || !kl) return fail(p, "out of memory");
    }
    *cap = nc;
    return true;
}

static bool container_indexed(parser *p, tr_json *v, int depth, tr_key_index *ix);

/* Objects keep a hash of their keys: a repeated key is an error (the strict readers would
 * otherwise see only the first), and finding it stays linear in the object's size. */
static bool container(parser *p, tr_json *v, int depth) {
    tr_key_index ix = {NULL, 0};
    bool ok = container_indexed(p, v, depth, &ix);
    tr_key_index_free(&ix);
    return ok;
}

static bool container_indexed(parser *p, tr_json *v, int depth, tr_key_index *ix) {
    bool object = *p->s == '{';
    char close = object ? '}' : ']';
    v->type = object ? TR_JSON_OBJECT : TR_JSON_ARRAY;
    if (depth >= MAX_DEPTH) return fail(p, "nesting deeper than 256 levels");
    p->s++;
    size_t cap = 0;
    skip_ws(p);
    if (p->s < p->end && *p->s == close) {
        p->s++;
        return true;
    }
    for (;;) {
        if (!push(p, v, &cap)) return false;
        tr_json *item = &v->items[v->n];
        memset(item, 0, sizeof *item);
        skip_ws(p);
        if (object) {
            if (p->s >= p->end || *p->s != '"') return fail(p, "expected a string key");
            if (!string(p, &v->keys[v->n], &v->key_lens[v->n])) return false;
            skip_ws(p);
            if (p->s >= p->end || *p->s != ':') {
                free(v->keys[v->n]);
                return fail(p, "expected ':' after key");
            }
            p->s++;
            skip_ws(p);
        }
        bool ok = value(p, item, depth + 1);
        v->n++; /* counted even on failure so that free releases what was built */
        if (!ok) return false;
        if (object) {
            int i = (int)v->n - 1;
            if (tr_key_index_find(ix, v->keys, v->key_lens, v->keys[i], v->key_lens[i]) >= 0) {
                char what[160];
                snprintf(what, sizeof what, "key '%.100s' appears twice", v->keys[i]);
                return fail(p, what);
            }
            if (tr_key_index_add(ix, v->keys, v->key_lens, (int)v->n) != TR_OK)
                return fail(p, "out of memory");
        }
        skip_ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        if (p->s < p->end && *p->s == close) {
            p->s++;
            return true;
        }
        return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static bool value(parser *p, tr_json *v, int depth) {
    skip_ws(p);
    v->line = p->line;
    if (p->s >= p->end) return fail(p, "unexpected end of input");
    switch (*p->s) {
    case '{':
    case '[':
        return container(p, v, depth);
    case '"':
        v->type = TR_JSON_STRING;
        return string(p, &v->str, &v->len);
    case 't':
        return literal(p, "true", v, TR_JSON_TRUE);
    case 'f':
        return literal(p, "false", v, TR_JSON_FALSE);
    case 'n':
        return literal(p, "null", v, TR_JSON_NULL);
    default:
        return number(p, v);
    }
}

tr_status tr_json_parse(const char *text, size_t len, const char *name, tr_json *out,
                        tr_diags *diags) {
    parser p = {text, text + len, name, text, 1, {0}};
    memset(out, 0, sizeof *out);
    bool ok = value(&p, out, 0);
    if (ok) {
        skip_ws(&p);
        if (p.s != p.end) ok = fail(&p, "unexpected text after the JSON value");
    }
    if (ok) return TR_OK;
    tr_json_free(out);
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, name);
    o.line = p.line;
    o.col = (int)(p.s - p.line_start) + 1;
    return tr_diag_add(diags, TR_SEV_ERROR, "data.json_syntax", &o, NULL,
                       "fix the JSON at that position (it must be strict JSON: double quotes, no "
                       "comments or trailing commas)",
                       "%s:%d:%d: invalid JSON: %s", name, o.line, o.col, p.err);
}

void tr_json_free(tr_json *v) {
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        tr_json_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->key_lens);
    free(v->str);
    memset(v, 0, sizeof *v);
}

const tr_json *tr_json_get(const tr_json *obj, const char *key) {
    if (!obj || obj->type != TR_JSON_OBJECT) return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < obj->n; i++)
        if (obj->key_lens[i] == kl && memcmp(obj->keys[i], key, kl) == 0) return &obj->items[i];
    return NULL;
}

bool tr_json_int(const tr_json *v, int64_t lo, int64_t hi, int64_t *out) {
    if (!v || v->type != TR_JSON_NUMBER || v->number != floor(v->number)) return false;
    if (!(v->number >= (double)lo && v->number <= (double)hi)) return false;
    *out = (int64_t)v->number;
    return true;
}

tr_status tr_read_file(const char *path, const char *key, char **out, size_t *len,
                       tr_diags *diags) {
    *out = NULL;
    *len = 0;
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
    int err;
    FILE *f = tr_file_fopen(path, 0, &err);
    if (!f) {
        bool notreg = err == EISDIR || err == TR_FILE_ENOTREG;
        tr_diag_add(diags, TR_SEV_ERROR, "data.file_open", &o, key,
                    notreg ? "name a regular file" : "check the path", "cannot open %s: %s", path,
                    tr_file_strerror(err));
        return err == ENOENT ? TR_ERR_NOTFOUND : notreg ? TR_ERR_INVALID : TR_ERR_IO;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *grown = realloc(buf, cap * 2);
        if (!grown) free(buf);
        buf = grown;
        cap *= 2;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf) return TR_ERR_NOMEM;
    if (bad) {
        free(buf);
        tr_diag_add(diags, TR_SEV_ERROR, "data.file_read", &o, key, NULL, "cannot read %s", path);
        return TR_ERR_IO;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return TR_OK;
}
