/* Applying parsed overrides: key resolution (shorthands, did-you-mean) and the +, ++, ~ rules.
 * Type checking is core's job (tr_config_set), so both front ends report it the same way. */
#include <stdlib.h>
#include <string.h>

#include "overrides/overrides.h"

#define MAX_SUGGESTIONS 3

typedef struct shorthand {
    const char *section;
    const char *field;
} shorthand;

/* A section whose one essential choice can be written as the section's value, as Megatron-Bridge
 * writes `mixed_precision: bf16_mixed` and `peft: lora`. */
static const shorthand shorthands[] = {
    {"mixed_precision", "mixed_precision.preset"},
    {"peft", "peft.scheme"},
};

static int section_index(const char *name) {
    for (int i = 0; i < tr_section_count; i++)
        if (!strcmp(tr_sections[i].name, name)) return i;
    return -1;
}

static int section_field_count(int section) {
    int n = 0;
    for (int i = 0; i < tr_field_count; i++) n += tr_fields[i].section == section;
    return n;
}

static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63 || lb > 63) return 1000;
    int row[64];
    for (int j = 0; j <= lb; j++) row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* "did you mean a, b or c?" from close section names (for a bare word) and close fields. */
static void suggestion_hint(const char *key, char *hint, size_t cap) {
    const char *names[MAX_SUGGESTIONS];
    int n = 0;
    if (!strchr(key, '.')) {
        for (int i = 0; i < tr_section_count && n < MAX_SUGGESTIONS; i++)
            if (edit_distance(key, tr_sections[i].name) <= 2) names[n++] = tr_sections[i].name;
    }
    const tr_field *fields[MAX_SUGGESTIONS];
    int nf = tr_field_suggest(key, fields, MAX_SUGGESTIONS);
    for (int i = 0; i < nf && n < MAX_SUGGESTIONS; i++) names[n++] = fields[i]->path;
    if (n == 0) {
        snprintf(hint, cap, "run `run_recipe --help-config` to list every key");
        return;
    }
    size_t used = (size_t)snprintf(hint, cap, "did you mean ");
    for (int i = 0; i < n && used < cap; i++) {
        const char *sep = i == 0 ? "" : i == n - 1 ? " or " : ", ";
        used += (size_t)snprintf(hint + used, cap - used, "%s%s", sep, names[i]);
    }
    if (used < cap) snprintf(hint + used, cap - used, "?");
}

const tr_field *tr_override_shorthand(const char *section) {
    for (size_t i = 0; i < sizeof shorthands / sizeof shorthands[0]; i++)
        if (!strcmp(shorthands[i].section, section)) return tr_field_by_path(shorthands[i].field);
    return NULL;
}

tr_status tr_override_resolve_key(const char *key, const tr_origin *origin, const tr_field **out,
                                  tr_diags *d) {
    *out = tr_field_by_path(key);
    if (*out) return TR_OK;
    *out = tr_override_shorthand(key);
    if (*out) return TR_OK;
    int section = section_index(key);
    if (section >= 0) {
        char hint[256];
        snprintf(hint, sizeof hint,
                 "set its fields one by one (%s.FIELD=VALUE); `run_recipe --help-config %s` "
                 "lists them",
                 key, key);
        tr_diag_add(d, TR_SEV_ERROR, "override.section", origin, key, hint,
                    "'%s' is a section of %d fields and takes no value of its own", key,
                    section_field_count(section));
        return TR_ERR_INVALID;
    }
    char hint[512];
    suggestion_hint(key, hint, sizeof hint);
    tr_diag_add(d, TR_SEV_ERROR, "override.unknown_key", origin, key, hint, "unknown key '%s'",
                key);
    return TR_ERR_INVALID;
}

static bool field_is_null(const tr_config *c, const tr_field *f) {
    const void *p = tr_config_field_cptr(c, f);
    switch (f->type) {
    case TR_T_OBOOL:
        return *(const int8_t *)p < 0;
    case TR_T_OINT:
        return *(const int64_t *)p == TR_NULL_INT;
    case TR_T_OFLOAT:
        return tr_is_null_float(*(const double *)p);
    case TR_T_OSTR:
        return *(char *const *)p == NULL;
    case TR_T_OENUM:
        return *(const int32_t *)p < 0;
    case TR_T_INTLIST:
        return ((const tr_int_list *)p)->null;
    case TR_T_STRLIST:
        return ((const tr_str_list *)p)->null;
    default:
        return false;
    }
}

/* Does the field currently hold the value v means for its type? v is type-checked as if it
 * were being set, so `~train.train_iters=abc` is reported as a type error. */
static tr_status field_holds(const tr_config *c, const tr_field *f, const tr_value *v,
                             const tr_origin *o, tr_diags *d, bool *equal) {
    tr_config *scratch = calloc(1, sizeof *scratch);
    if (!scratch) return TR_ERR_NOMEM;
    tr_status s = tr_config_set(scratch, f, v, o, d);
    if (s == TR_OK) *equal = tr_config_field_equal(c, scratch, f);
    tr_config_free(scratch);
    free(scratch);
    return s;
}

static tr_status apply_reset(tr_config *c, const tr_field *f, const tr_override *o, tr_diags *d) {
    if (o->has_value) {
        bool equal = false;
        TR_TRY(field_holds(c, f, &o->value, &o->origin, d, &equal));
        if (!equal) {
            char now[256], want[256], hint[256];
            tr_config_field_format(c, f, now, sizeof now);
            tr_value_format(&o->value, want, sizeof want);
            snprintf(hint, sizeof hint, "write ~%s without '=VALUE' to reset it whatever it holds",
                     f->path);
            tr_diag_add(d, TR_SEV_ERROR, "override.reset_mismatch", &o->origin, f->path, hint,
                        "~%s=%s: %s is %s, not %s", o->key, want, f->path, now, want);
            return TR_ERR_INVALID;
        }
    }
    return tr_config_restore_recipe(c, f, &o->origin, d);
}

tr_status tr_override_apply(tr_config *c, const tr_override *o, tr_diags *d) {
    const tr_field *f;
    if (tr_blend_key(o->key) && o->op != TR_OVR_RESET && o->op != TR_OVR_ADD)
        return tr_blend_apply(c, o->key, &o->value, &o->origin, d);
    TR_TRY(tr_override_resolve_key(o->key, &o->origin, &f, d));
    if (o->op == TR_OVR_RESET) return apply_reset(c, f, o, d);
    if (!o->has_value) return TR_ERR_INTERNAL;
    if (o->op == TR_OVR_ADD && !field_is_null(c, f)) {
        char now[256], hint[512];
        tr_config_field_format(c, f, now, sizeof now);
        snprintf(hint, sizeof hint,
                 "drop the '+' to override it (%s=...), or write ++%s=... to set it whatever it "
                 "holds",
                 o->key, o->key);
        tr_diag_add(d, TR_SEV_ERROR, "override.add_not_null", &o->origin, f->path, hint,
                    "+%s adds a value only where there is none, but %s is %s", o->key, f->path,
                    now);
        return TR_ERR_INVALID;
    }
    return tr_config_set(c, f, &o->value, &o->origin, d);
}

tr_status tr_overrides_apply_argv(tr_config *c, const char *const *tokens, const int *argi, int n,
                                  tr_diags *d) {
    tr_status result = TR_OK;
    for (int i = 0; i < n; i++) {
        tr_origin origin = tr_origin_make(TR_ORIGIN_CLI, NULL);
        origin.argi = argi ? argi[i] : i;
        tr_override o;
        tr_status s = tr_override_parse(tokens[i], &origin, &o, d);
        if (s == TR_OK) {
            s = tr_override_apply(c, &o, d);
            tr_override_free(&o);
        }
        if (s == TR_ERR_NOMEM || s == TR_ERR_INTERNAL) return s;
        if (s != TR_OK && result == TR_OK) result = s;
    }
    return result;
}
