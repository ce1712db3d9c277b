/* The field table: the single source of truth for every configuration field.
 *
 * Each section's fields live in core/fields/<section>.def as lines of
 *
 *   TR_FIELD(TYPE, name, "default", spec, "unit", flags, "doc")
 *
 * and those lines generate the C struct of the section (core/config.h), the table below (names,
 * types, offsets, defaults, docs, allowed values), and through the table the defaults, lookup by
 * dotted path, parsing, YAML dump, docs/config-reference.md, --help-config and the fingerprint.
 *
 * TYPE and its C type / spec:
 *   BOOL     bool      spec 0
 *   OBOOL    int8_t    spec 0              (-1 = null)
 *   INT      int64_t   spec "lo..hi"       ("1..", "0..2", "" = any)
 *   OINT     int64_t   spec as INT         (TR_NULL_INT = null)
 *   FLOAT    double    spec "lo..hi"       ("0..", "0..1", "")
 *   OFLOAT   double    spec as FLOAT       (tr_null_float() = null, test with tr_is_null_float)
 *   STR      char *    spec 0              (never NULL after init)
 *   OSTR     char *    spec 0              (NULL = null)
 *   ENUM     int32_t   spec enum name      (index into the enum's values, see enums.def)
 *   OENUM    int32_t   spec enum name      (-1 = null)
 *   INTLIST  tr_int_list  spec as INT for each element (null allowed: .null = true)
 *   STRLIST  tr_str_list  spec 0            (null allowed: .null = true)
 * The default is always a string parsed by the same parser that reads YAML and the CLI.
 * flags: 0 or an OR of TR_F_* below.
 */
#ifndef TR_FIELD_H
#define TR_FIELD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"
#include "core/value.h"

#define TR_NULL_INT INT64_MIN

typedef struct tr_int_list {
    int64_t *v;
    int32_t n;
    bool null;
} tr_int_list;

typedef struct tr_str_list {
    char **v;
    int32_t n;
    bool null;
} tr_str_list;

/* C types of the field kinds (used by the generated structs). */
#define TR_CTYPE_BOOL    bool
#define TR_CTYPE_OBOOL   int8_t
#define TR_CTYPE_INT     int64_t
#define TR_CTYPE_OINT    int64_t
#define TR_CTYPE_FLOAT   double
#define TR_CTYPE_OFLOAT  double
#define TR_CTYPE_STR     char *
#define TR_CTYPE_OSTR    char *
#define TR_CTYPE_ENUM    int32_t
#define TR_CTYPE_OENUM   int32_t
#define TR_CTYPE_INTLIST tr_int_list
#define TR_CTYPE_STRLIST tr_str_list

typedef enum tr_field_type {
    TR_T_BOOL,
    TR_T_OBOOL,
    TR_T_INT,
    TR_T_OINT,
    TR_T_FLOAT,
    TR_T_OFLOAT,
    TR_T_STR,
    TR_T_OSTR,
    TR_T_ENUM,
    TR_T_OENUM,
    TR_T_INTLIST,
    TR_T_STRLIST
} tr_field_type;

enum tr_field_flags {
    TR_F_DERIVED = 1u << 0,    /* computed by finalize(); cannot be overridden */
    TR_F_LAUNCH = 1u << 1,     /* names something only a real launch has (a file, a checkpoint) */
    TR_F_DEPRECATED = 1u << 2, /* accepted for Megatron compatibility; doc says what replaces it */
    /* A parameter of a feature the runtime has not built (MoE, MLA, MTP, YaRN, context
     * parallelism, some tokenizers): it matters only while that feature is on, and a run that
     * turns the feature on is refused. Set alone, it changes nothing, as in Megatron. */
    TR_F_UNBUILT = 1u << 3,
    /* Honouring it would change only speed, memory, logging or how the same maths is scheduled
     * (fusions, recomputation, TP overlap, CUDA graphs, profilers), and this runtime has no code
     * for it on any backend: the results are those of the default. A run that sets it gets the
     * note config.no_effect (core/rules/effects.c). */
    TR_F_NO_EFFECT = 1u << 4
};

/* One value of an enum: canonical name plus '|'-separated aliases accepted on input. */
typedef struct tr_enum_value {
    const char *name;
    const char *aliases;
} tr_enum_value;

typedef struct tr_enum_def {
    const char *name;
    const tr_enum_value *values;
    int n;
} tr_enum_def;

typedef struct tr_section_def {
    const char *name;
    const char *doc;
    int first, count; /* the section's fields are tr_fields[first .. first + count) */
} tr_section_def;

typedef struct tr_field {
    int id;           /* index in the table == TR_FIELD_<section>_<name> */
    int section;      /* index in tr_sections */
    const char *path; /* "model.tensor_model_parallel_size" */
    const char *name; /* "tensor_model_parallel_size" */
    tr_field_type type;
    size_t offset;          /* into tr_config */
    const char *def;        /* default, as text */
    const char *range;      /* numeric range spec for INT/OINT/FLOAT/OFLOAT/INTLIST, else NULL */
    const tr_enum_def *enm; /* ENUM/OENUM */
    const char *unit;
    unsigned flags;
    const char *doc;
} tr_field;

/* The whole table, in section order then file order. */
extern const tr_field tr_fields[];
extern const int tr_field_count;
extern const tr_section_def tr_sections[];
extern const int tr_section_count;

const tr_field *tr_field_by_path(const char *dotted);
/* Up to max suggestions for a mistyped path, best first; returns how many. */
int tr_field_suggest(const char *dotted, const tr_field **out, int max);
const char *tr_field_type_name(const tr_field *f); /* "int >= 1", "one of LayerNorm|RMSNorm", ... */
bool tr_field_is_nullable(const tr_field *f);

static inline double tr_null_float(void) {
    union {
        uint64_t u;
        double d;
    } x = {0x7ff8dead00000000ull}; /* a NaN payload no arithmetic produces */
    return x.d;
}
static inline bool tr_is_null_float(double d) {
    union {
        double d;
        uint64_t u;
    } x = {d};
    return x.u == 0x7ff8dead00000000ull;
}

#endif
