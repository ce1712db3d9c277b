/* The Hydra override grammar, cut down to what a flat, typed config needs. Values are parsed
 * into untyped tr_values here; the field table decides later whether "2" is an int or a string,
 * which is why quoting only matters for telling the string "null" from null. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "overrides/overrides.h"

/* Messages quote the token; a 10k-element list should not become a 100 kB diagnostic. */
#define TOKEN_QUOTE_MAX 120

typedef struct cursor {
    const char *tok;
    size_t len, pos;
    const tr_origin *origin;
    tr_diags *d;
    int nest_max; /* list depth the key takes: 1, or 3 for Megatron's blend keys */
    int depth;
} cursor;

static tr_status token_error(const cursor *cur, size_t at, const char *id, const char *hint,
                             const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static tr_status token_error(const cursor *cur, size_t at, const char *id, const char *hint,
                             const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    tr_origin o = *cur->origin;
    o.col = (int32_t)at + 1;
    int shown = cur->len > TOKEN_QUOTE_MAX ? TOKEN_QUOTE_MAX : (int)cur->len;
    tr_diag_add(cur->d, TR_SEV_ERROR, id, &o, NULL, hint, "in '%.*s%s', column %zu: %s", shown,
                cur->tok, cur->len > (size_t)shown ? "..." : "", at + 1, what);
    return TR_ERR_INVALID;
}

static bool at_end(const cursor *cur) {
    return cur->pos >= cur->len;
}

static char peek(const cursor *cur) {
    return at_end(cur) ? '\0' : cur->tok[cur->pos];
}

static void skip_blanks(cursor *cur) {
    while (peek(cur) == ' ' || peek(cur) == '\t') cur->pos++;
}

/* A growable string for unescaped text. */
typedef struct strbuf {
    char *s;
    size_t n, cap;
} strbuf;

static tr_status sb_put(strbuf *b, char c) {
    if (b->n + 2 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 32;
        char *s = realloc(b->s, cap);
        if (!s) return TR_ERR_NOMEM;
        b->s = s;
        b->cap = cap;
    }
    b->s[b->n++] = c;
    b->s[b->n] = '\0';
    return TR_OK;
}

static bool is_escapable(char c) {
    return c && strchr("\\()[]{}:=, \t$", c) != NULL;
}

/* Hydra's sweep and cast functions have no meaning for a single run. */
static bool is_grammar_function(const char *name, size_t n) {
    static const char *const fns[] = {"choice", "range",    "interval",   "glob",  "shuffle",
                                      "sort",   "tag",      "int",        "float", "str",
                                      "bool",   "json_str", "extend_list"};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (strlen(fns[i]) == n && !memcmp(fns[i], name, n)) return true;
    return false;
}

static tr_status interpolation_error(const cursor *cur, size_t at) {
    return token_error(cur, at, "override.interpolation",
                       "write the value itself; to mean a literal '${' write '\\${'",
                       "interpolations (${...}) are not supported: every value is resolved "
                       "before the run starts");
}

static tr_status make_scalar(const cursor *cur, strbuf *b, bool quoted, tr_value *out) {
    tr_status s = tr_value_scalar(out, b->s ? b->s : "", quoted, *cur->origin);
    free(b->s);
    memset(b, 0, sizeof *b);
    return s;
}

static tr_status parse_quoted(cursor *cur, tr_value *out) {
    size_t open = cur->pos;
    char q = cur->tok[cur->pos++];
    strbuf b = {0};
    for (;;) {
        if (at_end(cur)) {
            free(b.s);
            return token_error(cur, open, "override.syntax",
                               "close the quote, or quote the whole token for the shell as well: "
                               "'key=\"a b\"'",
                               "unterminated %s-quoted string", q == '\'' ? "single" : "double");
        }
        char c = cur->tok[cur->pos];
        if (c == q) {
            cur->pos++;
            break;
        }
        if (c == '\\' && cur->pos + 1 < cur->len &&
            (cur->tok[cur->pos + 1] == q || cur->tok[cur->pos + 1] == '\\')) {
            c = cur->tok[cur->pos + 1];
            cur->pos += 2;
        } else if (c == '\\' && cur->pos + 2 < cur->len && cur->tok[cur->pos + 1] == '$' &&
                   cur->tok[cur->pos + 2] == '{') {
            cur->pos += 2;
            c = '$';
        } else if (c == '$' && cur->pos + 1 < cur->len && cur->tok[cur->pos + 1] == '{') {
            free(b.s);
            return interpolation_error(cur, cur->pos);
        } else {
            cur->pos++;
        }
        if (sb_put(&b, c) != TR_OK) {
            free(b.s);
            return TR_ERR_NOMEM;
        }
    }
    return make_scalar(cur, &b, true, out);
}

/* An unquoted primitive: runs to ',' or ']' (inside a list) or the end of the token. */
static tr_status parse_unquoted(cursor *cur, bool in_list, tr_value *out) {
    size_t start = cur->pos;
    strbuf b = {0};
    size_t keep = 0; /* length without trailing blanks; escaped blanks count as content */
    tr_status s = TR_OK;
    while (!at_end(cur) && s == TR_OK) {
        char c = cur->tok[cur->pos];
        if (c == ',' || (in_list && c == ']')) break;
        if (c == '\\' && cur->pos + 1 < cur->len && is_escapable(cur->tok[cur->pos + 1])) {
            s = sb_put(&b, cur->tok[cur->pos + 1]);
            cur->pos += 2;
            keep = b.n;
            continue;
        }
        if (c == '$' && cur->pos + 1 < cur->len && cur->tok[cur->pos + 1] == '{') {
            s = interpolation_error(cur, cur->pos);
            break;
        }
        if (c == '(' && is_grammar_function(cur->tok + start, cur->pos - start)) {
            s = token_error(cur, start, "override.sweep",
                            "give one value; run several jobs to try several values",
                            "Hydra sweep and cast functions such as %.*s(...) are not supported",
                            (int)(cur->pos - start), cur->tok + start);
            break;
        }
        if (strchr("[]{}()='\"", c)) {
            s = token_error(cur, cur->pos, "override.syntax",
                            "quote the whole value ('key=\"...\"') or escape the character with a "
                            "backslash",
                            "unexpected '%c' in an unquoted value", c);
            break;
        }
        s = sb_put(&b, c);
        cur->pos++;
        if (c != ' ' && c != '\t') keep = b.n;
    }
    if (s != TR_OK) {
        free(b.s);
        return s;
    }
    if (b.s) b.s[keep] = '\0';
    if (keep == 0 && in_list) {
        free(b.s);
        return token_error(cur, start, "override.syntax", "remove the extra comma",
                           "empty list element");
    }
    return make_scalar(cur, &b, false, out);
}

static tr_status dict_error(const cursor *cur) {
    return token_error(cur, cur->pos, "override.dict", "set the keys one by one: section.key=value",
                       "dictionary values ({k: v}) are not supported");
}

static tr_status parse_list(cursor *cur, tr_value *out);
static tr_status parse_list_items(cursor *cur, size_t open, tr_value *out);

static tr_status parse_element(cursor *cur, bool in_list, tr_value *out) {
    memset(out, 0, sizeof *out);
    skip_blanks(cur);
    char c = peek(cur);
    if (c == '[' && in_list && cur->depth < cur->nest_max) {
        TR_TRY(parse_list(cur, out));
        skip_blanks(cur);
        return TR_OK;
    }
    if (c == '[' && in_list)
        return token_error(cur, cur->pos, "override.nested_list",
                           "give a flat list such as [1,2,3]",
                           "nested lists are not supported: no field holds a list of lists");
    if (c == '{') return dict_error(cur);
    if (c == '\'' || c == '"') {
        TR_TRY(parse_quoted(cur, out));
        skip_blanks(cur);
        return TR_OK;
    }
    return parse_unquoted(cur, in_list, out);
}

static tr_status parse_list(cursor *cur, tr_value *out) {
    size_t open = cur->pos++;
    cur->depth++;
    tr_status r = parse_list_items(cur, open, out);
    cur->depth--;
    return r;
}

static tr_status parse_list_items(cursor *cur, size_t open, tr_value *out) {
    memset(out, 0, sizeof *out);
    out->kind = TR_VALUE_LIST;
    out->origin = *cur->origin;
    skip_blanks(cur);
    if (peek(cur) == ']') {
        cur->pos++;
        return TR_OK;
    }
    for (;;) {
        tr_value item;
        tr_status s = parse_element(cur, true, &item);
        if (s == TR_OK) s = tr_value_push(out, NULL, &item);
        if (s != TR_OK) {
            tr_value_free(&item);
            tr_value_free(out);
            return s;
        }
        skip_blanks(cur);
        char c = peek(cur);
        if (c == ']') {
            cur->pos++;
            return TR_OK;
        }
        if (c == ',') {
            cur->pos++;
            skip_blanks(cur);
            if (peek(cur) == ']') {
                s = token_error(cur, cur->pos, "override.syntax", "remove the trailing comma",
                                "trailing comma in a list");
            } else {
                continue;
            }
        } else if (at_end(cur)) {
            s = token_error(cur, open, "override.syntax", "close the list with ']'",
                            "unterminated list");
        } else {
            s = token_error(cur, cur->pos, "override.syntax",
                            "separate list elements with ',' and quote elements with spaces",
                            "unexpected '%c' in a list", c);
        }
        tr_value_free(out);
        return s;
    }
}

static tr_status parse_value(cursor *cur, tr_value *out) {
    memset(out, 0, sizeof *out);
    skip_blanks(cur);
    tr_status s;
    if (at_end(cur)) {
        /* Hydra reads `key=` as the empty string; null must be spelled out. */
        return tr_value_scalar(out, "", true, *cur->origin);
    }
    if (peek(cur) == '[')
        s = parse_list(cur, out);
    else
        s = parse_element(cur, false, out);
    if (s != TR_OK) return s;
    skip_blanks(cur);
    if (at_end(cur)) return TR_OK;
    if (peek(cur) == ',')
        s = token_error(cur, cur->pos, "override.sweep",
                        "write a list as key=[a,b], or quote a string with commas: key='a,b'",
                        "a bare comma list is a Hydra multirun sweep, which a single run cannot "
                        "take");
    else
        s = token_error(cur, cur->pos, "override.syntax", "quote the whole value: key='...'",
                        "unexpected '%c' after the value", peek(cur));
    tr_value_free(out);
    return s;
}

static tr_status check_text(const cursor *cur) {
    size_t bad;
    if (!tr_utf8_valid(cur->tok, cur->len, &bad))
        return token_error(cur, bad, "override.encoding", "command-line values must be UTF-8",
                           "invalid UTF-8 byte 0x%02x", (unsigned char)cur->tok[bad]);
    for (size_t i = 0; i < cur->len; i++) {
        unsigned char c = (unsigned char)cur->tok[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return token_error(cur, i, "override.encoding",
                               "remove control characters (newlines, escapes) from the token",
                               "control character 0x%02x", c);
    }
    return TR_OK;
}

static tr_status parse_key(cursor *cur, size_t end, char **key) {
    size_t start = cur->pos;
    if (start == end)
        return token_error(cur, start, "override.syntax",
                           "write KEY=VALUE, e.g. train.train_iters=100", "missing key");
    for (size_t i = start; i < end; i++) {
        char c = cur->tok[i];
        bool dot = c == '.';
        if (dot && (i == start || i + 1 == end || cur->tok[i + 1] == '.'))
            return token_error(cur, i, "override.syntax",
                               "keys are section.field, e.g. model.num_layers",
                               "empty key segment");
        if (c == '@')
            return token_error(cur, i, "override.package",
                               "write the dotted key: section.field=value",
                               "Hydra package overrides (key@package) are not supported");
        if (c == '/')
            return token_error(
                cur, i, "override.package",
                "select a recipe with --recipe and set fields with section.field=value",
                "Hydra config groups (group/option) are not supported");
        bool ok = dot || c == '_' || c == '-' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9');
        if (!ok)
            return token_error(cur, i, "override.syntax",
                               "keys contain letters, digits, '_' and '.' only",
                               "unexpected '%c' in the key", c);
    }
    *key = strndup(cur->tok + start, end - start);
    return *key ? TR_OK : TR_ERR_NOMEM;
}

tr_status tr_override_parse(const char *token, const tr_origin *origin, tr_override *out,
                            tr_diags *d) {
    memset(out, 0, sizeof *out);
    out->origin = *origin;
    cursor cur = {token, strlen(token), 0, origin, d, 1, 0};
    TR_TRY(check_text(&cur));
    if (cur.len == 0)
        return token_error(&cur, 0, "override.syntax",
                           "write KEY=VALUE, e.g. train.train_iters=100", "empty override");
    if (token[0] == '-')
        return token_error(&cur, 0, "override.option",
                           "put options before the KEY=VALUE overrides; run with --help to list "
                           "them",
                           "'%.*s' looks like an option, not an override", TOKEN_QUOTE_MAX, token);
    out->op = TR_OVR_SET;
    if (!strncmp(token, "++", 2)) {
        out->op = TR_OVR_FORCE;
        cur.pos = 2;
    } else if (token[0] == '+') {
        out->op = TR_OVR_ADD;
        cur.pos = 1;
    } else if (token[0] == '~') {
        out->op = TR_OVR_RESET;
        cur.pos = 1;
    }
    const char *eq = strchr(token + cur.pos, '=');
    if (!eq && out->op != TR_OVR_RESET)
        return token_error(&cur, cur.len, "override.no_value",
                           "overrides are KEY=VALUE (e.g. train.train_iters=100); ~KEY resets a "
                           "key to the recipe's value",
                           "missing '=VALUE'");
    size_t key_end = eq ? (size_t)(eq - token) : cur.len;
    TR_TRY(parse_key(&cur, key_end, &out->key));
    if (!eq) return TR_OK;
    cur.pos = key_end + 1;
    if (tr_blend_key(out->key)) cur.nest_max = 3;
    tr_status s = parse_value(&cur, &out->value);
    if (s != TR_OK) {
        tr_override_free(out);
        return s;
    }
    out->has_value = true;
    return TR_OK;
}

void tr_override_free(tr_override *o) {
    if (!o) return;
    free(o->key);
    tr_value_free(&o->value);
    memset(o, 0, sizeof *o);
}
