/* ConfigContainer lifecycle and typed access through the field table. */
#include "core/config.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/field_parse.h"

void *tr_config_field_ptr(tr_config *c, const tr_field *f) {
    return (char *)c + f->offset;
}

const void *tr_config_field_cptr(const tr_config *c, const tr_field *f) {
    return (const char *)c + f->offset;
}

static void free_field(tr_config *c, const tr_field *f) {
    void *p = tr_config_field_ptr(c, f);
    switch (f->type) {
    case TR_T_STR:
    case TR_T_OSTR:
        free(*(char **)p);
        *(char **)p = NULL;
        break;
    case TR_T_INTLIST: {
        tr_int_list *l = p;
        free(l->v);
        memset(l, 0, sizeof *l);
        l->null = true;
        break;
    }
    case TR_T_STRLIST: {
        tr_str_list *l = p;
        for (int i = 0; i < l->n; i++) free(l->v[i]);
        free(l->v);
        memset(l, 0, sizeof *l);
        l->null = true;
        break;
    }
    default:
        break;
    }
}

/* A null-free list holding copies of items[0..n). */
static tr_status str_list_dup(const char *const *items, int n, tr_str_list *out) {
    tr_str_list nl = {NULL, 0, false};
    if (n) {
        nl.v = calloc((size_t)n, sizeof *nl.v);
        if (!nl.v) return TR_ERR_NOMEM;
        for (; nl.n < n; nl.n++) {
            nl.v[nl.n] = strdup(items[nl.n]);
            if (!nl.v[nl.n]) {
                while (nl.n > 0) free(nl.v[--nl.n]);
                free(nl.v);
                return TR_ERR_NOMEM;
            }
        }
    }
    *out = nl;
    return TR_OK;
}

/* Deep-copy one field's value from src into dst (dst's old value freed). */
static tr_status copy_field(tr_config *dst, const tr_config *src, const tr_field *f) {
    void *d = tr_config_field_ptr(dst, f);
    const void *s = tr_config_field_cptr(src, f);
    switch (f->type) {
    case TR_T_STR:
    case TR_T_OSTR: {
        const char *str = *(char *const *)s;
        char *copy = str ? strdup(str) : NULL;
        if (str && !copy) return TR_ERR_NOMEM;
        free(*(char **)d);
        *(char **)d = copy;
        return TR_OK;
    }
    case TR_T_INTLIST: {
        const tr_int_list *l = s;
        int64_t *v = NULL;
        if (l->n) {
            v = malloc((size_t)l->n * sizeof *v);
            if (!v) return TR_ERR_NOMEM;
            memcpy(v, l->v, (size_t)l->n * sizeof *v);
        }
        free_field(dst, f);
        tr_int_list *o = d;
        o->v = v, o->n = l->n, o->null = l->null;
        return TR_OK;
    }
    case TR_T_STRLIST: {
        const tr_str_list *l = s;
        tr_str_list nl;
        TR_TRY(str_list_dup((const char *const *)l->v, l->n, &nl));
        nl.null = l->null;
        free_field(dst, f);
        *(tr_str_list *)d = nl;
        return TR_OK;
    }
    case TR_T_BOOL:
        *(bool *)d = *(const bool *)s;
        return TR_OK;
    case TR_T_OBOOL:
        *(int8_t *)d = *(const int8_t *)s;
        return TR_OK;
    case TR_T_INT:
    case TR_T_OINT:
        *(int64_t *)d = *(const int64_t *)s;
        return TR_OK;
    case TR_T_FLOAT:
    case TR_T_OFLOAT:
        *(double *)d = *(const double *)s;
        return TR_OK;
    case TR_T_ENUM:
    case TR_T_OENUM:
        *(int32_t *)d = *(const int32_t *)s;
        return TR_OK;
    }
    return TR_ERR_INTERNAL;
}

const char *tr_config_intern(tr_config *c, const char *s) {
    if (!s) return NULL;
    for (int i = 0; i < c->n_interned; i++)
        if (!strcmp(c->interned[i], s)) return c->interned[i];
    if (c->n_interned == c->cap_interned) {
        int cap = c->cap_interned ? c->cap_interned * 2 : 8;
        char **v = realloc(c->interned, (size_t)cap * sizeof *v);
        if (!v) return NULL;
        c->interned = v;
        c->cap_interned = cap;
    }
    char *copy = strdup(s);
    if (!copy) return NULL;
    c->interned[c->n_interned++] = copy;
    return copy;
}

static tr_status history_add(tr_config *c, const tr_field *f, const tr_origin *o) {
    if (c->no_history) return TR_OK;
    if (c->n_history == c->cap_history) {
        int cap = c->cap_history ? c->cap_history * 2 : 64;
        tr_history_entry *h = realloc(c->history, (size_t)cap * sizeof *h);
        if (!h) return TR_ERR_NOMEM;
        c->history = h;
        c->cap_history = cap;
    }
    char buf[4096];
    tr_config_field_format(c, f, buf, sizeof buf);
    char *text = strdup(buf);
    if (!text) return TR_ERR_NOMEM;
    c->history[c->n_history++] = (tr_history_entry){f->id, *o, text};
    return TR_OK;
}

static tr_status type_error(tr_diags *d, const tr_field *f, const tr_value *v, const tr_origin *o,
                            const char *expected) {
    char got[256];
    tr_value_format(v, got, sizeof got);
    char hint[600];
    /* The expected-type text is at most a few enum names; bounded so the hint always fits. */
    snprintf(hint, sizeof hint,
             "give %s a value of type %.300s (see `run_recipe --help-config %.*s`)", f->path,
             expected, (int)(strchr(f->path, '.') - f->path), f->path);
    tr_diag_add(d, TR_SEV_ERROR, "override.type", o, f->path, hint, "%s expects %s, got %s",
                f->path, expected, got);
    return TR_ERR_INVALID;
}

static tr_status range_error(tr_diags *d, const tr_field *f, const tr_value *v, const tr_origin *o,
                             const char *why) {
    char got[256];
    tr_value_format(v, got, sizeof got);
    tr_diag_add(d, TR_SEV_ERROR, "override.range", o, f->path, NULL, "%s must be %s, got %s",
                f->path, why, got);
    return TR_ERR_INVALID;
}

static bool value_is_null(const tr_value *v) {
    return v->kind == TR_VALUE_NULL ||
           (v->kind == TR_VALUE_SCALAR && !v->quoted && tr_text_is_null(v->text));
}

/* A YAML tag states the type the author meant: a !!str "4" is a string, never an integer, and
 * a !!float is not an integer either; untagged scalars are typed by the field. */
static bool tag_allows(const tr_value *v, const char *tags) {
    return v->tag == 0 || strchr(tags, v->tag) != NULL;
}

static tr_status tag_error(tr_diags *d, const tr_field *f, const tr_value *v, const tr_origin *o,
                           const char *expected) {
    static const char *const names[] = {"s!!str", "i!!int", "f!!float", "b!!bool"};
    const char *tag = "";
    for (int i = 0; i < 4; i++)
        if (names[i][0] == v->tag) tag = names[i] + 1;
    char got[256];
    tr_value_format(v, got, sizeof got);
    tr_diag_add(d, TR_SEV_ERROR, "override.type", o, f->path,
                "remove the YAML tag, or write a value of the field's type",
                "%s expects %s, got %s %s", f->path, expected, tag, got);
    return TR_ERR_INVALID;
}

/* A quoted scalar is a string (YAML's core schema): "4" is not the integer 4. Only a tag says
 * otherwise (!!int "4"). Returns false after reporting. */
static bool unquoted_or_tagged(tr_diags *d, const tr_field *f, const tr_value *v,
                               const tr_origin *o, const char *expected) {
    if (v->kind != TR_VALUE_SCALAR || !v->quoted || v->tag != 0) return true;
    tr_diag_add(d, TR_SEV_ERROR, "override.type", o, f->path,
                "drop the quotes: a quoted value is a string",
                "%s expects %s, got the string \"%s\"", f->path, expected, v->text);
    return false;
}

/* Integers are decimal. A leading zero is refused rather than read: YAML 1.1 reads 010 as octal
 * 8, YAML 1.2 and Python's int() as 10 (or refuse it), and the author meant one of them. */
static bool leading_zero(const char *s) {
    if (*s == '+' || *s == '-') s++;
    return s[0] == '0' && isdigit((unsigned char)s[1]);
}

/* Parse one scalar element for a numeric or string type into out (no storage change). */
static tr_status parse_int_elem(const tr_field *f, const tr_value *v, const tr_origin *o,
                                tr_diags *d, int64_t *out) {
    char expected[96];
    snprintf(expected, sizeof expected, "an integer%s%s", f->range && *f->range ? " in " : "",
             f->range && *f->range ? f->range : "");
    if (!tag_allows(v, "i")) return tag_error(d, f, v, o, expected);
    if (!unquoted_or_tagged(d, f, v, o, expected)) return TR_ERR_INVALID;
    if (v->kind == TR_VALUE_SCALAR && leading_zero(v->text)) {
        tr_diag_add(d, TR_SEV_ERROR, "override.type", o, f->path,
                    "write the number without the leading zero (integers are decimal)",
                    "%s: %s has a leading zero, which YAML 1.1 reads as octal and YAML 1.2 as "
                    "decimal; it is refused rather than guessed",
                    f->path, v->text);
        return TR_ERR_INVALID;
    }
    if (v->kind != TR_VALUE_SCALAR || !tr_parse_int(v->text, out)) {
        double x;
        if (v->kind == TR_VALUE_SCALAR && tr_parse_float(v->text, &x) && x == floor(x) &&
            fabs(x) < 9e15) {
            /* 1e6 for train_iters is common in YAML written by hand; accept exact integers. */
            *out = (int64_t)x;
        } else {
            return type_error(d, f, v, o, expected);
        }
    }
    char why[96];
    if (!tr_range_check(f->range, (double)*out, why, sizeof why))
        return range_error(d, f, v, o, why);
    return TR_OK;
}

tr_status tr_config_set(tr_config *c, const tr_field *f, const tr_value *v, const tr_origin *o,
                        tr_diags *d) {
    if ((f->flags & TR_F_DERIVED) && o->kind != TR_ORIGIN_DERIVED && o->kind != TR_ORIGIN_DEFAULT) {
        tr_diag_add(d, TR_SEV_ERROR, "override.derived", o, f->path,
                    "set the inputs it is computed from instead (see docs/config-reference.md)",
                    "%s is computed by finalize() and cannot be set", f->path);
        return TR_ERR_INVALID;
    }
    void *p = tr_config_field_ptr(c, f);
    bool is_null = value_is_null(v);
    if (is_null && !tr_field_is_nullable(f)) {
        char expected[64];
        snprintf(expected, sizeof expected, "a non-null %s", tr_field_type_name(f));
        return type_error(d, f, v, o, expected);
    }
    if (v->kind == TR_VALUE_MAP) return type_error(d, f, v, o, tr_field_type_name(f));
    bool is_list_type = f->type == TR_T_INTLIST || f->type == TR_T_STRLIST;
    if (v->kind == TR_VALUE_LIST && !is_list_type)
        return type_error(d, f, v, o, tr_field_type_name(f));

    switch (f->type) {
    case TR_T_BOOL:
    case TR_T_OBOOL: {
        if (is_null) {
            *(int8_t *)p = -1;
            break;
        }
        bool b;
        if (!tag_allows(v, "b")) return tag_error(d, f, v, o, "a bool (true or false)");
        if (!unquoted_or_tagged(d, f, v, o, "a bool (true or false)")) return TR_ERR_INVALID;
        if (!tr_parse_bool(v->text, &b)) return type_error(d, f, v, o, "a bool (true or false)");
        if (f->type == TR_T_BOOL)
            *(bool *)p = b;
        else
            *(int8_t *)p = b ? 1 : 0;
        break;
    }
    case TR_T_INT:
    case TR_T_OINT: {
        if (is_null) {
            *(int64_t *)p = TR_NULL_INT;
            break;
        }
        int64_t x;
        TR_TRY(parse_int_elem(f, v, o, d, &x));
        *(int64_t *)p = x;
        break;
    }
    case TR_T_FLOAT:
    case TR_T_OFLOAT: {
        if (is_null) {
            *(double *)p = tr_null_float();
            break;
        }
        double x;
        if (!tag_allows(v, "if")) return tag_error(d, f, v, o, "a number");
        if (!unquoted_or_tagged(d, f, v, o, "a number")) return TR_ERR_INVALID;
        if (!tr_parse_float(v->text, &x)) return type_error(d, f, v, o, "a number");
        char why[96];
        if (!tr_range_check(f->range, x, why, sizeof why)) return range_error(d, f, v, o, why);
        *(double *)p = x;
        break;
    }
    case TR_T_STR:
    case TR_T_OSTR: {
        char *s = NULL;
        if (!is_null) {
            s = strdup(v->text);
            if (!s) return TR_ERR_NOMEM;
        }
        free(*(char **)p);
        *(char **)p = s;
        break;
    }
    case TR_T_ENUM:
    case TR_T_OENUM: {
        if (is_null) {
            *(int32_t *)p = -1;
            break;
        }
        int idx = tr_enum_lookup(f->enm, v->text);
        if (idx < 0) {
            char names[512], expected[600];
            tr_enum_names(f->enm, names, sizeof names);
            snprintf(expected, sizeof expected, "one of %s", names);
            return type_error(d, f, v, o, expected);
        }
        *(int32_t *)p = idx;
        break;
    }
    case TR_T_INTLIST: {
        tr_int_list nl = {NULL, 0, is_null};
        if (!is_null) {
            const tr_value *elems = v->kind == TR_VALUE_LIST ? v->items : v;
            int n = v->kind == TR_VALUE_LIST ? v->n : 1;
            if (n) {
                nl.v = malloc((size_t)n * sizeof *nl.v);
                if (!nl.v) return TR_ERR_NOMEM;
            }
            for (int i = 0; i < n; i++) {
                tr_status s = parse_int_elem(f, &elems[i], o, d, &nl.v[i]);
                if (s != TR_OK) {
                    free(nl.v);
                    return s;
                }
            }
            nl.n = n;
        }
        free_field(c, f);
        *(tr_int_list *)p = nl;
        break;
    }
    case TR_T_STRLIST: {
        tr_str_list nl = {NULL, 0, true};
        if (!is_null) {
            const tr_value *elems = v->kind == TR_VALUE_LIST ? v->items : v;
            int n = v->kind == TR_VALUE_LIST ? v->n : 1;
            const char **texts = n ? malloc((size_t)n * sizeof *texts) : NULL;
            if (n && !texts) return TR_ERR_NOMEM;
            for (int i = 0; i < n; i++) {
                if (elems[i].kind != TR_VALUE_SCALAR) {
                    free(texts);
                    return type_error(d, f, v, o, "a list of strings");
                }
                texts[i] = elems[i].text;
            }
            tr_status st = str_list_dup(texts, n, &nl);
            free(texts);
            TR_TRY(st);
        }
        free_field(c, f);
        *(tr_str_list *)p = nl;
        break;
    }
    }
    c->origin[f->id] = *o;
    if (o->kind == TR_ORIGIN_DEFAULT) return TR_OK;
    return history_add(c, f, o);
}

tr_status tr_config_set_text(tr_config *c, const char *path, const char *text, const tr_origin *o,
                             tr_diags *d) {
    const tr_field *f = tr_field_by_path(path);
    if (!f) {
        tr_diag_add(d, TR_SEV_ERROR, "override.unknown_key", o, path, NULL, "unknown key %s", path);
        return TR_ERR_NOTFOUND;
    }
    tr_value v;
    TR_TRY(tr_value_scalar(&v, text, false, *o));
    tr_status s = tr_config_set(c, f, &v, o, d);
    tr_value_free(&v);
    return s;
}

tr_status tr_config_init(tr_config *c, tr_diags *d) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < tr_field_count; i++) {
        const tr_field *f = &tr_fields[i];
        if (f->type == TR_T_INTLIST || f->type == TR_T_STRLIST)
            ((tr_int_list *)tr_config_field_ptr(c, f))->null = true;
    }
    tr_origin def = tr_origin_make(TR_ORIGIN_DEFAULT, NULL);
    for (int i = 0; i < tr_field_count; i++) {
        const tr_field *f = &tr_fields[i];
        tr_value v;
        memset(&v, 0, sizeof v);
        tr_status s;
        /* Defaults use the CLI grammar so that list defaults such as "[a, b]" work. */
        size_t len = strlen(f->def);
        if (len >= 2 && f->def[0] == '[' && f->def[len - 1] == ']') {
            v.kind = TR_VALUE_LIST;
            char *buf = strdup(f->def + 1);
            if (!buf) return TR_ERR_NOMEM;
            buf[len - 2] = '\0';
            char *save = NULL;
            s = TR_OK;
            for (char *tok = strtok_r(buf, ",", &save); tok && s == TR_OK;
                 tok = strtok_r(NULL, ",", &save)) {
                while (*tok == ' ') tok++;
                char *end = tok + strlen(tok);
                while (end > tok && end[-1] == ' ') *--end = '\0';
                tr_value item;
                s = tr_value_scalar(&item, tok, false, def);
                if (s == TR_OK) s = tr_value_push(&v, NULL, &item);
            }
            free(buf);
            if (s == TR_OK) s = tr_config_set(c, f, &v, &def, d);
        } else {
            s = tr_value_scalar(&v, f->def, false, def);
            if (s == TR_OK) s = tr_config_set(c, f, &v, &def, d);
        }
        tr_value_free(&v);
        if (s != TR_OK) {
            tr_diag_add(d, TR_SEV_ERROR, "internal.bad_default", NULL, f->path, NULL,
                        "the field table's default for %s (\"%s\") does not parse", f->path,
                        f->def);
            tr_config_free(c);
            return TR_ERR_INTERNAL;
        }
    }
    return TR_OK;
}

void tr_config_free(tr_config *c) {
    if (!c) return;
    for (int i = 0; i < tr_field_count; i++) free_field(c, &tr_fields[i]);
    for (int i = 0; i < c->n_history; i++) free(c->history[i].value_text);
    free(c->history);
    for (int i = 0; i < c->n_interned; i++) free(c->interned[i]);
    free(c->interned);
    if (c->recipe_snapshot) {
        tr_config_free(c->recipe_snapshot);
        free(c->recipe_snapshot);
    }
    memset(c, 0, sizeof *c);
}

void tr_config_drop_history(tr_config *c) {
    for (int i = 0; i < c->n_history; i++) free(c->history[i].value_text);
    free(c->history);
    c->history = NULL;
    c->n_history = c->cap_history = 0;
    if (c->recipe_snapshot) {
        tr_config_free(c->recipe_snapshot);
        free(c->recipe_snapshot);
        c->recipe_snapshot = NULL;
    }
    c->no_history = true;
}

tr_status tr_config_reset_to(tr_config *c, const tr_config *from) {
    if (c->n_history || from->n_history || c->recipe_snapshot || from->recipe_snapshot)
        return TR_ERR_INVALID;
    for (int i = 0; i < tr_field_count; i++)
        if (!tr_config_field_equal(c, from, &tr_fields[i]))
            TR_TRY(copy_field(c, from, &tr_fields[i]));
    /* origins name files through from's interned strings, which outlive the reset */
    memcpy(c->origin, from->origin, sizeof c->origin);
    c->recipe_name = from->recipe_name;
    c->finalized = from->finalized;
    c->no_history = from->no_history;
    return TR_OK;
}

tr_status tr_config_reset_fields(tr_config *c, const tr_config *from, const int *fids, int n) {
    if (c->n_history || from->n_history || c->recipe_snapshot || from->recipe_snapshot)
        return TR_ERR_INVALID;
    for (int k = 0; k < n; k++) {
        if (fids[k] < 0 || fids[k] >= tr_field_count) return TR_ERR_INVALID;
        const tr_field *f = &tr_fields[fids[k]];
        if (!tr_config_field_equal(c, from, f)) TR_TRY(copy_field(c, from, f));
        c->origin[fids[k]] = from->origin[fids[k]];
    }
    c->recipe_name = from->recipe_name;
    c->finalized = from->finalized;
    c->no_history = from->no_history;
    return TR_OK;
}

/* Origins point into src->interned; make them point into dst's copies. */
static const char *remap_name(const tr_config *src, tr_config *dst, const char *name) {
    for (int i = 0; i < src->n_interned; i++)
        if (name == src->interned[i]) return dst->interned[i];
    return name;
}

tr_status tr_config_copy(tr_config *dst, const tr_config *src) {
    memset(dst, 0, sizeof *dst);
    for (int i = 0; i < tr_field_count; i++) {
        const tr_field *f = &tr_fields[i];
        if (f->type == TR_T_INTLIST || f->type == TR_T_STRLIST)
            ((tr_int_list *)tr_config_field_ptr(dst, f))->null = true;
    }
    tr_status s = TR_OK;
    for (int i = 0; i < tr_field_count && s == TR_OK; i++) s = copy_field(dst, src, &tr_fields[i]);
    for (int i = 0; i < src->n_interned && s == TR_OK; i++)
        if (!tr_config_intern(dst, src->interned[i])) s = TR_ERR_NOMEM;
    if (s == TR_OK && src->n_history) {
        dst->history = calloc((size_t)src->n_history, sizeof *dst->history);
        if (!dst->history) s = TR_ERR_NOMEM;
        dst->cap_history = src->n_history;
        for (int i = 0; i < src->n_history && s == TR_OK; i++) {
            dst->history[i] = src->history[i];
            dst->history[i].origin.name = remap_name(src, dst, src->history[i].origin.name);
            dst->history[i].value_text = strdup(src->history[i].value_text);
            if (!dst->history[i].value_text)
                s = TR_ERR_NOMEM;
            else
                dst->n_history++;
        }
    }
    for (int i = 0; i < TR_FIELD_COUNT; i++) {
        dst->origin[i] = src->origin[i];
        dst->origin[i].name = remap_name(src, dst, src->origin[i].name);
    }
    dst->recipe_name = src->recipe_name;
    dst->finalized = src->finalized;
    dst->no_history = src->no_history;
    if (s == TR_OK && src->recipe_snapshot) {
        dst->recipe_snapshot = malloc(sizeof *dst->recipe_snapshot);
        if (!dst->recipe_snapshot)
            s = TR_ERR_NOMEM;
        else if ((s = tr_config_copy(dst->recipe_snapshot, src->recipe_snapshot)) != TR_OK) {
            free(dst->recipe_snapshot);
            dst->recipe_snapshot = NULL;
        }
    }
    if (s != TR_OK) tr_config_free(dst);
    return s;
}

bool tr_config_field_equal(const tr_config *a, const tr_config *b, const tr_field *f) {
    const void *x = tr_config_field_cptr(a, f), *y = tr_config_field_cptr(b, f);
    switch (f->type) {
    case TR_T_BOOL:
        return *(const bool *)x == *(const bool *)y;
    case TR_T_OBOOL:
        return *(const int8_t *)x == *(const int8_t *)y;
    case TR_T_INT:
    case TR_T_OINT:
        return *(const int64_t *)x == *(const int64_t *)y;
    case TR_T_FLOAT:
    case TR_T_OFLOAT:
        return memcmp(x, y, sizeof(double)) == 0;
    case TR_T_ENUM:
    case TR_T_OENUM:
        return *(const int32_t *)x == *(const int32_t *)y;
    case TR_T_STR:
    case TR_T_OSTR: {
        const char *s = *(char *const *)x, *t = *(char *const *)y;
        return s == t || (s && t && !strcmp(s, t));
    }
    case TR_T_INTLIST: {
        const tr_int_list *l = x, *m = y;
        return l->null == m->null && l->n == m->n &&
               (!l->n || !memcmp(l->v, m->v, (size_t)l->n * sizeof *l->v));
    }
    case TR_T_STRLIST: {
        const tr_str_list *l = x, *m = y;
        if (l->null != m->null || l->n != m->n) return false;
        for (int i = 0; i < l->n; i++)
            if (strcmp(l->v[i], m->v[i])) return false;
        return true;
    }
    }
    return false;
}

void tr_config_field_format(const tr_config *c, const tr_field *f, char *buf, size_t cap) {
    const void *p = tr_config_field_cptr(c, f);
    char tmp[64];
    switch (f->type) {
    case TR_T_BOOL:
        snprintf(buf, cap, "%s", *(const bool *)p ? "true" : "false");
        return;
    case TR_T_OBOOL: {
        int8_t b = *(const int8_t *)p;
        snprintf(buf, cap, "%s", b < 0 ? "null" : b ? "true" : "false");
        return;
    }
    case TR_T_INT:
    case TR_T_OINT: {
        int64_t x = *(const int64_t *)p;
        if (x == TR_NULL_INT)
            snprintf(buf, cap, "null");
        else
            snprintf(buf, cap, "%lld", (long long)x);
        return;
    }
    case TR_T_FLOAT:
    case TR_T_OFLOAT: {
        double x = *(const double *)p;
        if (tr_is_null_float(x))
            snprintf(buf, cap, "null");
        else {
            tr_format_float(x, tmp, sizeof tmp);
            snprintf(buf, cap, "%s", tmp);
        }
        return;
    }
    case TR_T_STR:
    case TR_T_OSTR: {
        const char *s = *(char *const *)p;
        if (!s)
            snprintf(buf, cap, "null");
        else
            tr_format_string(s, buf, cap);
        return;
    }
    case TR_T_ENUM:
    case TR_T_OENUM: {
        int32_t i = *(const int32_t *)p;
        snprintf(buf, cap, "%s", i < 0 || i >= f->enm->n ? "null" : f->enm->values[i].name);
        return;
    }
    case TR_T_INTLIST:
    case TR_T_STRLIST: {
        const tr_int_list *il = p;
        const tr_str_list *sl = p;
        if (il->null) {
            snprintf(buf, cap, "null");
            return;
        }
        size_t used = 0;
        int n = f->type == TR_T_INTLIST ? il->n : sl->n;
        used += (size_t)snprintf(buf, cap, "[");
        for (int i = 0; i < n && used < cap; i++) {
            char elem[1024];
            if (f->type == TR_T_INTLIST)
                snprintf(elem, sizeof elem, "%lld", (long long)il->v[i]);
            else
                tr_format_string(sl->v[i], elem, sizeof elem);
            used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", elem);
        }
        if (used < cap) snprintf(buf + used, cap - used, "]");
        return;
    }
    }
}

tr_status tr_config_set_str(tr_config *c, int field, const char *s) {
    const tr_field *f = &tr_fields[field];
    if (f->type != TR_T_STR && f->type != TR_T_OSTR) return TR_ERR_INTERNAL;
    if (!s && f->type == TR_T_STR) return TR_ERR_INTERNAL;
    char *copy = s ? strdup(s) : NULL;
    if (s && !copy) return TR_ERR_NOMEM;
    char **p = tr_config_field_ptr(c, f);
    free(*p);
    *p = copy;
    return TR_OK;
}

tr_status tr_config_set_strlist(tr_config *c, int field, const char *const *items, int n) {
    const tr_field *f = &tr_fields[field];
    if (f->type != TR_T_STRLIST) return TR_ERR_INTERNAL;
    tr_str_list nl = {NULL, 0, true};
    if (items) TR_TRY(str_list_dup(items, n, &nl));
    free_field(c, f);
    *(tr_str_list *)tr_config_field_ptr(c, f) = nl;
    return TR_OK;
}

tr_status tr_config_set_intlist(tr_config *c, int field, const int64_t *items, int n) {
    const tr_field *f = &tr_fields[field];
    if (f->type != TR_T_INTLIST) return TR_ERR_INTERNAL;
    tr_int_list nl = {NULL, 0, items == NULL};
    if (items && n) {
        nl.v = malloc((size_t)n * sizeof *nl.v);
        if (!nl.v) return TR_ERR_NOMEM;
        memcpy(nl.v, items, (size_t)n * sizeof *nl.v);
        nl.n = n;
    }
    free_field(c, f);
    *(tr_int_list *)tr_config_field_ptr(c, f) = nl;
    return TR_OK;
}

tr_status tr_config_mark_changes_listed(tr_config *c, const tr_config *before, const tr_origin *o,
                                        int *changed, int cap, int *n) {
    int k = 0;
    for (int i = 0; i < tr_field_count; i++) {
        const tr_field *f = &tr_fields[i];
        /* the scalar types compared in place: the layout search compares every field of
         * thousands of candidates (tr_config_finalize_against) */
        const char *x = (const char *)c + f->offset, *y = (const char *)before + f->offset;
        bool same;
        switch (f->type) {
        case TR_T_INT:
        case TR_T_OINT:
        case TR_T_FLOAT:
        case TR_T_OFLOAT:
            same = !memcmp(x, y, 8);
            break;
        case TR_T_ENUM:
        case TR_T_OENUM:
            same = !memcmp(x, y, 4);
            break;
        case TR_T_BOOL:
            same = *(const bool *)x == *(const bool *)y;
            break;
        case TR_T_OBOOL:
            same = *x == *y;
            break;
        default:
            same = tr_config_field_equal(c, before, f);
        }
        if (same) continue;
        if (changed && k < cap) changed[k] = i;
        k++;
        c->origin[i] = *o;
        TR_TRY(history_add(c, f, o));
    }
    if (n) *n = k;
    return TR_OK;
}

tr_status tr_config_mark_changes(tr_config *c, const tr_config *before, const tr_origin *o) {
    return tr_config_mark_changes_listed(c, before, o, NULL, 0, NULL);
}

tr_status tr_config_snapshot_recipe(tr_config *c) {
    tr_config *snap = malloc(sizeof *snap);
    if (!snap) return TR_ERR_NOMEM;
    tr_config *old = c->recipe_snapshot;
    c->recipe_snapshot = NULL; /* a snapshot does not carry its own snapshot */
    tr_status s = tr_config_copy(snap, c);
    c->recipe_snapshot = old;
    if (s != TR_OK) {
        free(snap);
        return s;
    }
    if (old) {
        tr_config_free(old);
        free(old);
    }
    c->recipe_snapshot = snap;
    return TR_OK;
}

tr_status tr_config_restore_recipe(tr_config *c, const tr_field *f, const tr_origin *o,
                                   tr_diags *d) {
    if (f->flags & TR_F_DERIVED) {
        tr_diag_add(d, TR_SEV_ERROR, "override.derived", o, f->path, NULL,
                    "%s is computed by finalize() and cannot be reset", f->path);
        return TR_ERR_INVALID;
    }
    if (!c->recipe_snapshot) {
        /* No recipe: the recipe value is the table default. */
        tr_config fresh;
        TR_TRY(tr_config_init(&fresh, d));
        tr_status s = copy_field(c, &fresh, f);
        tr_config_free(&fresh);
        TR_TRY(s);
    } else {
        TR_TRY(copy_field(c, c->recipe_snapshot, f));
    }
    c->origin[f->id] = *o;
    return history_add(c, f, o);
}
