/* Megatron-Bridge's dataset.blend and dataset.blend_per_split, as its users write them
 * (`dataset.blend=[["prefix_a","prefix_b"],[0.3,0.7]]`, `[["prefix"],null]`), turned into the
 * data_path keys that hold the same blend in Megatron's flat spelling ([w1, p1, w2, p2, ...], or
 * the prefixes alone when unweighted). One conversion for the command line and YAML files. */
#include <stdlib.h>
#include <string.h>

#include "core/field_parse.h"
#include "overrides/overrides.h"

static bool is_null(const tr_value *v) {
    return v->kind == TR_VALUE_NULL ||
           (v->kind == TR_VALUE_SCALAR && !v->quoted && tr_text_is_null(v->text));
}

bool tr_blend_key(const char *path) {
    return path &&
           (strcmp(path, "dataset.blend") == 0 || strcmp(path, "dataset.blend_per_split") == 0);
}

static tr_status shape_error(tr_diags *d, const tr_value *v, const char *key) {
    char got[160];
    tr_value_format(v, got, sizeof got);
    tr_diag_add(d, TR_SEV_ERROR, "override.type", &v->origin, key,
                strcmp(key, "dataset.blend") == 0
                    ? "write [[PREFIX, ...], null] or [[PREFIX, ...], [WEIGHT, ...]]"
                    : "write [TRAIN_BLEND, VALID_BLEND, TEST_BLEND], each [[PREFIX, ...], "
                      "WEIGHTS|null] or null",
                "%s: expected Megatron's blend (prefixes and weights), got %s", key, got);
    return TR_ERR_INVALID;
}

static tr_status push_scalar(tr_value *list, const tr_value *from) {
    tr_value item;
    TR_TRY(tr_value_scalar(&item, from->text, from->quoted, from->origin));
    return tr_value_push(list, NULL, &item);
}

/* One blend ([[prefixes], weights|null]) into `field`; null clears it. */
static tr_status set_blend(tr_config *c, const char *field, const char *key, const tr_value *v,
                           const tr_origin *o, tr_diags *d) {
    const tr_field *f = tr_field_by_path(field);
    if (!f) return TR_ERR_INTERNAL;
    if (is_null(v)) return tr_config_set(c, f, v, o, d);
    if (v->kind != TR_VALUE_LIST || v->n != 2 || v->items[0].kind != TR_VALUE_LIST ||
        v->items[0].n == 0)
        return shape_error(d, v, key);
    const tr_value *paths = &v->items[0], *weights = &v->items[1];
    bool weighted = !is_null(weights);
    if (weighted && (weights->kind != TR_VALUE_LIST || weights->n != paths->n))
        return shape_error(d, v, key);
    tr_value flat = {0};
    flat.kind = TR_VALUE_LIST;
    flat.origin = v->origin;
    tr_status s = TR_OK;
    for (int i = 0; i < paths->n && s == TR_OK; i++) {
        if (paths->items[i].kind != TR_VALUE_SCALAR ||
            (weighted && weights->items[i].kind != TR_VALUE_SCALAR)) {
            s = shape_error(d, v, key);
            break;
        }
        if (weighted) s = push_scalar(&flat, &weights->items[i]);
        if (s == TR_OK) s = push_scalar(&flat, &paths->items[i]);
    }
    if (s == TR_OK) s = tr_config_set(c, f, &flat, o, d);
    tr_value_free(&flat);
    return s;
}

tr_status tr_blend_apply(tr_config *c, const char *path, const tr_value *v, const tr_origin *o,
                         tr_diags *d) {
    if (strcmp(path, "dataset.blend") == 0) return set_blend(c, "dataset.data_path", path, v, o, d);
    static const char *const split_keys[] = {"dataset.train_data_path", "dataset.valid_data_path",
                                             "dataset.test_data_path"};
    if (is_null(v)) {
        for (int i = 0; i < 3; i++) TR_TRY(set_blend(c, split_keys[i], path, v, o, d));
        return TR_OK;
    }
    if (v->kind != TR_VALUE_LIST || v->n != 3) return shape_error(d, v, path);
    for (int i = 0; i < 3; i++) TR_TRY(set_blend(c, split_keys[i], path, &v->items[i], o, d));
    return TR_OK;
}
