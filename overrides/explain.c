/* --explain KEY: why a field has its value. Prints the table default and then every value the
 * field took, oldest first, each with where it came from, and marks the one in effect. */
#include <stdlib.h>
#include <string.h>

#include "core/field_parse.h"
#include "core/finalize_follow.h"
#include "overrides/overrides.h"

static void describe_type(const tr_field *f, char *buf, size_t cap) {
    if (f->enm) {
        char names[512];
        tr_enum_names(f->enm, names, sizeof names);
        snprintf(buf, cap, "%s: one of %s%s", tr_field_type_name(f), names,
                 f->type == TR_T_OENUM ? " or null" : "");
    } else if (f->range && *f->range) {
        snprintf(buf, cap, "%s, range %s", tr_field_type_name(f), f->range);
    } else {
        snprintf(buf, cap, "%s", tr_field_type_name(f));
    }
}

tr_status tr_config_explain(const tr_config *c, const char *key, FILE *out, tr_diags *d) {
    const tr_field *f;
    if (tr_override_resolve_key(key, NULL, &f, d) != TR_OK) return TR_ERR_NOTFOUND;

    char type[600];
    describe_type(f, type, sizeof type);
    fprintf(out, "%s  (%s%s%s)\n", f->path, type, f->unit && *f->unit ? ", unit " : "",
            f->unit && *f->unit ? f->unit : "");
    fprintf(out, "  %s\n", f->doc);
    if (f->flags & TR_F_DERIVED) fprintf(out, "  computed by finalize(); not settable\n");
    if (f->flags & TR_F_DEPRECATED)
        fprintf(out, "  deprecated: see the doc above for its replacement\n");
    if (f->flags & TR_F_NO_EFFECT)
        fprintf(out, "  no effect in this runtime: the results are those of the default "
                     "(docs/effects.md)\n");
    const char *fix = tr_finalize_effect_doc(f->id);
    if (fix) fprintf(out, "  %s\n", fix);
    if (f->flags & TR_F_UNBUILT)
        fprintf(out, "  a parameter of a feature the runtime has not built (docs/effects.md)\n");

    int last = -1, width = (int)strlen("default");
    char origin[160];
    for (int i = 0; i < c->n_history; i++) {
        if (c->history[i].field != f->id) continue;
        last = i;
        tr_origin_format(&c->history[i].origin, origin, sizeof origin);
        if ((int)strlen(origin) > width) width = (int)strlen(origin);
    }
    char current[4096];
    tr_config_field_format(c, f, current, sizeof current);
    /* Code that writes the struct without tr_config_mark_changes leaves no record; say so rather
     * than crediting the last recorded origin with a value it did not set. */
    bool recorded = last >= 0 ? !strcmp(c->history[last].value_text, current)
                              : c->origin[f->id].kind == TR_ORIGIN_DEFAULT;
    const char *unrecorded = "(not recorded)";
    if (!recorded && (int)strlen(unrecorded) > width) width = (int)strlen(unrecorded);

    fprintf(out, "\n  %-*s  %s%s\n", width, "default", f->def,
            recorded && last < 0 ? "   <- in effect" : "");
    for (int i = 0; i < c->n_history; i++) {
        if (c->history[i].field != f->id) continue;
        tr_origin_format(&c->history[i].origin, origin, sizeof origin);
        fprintf(out, "  %-*s  %s%s\n", width, origin, c->history[i].value_text,
                recorded && i == last ? "   <- in effect" : "");
    }
    if (!recorded) fprintf(out, "  %-*s  %s   <- in effect\n", width, unrecorded, current);
    return ferror(out) ? TR_ERR_IO : TR_OK;
}
