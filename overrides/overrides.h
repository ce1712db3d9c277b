/* Overrides: YAML overlay files and Hydra-style KEY=VALUE command-line overrides, both reduced
 * to values with origins and applied through core's field table. Precedence is decided by the
 * caller's order: recipe < YAML files (in order) < CLI (argv order, last wins). */
#ifndef TR_OVERRIDES_H
#define TR_OVERRIDES_H

#include "core/config.h"

typedef enum tr_override_op {
    TR_OVR_SET,   /* a.b=v     : the key must exist */
    TR_OVR_ADD,   /* +a.b=v    : only where the current value is null (Hydra: "append") */
    TR_OVR_FORCE, /* ++a.b=v   : set whatever the current value */
    TR_OVR_RESET  /* ~a.b      : back to the recipe's value; ~a.b=v only if it currently is v */
} tr_override_op;

typedef struct tr_override {
    tr_override_op op;
    char *key;      /* dotted path as written */
    bool has_value; /* false only for a bare ~a.b */
    tr_value value; /* parsed with the Hydra value grammar: null, quoted strings, [lists] */
    tr_origin origin;
} tr_override;

/* Parse one token. origin names argv[i]; errors point at the token and column. */
tr_status tr_override_parse(const char *token, const tr_origin *origin, tr_override *out,
                            tr_diags *d);
void tr_override_free(tr_override *o);
/* Apply a parsed override: unknown keys are errors with did-you-mean suggestions; a section
 * name with a scalar is its shorthand field (mixed_precision=bf16_mixed, peft=lora). */
tr_status tr_override_apply(tr_config *c, const tr_override *o, tr_diags *d);
/* Parse and apply argv-style tokens; tokens[i] came from argv[argi[i]] (argi may be NULL, then
 * argv index i). Every token is tried, so one call reports all bad tokens. */
tr_status tr_overrides_apply_argv(tr_config *c, const char *const *tokens, const int *argi, int n,
                                  tr_diags *d);

/* The field a user-written key names: a dotted path, or a section shorthand (mixed_precision ->
 * mixed_precision.preset, peft -> peft.scheme). Anything else is an error diagnostic at origin:
 * a bare section name says how many fields it has and where to list them; an unknown key gets up
 * to three did-you-mean suggestions, best first. Shared by the CLI, YAML files and --explain. */
/* The field a section shorthand stands for, or NULL when the section has none. */
const tr_field *tr_override_shorthand(const char *section);
tr_status tr_override_resolve_key(const char *key, const tr_origin *origin, const tr_field **out,
                                  tr_diags *d);

/* Megatron-Bridge's dataset.blend / dataset.blend_per_split (overrides/blend.c): not fields of
 * their own but the data_path keys in Megatron's nested spelling. tr_blend_apply writes
 * dataset.data_path, or dataset.train/valid/test_data_path, with origin o. */
bool tr_blend_key(const char *path);
tr_status tr_blend_apply(tr_config *c, const char *path, const tr_value *v, const tr_origin *o,
                         tr_diags *d);

/* YAML: parse a file (or text) into a value tree whose nodes carry file:line:column origins.
 * The file name is interned in c so the origins outlive the parse. */
tr_status tr_yaml_parse_file(tr_config *c, const char *path, tr_value *root, tr_diags *d);
tr_status tr_yaml_parse_text(tr_config *c, const char *text, size_t len, const char *name,
                             tr_value *root, tr_diags *d);
/* Apply a parsed YAML mapping {section: {field: value}}. Unknown sections/keys are errors with
 * suggestions; a `derived:` section (as written by dumps) is recomputed, so it is skipped with
 * a note. Top-level keys listed in skip_keys (NULL-terminated; e.g. "base_recipe") are left to
 * the caller. All errors of the file are reported, not only the first. */
tr_status tr_yaml_apply(tr_config *c, const tr_value *root, const char *const *skip_keys,
                        tr_diags *d);
/* Parse + apply. */
tr_status tr_config_apply_yaml_file(tr_config *c, const char *path, tr_diags *d);

/* Is s[0..n) well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF)? On
 * failure *bad is the offset of the first offending byte. */
bool tr_utf8_valid(const char *s, size_t n, size_t *bad);

/* --explain KEY: the override chain of one field, oldest first (default, provider, recipe,
 * files, CLI, derived), each with its origin. */
tr_status tr_config_explain(const tr_config *c, const char *key, FILE *out, tr_diags *d);

#endif
