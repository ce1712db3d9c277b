/* YAML override files read with libyaml's event API into tr_value trees. The event API is used
 * (not libcyaml) because every value must carry its own line:column for errors and --explain. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "core/input/file.h"
#include "core/input/key_index.h"
#include "overrides/overrides.h"

/* Override files are a few hundred lines; anything far larger is a wrong path. */
#define MAX_FILE_BYTES (16u << 20)
/* Sections hold fields and fields hold at most a list: deeper nesting is always a mistake, and
 * the limit keeps the recursive builder's stack bounded on hostile input. */
#define MAX_DEPTH 32

typedef struct reader {
    yaml_parser_t parser;
    const char *name; /* interned */
    const char *text;
    size_t len;
    tr_diags *d;
    bool failed; /* an error was reported; the tree may be partial */
} reader;

static tr_origin at_offset(const reader *r, size_t offset) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, r->name);
    o.line = 1;
    o.col = 1;
    for (size_t i = 0; i < offset && i < r->len; i++) {
        if (r->text[i] == '\n') {
            o.line++;
            o.col = 1;
        } else if (((unsigned char)r->text[i] & 0xc0) != 0x80) {
            o.col++;
        }
    }
    return o;
}

static tr_origin at_mark(const reader *r, yaml_mark_t m) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, r->name);
    o.line = (int32_t)m.line + 1;
    o.col = (int32_t)m.column + 1;
    return o;
}

static void report(reader *r, const tr_origin *o, const char *id, const char *hint, const char *fmt,
                   ...) __attribute__((format(printf, 5, 6)));

static void report(reader *r, const tr_origin *o, const char *id, const char *hint, const char *fmt,
                   ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tr_diag_add(r->d, TR_SEV_ERROR, id, o, NULL, hint, "%s", msg);
    r->failed = true;
}

static tr_status syntax_error(reader *r) {
    yaml_parser_t *p = &r->parser;
    if (p->error == YAML_MEMORY_ERROR) return TR_ERR_NOMEM;
    tr_origin o = p->error == YAML_READER_ERROR ? at_offset(r, p->problem_offset)
                                                : at_mark(r, p->problem_mark);
    const char *problem = p->problem ? p->problem : "unknown problem";
    if (p->context) {
        char ctx[64];
        tr_origin co = at_mark(r, p->context_mark);
        snprintf(ctx, sizeof ctx, " (%d:%d)", co.line, co.col);
        report(r, &o, "override.yaml_syntax", "fix the YAML syntax at that position",
               "YAML syntax error: %s %s%s", problem, p->context, ctx);
    } else {
        report(r, &o, "override.yaml_syntax", "fix the YAML syntax at that position",
               "YAML syntax error: %s", problem);
    }
    return TR_ERR_INVALID;
}

static tr_status next_event(reader *r, yaml_event_t *ev) {
    if (!yaml_parser_parse(&r->parser, ev)) return syntax_error(r);
    return TR_OK;
}

static void reject_anchor(reader *r, const yaml_event_t *ev, const yaml_char_t *anchor) {
    if (!anchor) return;
    tr_origin o = at_mark(r, ev->start_mark);
    report(r, &o, "override.yaml_anchor", "write the value out in full at each place",
           "anchors (&%.60s) are not supported in override files", (const char *)anchor);
}

/* Scalars: a quoted style or !!str keeps "null" and "true" strings; !!null is null. */
static tr_status read_scalar(reader *r, yaml_event_t *ev, tr_value *out) {
    tr_origin o = at_mark(r, ev->start_mark);
    const char *tag = (const char *)ev->data.scalar.tag;
    const char *text = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    bool quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE &&
                  ev->data.scalar.style != YAML_ANY_SCALAR_STYLE;
    memset(out, 0, sizeof *out);
    out->origin = o;
    reject_anchor(r, ev, ev->data.scalar.anchor);
    if (tag && !strcmp(tag, YAML_NULL_TAG)) return TR_OK;
    if (tag && !strcmp(tag, YAML_STR_TAG)) quoted = true;
    if (tag && strcmp(tag, YAML_STR_TAG) && strcmp(tag, YAML_INT_TAG) &&
        strcmp(tag, YAML_FLOAT_TAG) && strcmp(tag, YAML_BOOL_TAG) && strcmp(tag, "!")) {
        report(r, &o, "override.yaml_tag", "remove the tag; the field's type decides",
               "YAML tag %.80s is not supported", tag);
        return TR_OK;
    }
    if (memchr(text, '\0', len)) {
        report(r, &o, "override.yaml_nul", "remove the \\0 escape", "strings cannot contain NUL");
        return TR_OK;
    }
    /* "\${" is a literal "${"; a bare "${" would be an OmegaConf interpolation. */
    char *copy = malloc(len + 1);
    if (!copy) return TR_ERR_NOMEM;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\\' && i + 2 < len && text[i + 1] == '$' && text[i + 2] == '{') continue;
        if (text[i] == '$' && i + 1 < len && text[i + 1] == '{' &&
            (i == 0 || text[i - 1] != '\\')) {
            free(copy);
            report(r, &o, "override.interpolation",
                   "write the value itself; to mean a literal '${' write '\\${'",
                   "interpolations (${...}) are not supported: every value is resolved before the "
                   "run starts");
            return TR_OK;
        }
        copy[n++] = text[i];
    }
    copy[n] = '\0';
    tr_status s = tr_value_scalar(out, copy, quoted, o);
    free(copy);
    if (tag && !strcmp(tag, YAML_STR_TAG)) out->tag = 's';
    if (tag && !strcmp(tag, YAML_INT_TAG)) out->tag = 'i';
    if (tag && !strcmp(tag, YAML_FLOAT_TAG)) out->tag = 'f';
    if (tag && !strcmp(tag, YAML_BOOL_TAG)) out->tag = 'b';
    return s;
}

static tr_status read_node(reader *r, yaml_event_t *ev, int depth, tr_value *out);

static tr_status read_sequence(reader *r, int depth, tr_value *out) {
    out->kind = TR_VALUE_LIST;
    for (;;) {
        yaml_event_t ev;
        TR_TRY(next_event(r, &ev));
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return TR_OK;
        }
        tr_value item;
        tr_status s = read_node(r, &ev, depth + 1, &item);
        if (s == TR_OK) s = tr_value_push(out, NULL, &item);
        tr_value_free(&item);
        if (s != TR_OK) return s;
    }
}

static tr_status read_mapping_indexed(reader *r, int depth, tr_value *out, tr_key_index *ix);

static tr_status read_mapping(reader *r, int depth, tr_value *out) {
    tr_key_index ix = {NULL, 0};
    tr_status s = read_mapping_indexed(r, depth, out, &ix);
    tr_key_index_free(&ix);
    return s;
}

static tr_status read_mapping_indexed(reader *r, int depth, tr_value *out, tr_key_index *ix) {
    out->kind = TR_VALUE_MAP;
    for (;;) {
        yaml_event_t ev;
        TR_TRY(next_event(r, &ev));
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return TR_OK;
        }
        tr_origin key_origin = at_mark(r, ev.start_mark);
        tr_value key;
        tr_status s = read_node(r, &ev, depth + 1, &key);
        if (s != TR_OK) return s;
        bool key_ok = key.kind == TR_VALUE_SCALAR;
        if (!key_ok && key.kind != TR_VALUE_NULL)
            report(r, &key_origin, "override.yaml_key", "keys are plain names such as train_iters",
                   "a mapping key must be a plain name, not a list or mapping");
        else if (!key_ok)
            report(r, &key_origin, "override.yaml_key", "give the key a name",
                   "a mapping key is empty or null");
        tr_value value;
        if ((s = next_event(r, &ev)) == TR_OK) s = read_node(r, &ev, depth + 1, &value);
        if (s != TR_OK) {
            tr_value_free(&key);
            return s;
        }
        value.origin = key_origin;
        int prev = key_ok ? tr_key_index_find(ix, out->keys, NULL, key.text, strlen(key.text)) : -1;
        if (prev >= 0) {
            char hint[200];
            snprintf(hint, sizeof hint, "keep one of the two (line %d or line %d)",
                     out->items[prev].origin.line, key_origin.line);
            report(r, &key_origin, "override.yaml_duplicate", hint,
                   "duplicate key '%.80s' (first at line %d, again at line %d)", key.text,
                   out->items[prev].origin.line, key_origin.line);
        } else if (key_ok) {
            s = tr_value_push(out, key.text, &value);
            if (s == TR_OK) s = tr_key_index_add(ix, out->keys, NULL, out->n);
        }
        tr_value_free(&key);
        tr_value_free(&value);
        if (s != TR_OK) return s;
    }
}

/* Takes ownership of ev. */
static tr_status read_node(reader *r, yaml_event_t *ev, int depth, tr_value *out) {
    memset(out, 0, sizeof *out);
    out->origin = at_mark(r, ev->start_mark);
    tr_status s = TR_OK;
    if (depth > MAX_DEPTH) {
        report(r, &out->origin, "override.yaml_depth",
               "override files are section: {field: value}; lists hold plain values",
               "nesting deeper than %d levels", MAX_DEPTH);
        yaml_event_delete(ev);
        return TR_ERR_INVALID;
    }
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
        s = read_scalar(r, ev, out);
        break;
    case YAML_ALIAS_EVENT:
        report(r, &out->origin, "override.yaml_anchor", "write the value out in full at each place",
               "aliases (*%.60s) are not supported in override files",
               (const char *)ev->data.alias.anchor);
        break;
    case YAML_SEQUENCE_START_EVENT:
        reject_anchor(r, ev, ev->data.sequence_start.anchor);
        s = read_sequence(r, depth, out);
        break;
    case YAML_MAPPING_START_EVENT:
        reject_anchor(r, ev, ev->data.mapping_start.anchor);
        s = read_mapping(r, depth, out);
        break;
    default:
        report(r, &out->origin, "override.yaml_syntax", NULL, "unexpected YAML event %d",
               (int)ev->type);
        s = TR_ERR_INVALID;
    }
    yaml_event_delete(ev);
    if (s != TR_OK) tr_value_free(out);
    return s;
}

static bool blank_or_comments(const char *text, size_t len) {
    bool in_comment = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (c == '\n')
            in_comment = false;
        else if (c == '#')
            in_comment = true;
        else if (!in_comment && c != ' ' && c != '\t' && c != '\r')
            return false;
    }
    return true;
}

/* The document: exactly one node between DOCUMENT_START and DOCUMENT_END. */
static tr_status read_stream(reader *r, tr_value *root) {
    yaml_event_t ev;
    TR_TRY(next_event(r, &ev)); /* STREAM_START */
    yaml_event_delete(&ev);
    TR_TRY(next_event(r, &ev));
    if (ev.type != YAML_DOCUMENT_START_EVENT) {
        yaml_event_delete(&ev);
        tr_origin o = tr_origin_make(TR_ORIGIN_FILE, r->name);
        report(r, &o, "override.yaml_empty", "write a mapping such as `train: {train_iters: 100}`",
               "%s holds no YAML document", r->name);
        return TR_ERR_INVALID;
    }
    yaml_event_delete(&ev);
    TR_TRY(next_event(r, &ev));
    TR_TRY(read_node(r, &ev, 0, root));
    tr_status s = next_event(r, &ev); /* DOCUMENT_END */
    if (s != TR_OK) return s;
    yaml_event_delete(&ev);
    if ((s = next_event(r, &ev)) != TR_OK) return s;
    if (ev.type == YAML_DOCUMENT_START_EVENT) {
        tr_origin o = at_mark(r, ev.start_mark);
        report(r, &o, "override.yaml_documents", "put every key in one document (remove '---')",
               "a second YAML document; override files hold one");
    }
    yaml_event_delete(&ev);
    return TR_OK;
}

tr_status tr_yaml_parse_text(tr_config *c, const char *text, size_t len, const char *name,
                             tr_value *root, tr_diags *d) {
    memset(root, 0, sizeof *root);
    reader r = {
        .name = tr_config_intern(c, name ? name : "<yaml>"), .text = text, .len = len, .d = d};
    if (!r.name) return TR_ERR_NOMEM;
    tr_origin file = tr_origin_make(TR_ORIGIN_FILE, r.name);
    size_t bad;
    if (!tr_utf8_valid(text, len, &bad)) {
        tr_origin o = at_offset(&r, bad);
        report(&r, &o, "override.yaml_encoding", "save the file as UTF-8",
               "%s is not valid UTF-8 (byte 0x%02x)", r.name, (unsigned char)text[bad]);
        return TR_ERR_INVALID;
    }
    if (blank_or_comments(text, len)) {
        report(&r, &file, "override.yaml_empty",
               "write a mapping such as `train: {train_iters: 100}`", "%s is empty", r.name);
        return TR_ERR_INVALID;
    }
    if (!yaml_parser_initialize(&r.parser)) return TR_ERR_NOMEM;
    yaml_parser_set_input_string(&r.parser, (const unsigned char *)text, len);
    yaml_parser_set_encoding(&r.parser, YAML_UTF8_ENCODING);
    tr_status s = read_stream(&r, root);
    yaml_parser_delete(&r.parser);
    if (s != TR_OK) tr_value_free(root);
    if (s == TR_OK && r.failed) s = TR_ERR_INVALID;
    return s;
}

tr_status tr_yaml_parse_file(tr_config *c, const char *path, tr_value *root, tr_diags *d) {
    memset(root, 0, sizeof *root);
    const char *name = tr_config_intern(c, path);
    if (!name) return TR_ERR_NOMEM;
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, name);
    int err;
    FILE *f = tr_file_fopen(path, 0, &err);
    if (!f) {
        bool notreg = err == EISDIR || err == TR_FILE_ENOTREG;
        tr_diag_add(d, TR_SEV_ERROR, "override.file", &o, NULL,
                    err == ENOENT ? "check the path (relative paths start at the current "
                                    "directory)"
                    : notreg      ? "name a YAML file"
                                  : "check the file's permissions",
                    "cannot open config file %s: %s", path, tr_file_strerror(err));
        return err == ENOENT ? TR_ERR_NOTFOUND : notreg ? TR_ERR_INVALID : TR_ERR_IO;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    tr_status s = TR_OK;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            char *t = realloc(text, cap + 1);
            if (!t) {
                s = TR_ERR_NOMEM;
                break;
            }
            text = t;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (len > MAX_FILE_BYTES) {
            tr_diag_add(d, TR_SEV_ERROR, "override.file", &o, NULL,
                        "override files are small YAML mappings; check the path",
                        "config file %s is larger than %u MiB", path, MAX_FILE_BYTES >> 20);
            s = TR_ERR_INVALID;
            break;
        }
        if (got == 0) {
            if (ferror(f)) {
                tr_diag_add(d, TR_SEV_ERROR, "override.file", &o, NULL,
                            "check the file's permissions", "cannot read config file %s: %s", path,
                            strerror(errno));
                s = TR_ERR_IO;
            }
            break;
        }
    }
    fclose(f);
    if (s == TR_OK) s = tr_yaml_parse_text(c, text ? text : "", len, path, root, d);
    free(text);
    return s;
}
