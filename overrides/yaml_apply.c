/* Applying a parsed YAML override file: {section: {field: value}}, dotted keys at any level,
 * every error of the file reported before giving up. */
#include <stdlib.h>
#include <string.h>

#include "core/field_parse.h"
#include "overrides/overrides.h"

static bool is_section(const char *name) {
    for (int i = 0; i < tr_section_count; i++)
        if (!strcmp(tr_sections[i].name, name)) return true;
    return false;
}

static bool is_fatal(tr_status s) {
    return s == TR_ERR_NOMEM || s == TR_ERR_INTERNAL;
}

static tr_status apply_path(tr_config *c, const char *path, const tr_value *v, tr_diags *d);

static tr_status apply_entries(tr_config *c, const char *prefix, const tr_value *map, tr_diags *d) {
    tr_status result = TR_OK;
    for (int i = 0; i < map->n; i++) {
        size_t need = strlen(prefix) + strlen(map->keys[i]) + 2;
        char *path = malloc(need);
        if (!path) return TR_ERR_NOMEM;
        snprintf(path, need, "%s.%s", prefix, map->keys[i]);
        tr_status s = apply_path(c, path, &map->items[i], d);
        free(path);
        if (is_fatal(s)) return s;
        if (s != TR_OK) result = TR_ERR_INVALID;
    }
    return result;
}

static tr_status apply_path(tr_config *c, const char *path, const tr_value *v, tr_diags *d) {
    /* Hydra configs name the class of every section; Trestle's sections are fixed. */
    const char *last = strrchr(path, '.');
    if (strcmp(last ? last + 1 : path, "_target_") == 0) {
        char got[160];
        tr_value_format(v, got, sizeof got);
        tr_diag_add(d, TR_SEV_NOTE, "override.yaml_target", &v->origin, NULL, NULL,
                    "%s: %s ignored: Hydra's class selector; the section's keys still apply", path,
                    got);
        return TR_OK;
    }
    if (tr_blend_key(path)) return tr_blend_apply(c, path, v, &v->origin, d);
    const tr_field *f = tr_field_by_path(path);
    if (f && v->kind == TR_VALUE_MAP) {
        char hint[300];
        snprintf(hint, sizeof hint, "give %s one value (%s), e.g. `%s: VALUE`", f->path,
                 tr_field_type_name(f), f->name);
        tr_diag_add(d, TR_SEV_ERROR, "override.yaml_mapping", &v->origin, f->path, hint,
                    "%s takes a single value, but the file gives it a mapping", f->path);
        return TR_ERR_INVALID;
    }
    if (f) return tr_config_set(c, f, v, &v->origin, d);
    bool top = strchr(path, '.') == NULL;
    if (v->kind == TR_VALUE_MAP && ((top && is_section(path)) || !top))
        return apply_entries(c, path, v, d);
    /* `model:` with every line under it commented out is an empty section, not a value. */
    bool null = v->kind == TR_VALUE_NULL ||
                (v->kind == TR_VALUE_SCALAR && !v->quoted && tr_text_is_null(v->text));
    if (top && null && is_section(path) && !tr_override_shorthand(path)) return TR_OK;
    TR_TRY(tr_override_resolve_key(path, &v->origin, &f, d));
    return tr_config_set(c, f, v, &v->origin, d);
}

tr_status tr_yaml_apply(tr_config *c, const tr_value *root, const char *const *skip_keys,
                        tr_diags *d) {
    if (root->kind != TR_VALUE_MAP) {
        const char *got = root->kind == TR_VALUE_LIST ? "a list" : "a single value";
        tr_diag_add(d, TR_SEV_ERROR, "override.yaml_top_level", &root->origin, NULL,
                    "write sections at the top level, e.g. `train: {train_iters: 100}`",
                    "the top level of an override file must be a mapping of sections, not %s", got);
        return TR_ERR_INVALID;
    }
    tr_status result = TR_OK;
    for (int i = 0; i < root->n; i++) {
        const char *key = root->keys[i];
        bool skip = false;
        for (const char *const *k = skip_keys; k && *k && !skip; k++) skip = !strcmp(*k, key);
        if (skip) continue;
        if (!strcmp(key, "derived")) {
            tr_diag_add(d, TR_SEV_NOTE, "override.yaml_derived", &root->items[i].origin, "derived",
                        NULL,
                        "the derived: section (written by config dumps) is recomputed by "
                        "finalize(), so it was skipped");
            continue;
        }
        tr_status s = apply_path(c, key, &root->items[i], d);
        if (is_fatal(s)) return s;
        if (s != TR_OK) result = TR_ERR_INVALID;
    }
    return result;
}

tr_status tr_config_apply_yaml_file(tr_config *c, const char *path, tr_diags *d) {
    tr_value root;
    tr_status parsed = tr_yaml_parse_file(c, path, &root, d);
    tr_status applied = TR_OK;
    /* Errors such as a duplicate key leave the rest of the tree usable: apply it so that one
     * run reports every problem of the file. */
    if (parsed == TR_OK || (parsed == TR_ERR_INVALID && root.kind == TR_VALUE_MAP))
        applied = tr_yaml_apply(c, &root, NULL, d);
    tr_value_free(&root);
    if (parsed != TR_OK) return is_fatal(applied) ? applied : parsed;
    return applied;
}
