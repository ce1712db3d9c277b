/* The ConfigContainer: one struct per section, generated from the field table, so a field is
 * declared exactly once (core/fields/<section>.def). */
#ifndef TR_CONFIG_H
#define TR_CONFIG_H

#include <stdio.h>

#include "core/field.h"

/* Enums used by ENUM/OENUM fields: typedef'd C enums with TR_* constants. */
#define TR_EV(id, name, aliases) id,
#define TR_ENUM(ename, values)   typedef enum { values } tr_##ename##_t;
#include "core/fields/enums.def"
#undef TR_ENUM
#undef TR_EV
#define TR_ENUM(ename, values) extern const tr_enum_def tr_enum_##ename;
#include "core/fields/enums.def"
#undef TR_ENUM

/* Section structs. */
#define TR_SECTION(sec, doc) typedef struct tr_##sec##_config {
#define TR_SECTION_END(sec)                                                                        \
    }                                                                                              \
    tr_##sec##_config;
#define TR_FIELD(T, name, def, spec, unit, flags, doc) TR_CTYPE_##T name;
#include "core/fields/all.def"
#undef TR_SECTION
#undef TR_SECTION_END
#undef TR_FIELD

/* Field ids: TR_FID_model_tensor_model_parallel_size, ... */
#define TR_CAT4_(a, b, c, d) a##b##c##d
#define TR_CAT4(a, b, c, d)  TR_CAT4_(a, b, c, d)
enum tr_field_id {
#define TR_SECTION(sec, doc)
#define TR_SECTION_END(sec)
#define TR_FIELD(T, name, def, spec, unit, flags, doc) TR_CAT4(TR_FID_, TR_SEC, _, name),
#include "core/fields/all.def"
#undef TR_SECTION
#undef TR_SECTION_END
#undef TR_FIELD
    TR_FIELD_COUNT
};

/* One record of --explain: a value a field took, and from where. */
typedef struct tr_history_entry {
    int field;
    tr_origin origin;
    char *value_text;
} tr_history_entry;

typedef struct tr_config {
#define TR_SECTION(sec, doc) tr_##sec##_config sec;
#define TR_SECTION_END(sec)
#define TR_FIELD(T, name, def, spec, unit, flags, doc)
#include "core/fields/all.def"
#undef TR_SECTION
#undef TR_SECTION_END
#undef TR_FIELD

    /* Bookkeeping, not configuration. */
    tr_origin origin[TR_FIELD_COUNT]; /* where each field's current value came from */
    tr_history_entry *history;        /* every value each field took, in order */
    int n_history, cap_history;
    char **interned; /* file names and other strings origins point to */
    int n_interned, cap_interned;
    const char *recipe_name;           /* static string of the recipe that filled it, or NULL */
    struct tr_config *recipe_snapshot; /* values right after the recipe, for `~key` */
    bool finalized;
    bool no_history; /* tr_config_drop_history: values change without history entries */
} tr_config;

/* Lifecycle. init fills every field with its table default. */
tr_status tr_config_init(tr_config *c, tr_diags *d);
void tr_config_free(tr_config *c);
tr_status tr_config_copy(tr_config *dst, const tr_config *src); /* deep; history included */
/* Forget c's history and recipe snapshot and keep no more history (--explain and `~key` no
 * longer answer on it or its copies; values and origins stay as ever): for scratch copies that
 * are only finalized and validated, which read neither, so that copying them (and finalize's own
 * copy and record of its changes) is cheap. */
void tr_config_drop_history(tr_config *c);
/* Give c (a copy of `from`, or one reset to it before) the values, origins and flags of `from`
 * again, copying only the fields that differ: a scratch config reused for many variations of one
 * base. Neither may hold history (tr_config_drop_history) or a recipe snapshot. */
tr_status tr_config_reset_to(tr_config *c, const tr_config *from);
/* The same for the fields fids[0..n) alone (values and origins; the flags as reset_to sets them):
 * for a caller that knows which fields can differ (the planner's search: its overrides and what
 * finalize changed). */
tr_status tr_config_reset_fields(tr_config *c, const tr_config *from, const int *fids, int n);

/* Address of a field's storage inside c. */
void *tr_config_field_ptr(tr_config *c, const tr_field *f);
const void *tr_config_field_cptr(const tr_config *c, const tr_field *f);

/* Set a field from an untyped value (YAML/CLI), with type checking against the table. Errors name
 * the key, the value, the expected type and the origin. Records origin and history. */
tr_status tr_config_set(tr_config *c, const tr_field *f, const tr_value *v, const tr_origin *o,
                        tr_diags *d);
/* Convenience: parse text as if it came from the CLI. */
tr_status tr_config_set_text(tr_config *c, const char *path, const char *text, const tr_origin *o,
                             tr_diags *d);
/* Restore a field to the value it had right after the recipe (`~key`). */
tr_status tr_config_restore_recipe(tr_config *c, const tr_field *f, const tr_origin *o,
                                   tr_diags *d);
/* Typed setters for C code (recipes, providers, finalize) that keep strings owned correctly. */
tr_status tr_config_set_str(tr_config *c, int field, const char *s);
tr_status tr_config_set_strlist(tr_config *c, int field, const char *const *items, int n);
tr_status tr_config_set_intlist(tr_config *c, int field, const int64_t *items, int n);

/* After a provider/recipe/finalize wrote the struct directly: every field that differs from
 * `before` gets origin o and a history entry. */
tr_status tr_config_mark_changes(tr_config *c, const tr_config *before, const tr_origin *o);
/* The same, also listing the changed fields' ids in changed[0..cap) (NULL: not listed); *n gets
 * how many changed, which may exceed cap. */
tr_status tr_config_mark_changes_listed(tr_config *c, const tr_config *before, const tr_origin *o,
                                        int *changed, int cap, int *n);
/* Take a snapshot used by `~key` (call once, right after the recipe). */
tr_status tr_config_snapshot_recipe(tr_config *c);

/* Compare / format one field. */
bool tr_config_field_equal(const tr_config *a, const tr_config *b, const tr_field *f);
/* YAML flow text of a field's value ("null", "8", "3.0e-4", "\"a b\"", "[1, 2]"). */
void tr_config_field_format(const tr_config *c, const tr_field *f, char *buf, size_t cap);

/* Intern a string for the life of c (file names for origins). */
const char *tr_config_intern(tr_config *c, const char *s);

/* Canonical YAML dump of every field (the resolved config), and its xxHash3-64 fingerprint. */
tr_status tr_config_dump_yaml(const tr_config *c, FILE *out);
char *tr_config_dump_yaml_string(const tr_config *c); /* malloc'd; NULL on OOM */
uint64_t tr_config_fingerprint(const tr_config *c);

#endif
