/* Scalar parsing and formatting shared by the config setters, YAML and the CLI. */
#ifndef TR_FIELD_PARSE_H
#define TR_FIELD_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/field.h"

bool tr_parse_bool(const char *s, bool *out);
bool tr_parse_int(const char *s, int64_t *out);
bool tr_parse_float(const char *s, double *out);
/* Unquoted spellings of null in YAML and Hydra: null, Null, NULL, ~, None, empty. */
bool tr_text_is_null(const char *s);
/* Index of the enum value named s (canonical or alias; exact, then case-insensitive), or -1. */
int tr_enum_lookup(const tr_enum_def *e, const char *s);
/* "a|b|c" of canonical names, for messages. */
void tr_enum_names(const tr_enum_def *e, char *buf, size_t cap);

/* Check a number against a range spec "lo..hi" ("1..", "..8", "0..1", "" = any). NaN never
 * passes, an infinity only where a bound names it ("0..inf"). On failure always writes a phrase
 * such as ">= 1" or "a finite number in 0.." into why. */
bool tr_range_check(const char *spec, double x, char *why, size_t cap);

/* Shortest text that reads back as the same double ("0.0003", "1e-05", "inf"). */
void tr_format_float(double x, char *buf, size_t cap);
/* A YAML scalar for a string: bare when safe, else double-quoted with escapes. */
void tr_format_string(const char *s, char *buf, size_t cap);

#endif
