#include "core/diag.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void tr_diags_init(tr_diags *d) {
    memset(d, 0, sizeof *d);
}

void tr_diags_clear(tr_diags *d) {
    for (int i = 0; i < d->n; i++) {
        free(d->items[i].id);
        free(d->items[i].keys);
        free(d->items[i].message);
        free(d->items[i].hint);
    }
    d->n = d->n_errors = d->n_warnings = 0;
}

void tr_diags_free(tr_diags *d) {
    tr_diags_clear(d);
    free(d->items);
    memset(d, 0, sizeof *d);
}

static char *dup_or_null(const char *s) {
    return s ? strdup(s) : NULL;
}

tr_status tr_diag_add(tr_diags *d, tr_severity sev, const char *id, const tr_origin *origin,
                      const char *keys, const char *hint, const char *fmt, ...) {
    tr_status ret = sev == TR_SEV_ERROR ? TR_ERR_INVALID : TR_OK;
    if (!d) return ret;
    if (d->n == d->cap) {
        int cap = d->cap ? d->cap * 2 : 8;
        tr_diag *items = realloc(d->items, (size_t)cap * sizeof *items);
        if (!items) return TR_ERR_NOMEM;
        d->items = items;
        d->cap = cap;
    }
    tr_diag *g = &d->items[d->n];
    memset(g, 0, sizeof *g);
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g->severity = sev;
    g->id = dup_or_null(id ? id : "unnamed");
    g->keys = dup_or_null(keys);
    g->message = dup_or_null(msg);
    g->hint = dup_or_null(hint);
    if (!g->id || !g->message || (keys && !g->keys) || (hint && !g->hint)) {
        free(g->id), free(g->keys), free(g->message), free(g->hint);
        return TR_ERR_NOMEM;
    }
    if (origin) {
        g->origin = *origin;
        tr_origin_format(origin, g->origin_text, sizeof g->origin_text);
        g->origin.name = NULL; /* the formatted text is what outlives the source */
    }
    d->n++;
    if (sev == TR_SEV_ERROR) d->n_errors++;
    if (sev == TR_SEV_WARNING) d->n_warnings++;
    return ret;
}

const tr_diag *tr_diags_find(const tr_diags *d, const char *id) {
    for (int i = 0; i < d->n; i++)
        if (strcmp(d->items[i].id, id) == 0) return &d->items[i];
    return NULL;
}

void tr_diags_promote_warnings(tr_diags *d) {
    for (int i = 0; i < d->n; i++) {
        if (d->items[i].severity == TR_SEV_WARNING) {
            d->items[i].severity = TR_SEV_ERROR;
            d->n_warnings--;
            d->n_errors++;
        }
    }
}

static const char *sev_name(tr_severity s) {
    return s == TR_SEV_ERROR ? "error" : s == TR_SEV_WARNING ? "warning" : "note";
}

void tr_diags_print_text(const tr_diags *d, FILE *out, bool color) {
    for (int i = 0; i < d->n; i++) {
        const tr_diag *g = &d->items[i];
        const char *on = "", *off = "";
        if (color) {
            on = g->severity == TR_SEV_ERROR     ? "\033[1;31m"
                 : g->severity == TR_SEV_WARNING ? "\033[1;33m"
                                                 : "\033[1m";
            off = "\033[0m";
        }
        /* "default" locates nothing the user wrote, so it would only clutter the line. */
        if (g->origin_text[0] && strcmp(g->origin_text, "default") != 0)
            fprintf(out, "%s: ", g->origin_text);
        fprintf(out, "%s%s%s [%s]: %s\n", on, sev_name(g->severity), off, g->id, g->message);
        if (g->hint) fprintf(out, "  fix: %s\n", g->hint);
    }
}

static void json_string(FILE *out, const char *s) {
    if (!s) {
        fputs("null", out);
        return;
    }
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", out);
            break;
        case '\\':
            fputs("\\\\", out);
            break;
        case '\n':
            fputs("\\n", out);
            break;
        case '\t':
            fputs("\\t", out);
            break;
        case '\r':
            fputs("\\r", out);
            break;
        default:
            if (*p < 0x20)
                fprintf(out, "\\u%04x", *p);
            else
                fputc(*p, out);
        }
    }
    fputc('"', out);
}

void tr_diags_print_json(const tr_diags *d, FILE *out) {
    fprintf(out, "{\"errors\": %d, \"warnings\": %d, \"diagnostics\": [", d->n_errors,
            d->n_warnings);
    for (int i = 0; i < d->n; i++) {
        const tr_diag *g = &d->items[i];
        fprintf(out, "%s\n  {\"severity\": \"%s\", \"id\": ", i ? "," : "", sev_name(g->severity));
        json_string(out, g->id);
        fputs(", \"keys\": [", out);
        if (g->keys) {
            const char *k = g->keys;
            int first = 1;
            while (*k) {
                const char *e = strchr(k, ',');
                size_t len = e ? (size_t)(e - k) : strlen(k);
                char key[256];
                snprintf(key, sizeof key, "%.*s", (int)len, k);
                if (!first) fputs(", ", out);
                json_string(out, key);
                first = 0;
                k += len + (e ? 1 : 0);
            }
        }
        fputs("], \"message\": ", out);
        json_string(out, g->message);
        fputs(", \"hint\": ", out);
        json_string(out, g->hint);
        fputs(", \"origin\": ", out);
        json_string(out, g->origin_text[0] ? g->origin_text : NULL);
        fputc('}', out);
    }
    fputs("\n]}\n", out);
}
