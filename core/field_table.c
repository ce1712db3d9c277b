/* The field table, generated from the section files under core/fields, and lookups over it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"

/* Enum value tables. */
#define TR_EV(id, name, aliases) {name, aliases},
#define TR_ENUM(ename, values)                                                                     \
    static const tr_enum_value tr_enum_values_##ename[] = {values};                                \
    const tr_enum_def tr_enum_##ename = {                                                          \
        #ename, tr_enum_values_##ename,                                                            \
        (int)(sizeof tr_enum_values_##ename / sizeof tr_enum_values_##ename[0])};
#include "core/fields/enums.def"
#undef TR_ENUM
#undef TR_EV

/* Section ids, in all.def order. */
enum {
#define TR_SECTION(sec, doc) TR_SECID_##sec,
#define TR_SECTION_END(sec)
#define TR_FIELD(T, name, def, spec, unit, flags, doc)
#include "core/fields/all.def"
#undef TR_SECTION
#undef TR_SECTION_END
#undef TR_FIELD
    TR_SECID_COUNT
};

/* Fields per section: each field line expands to "+ 1". */
enum {
#define TR_SECTION(sec, doc)                           TR_SECCOUNT_##sec = 0
#define TR_SECTION_END(sec)                            ,
#define TR_FIELD(T, name, def, spec, unit, flags, doc) +1
#include "core/fields/all.def"
#undef TR_SECTION
#undef TR_SECTION_END
#undef TR_FIELD
};

/* First field of each section: an enumerator per section that takes the next field id without
 * using it up (the one after it steps back by one), followed by one enumerator per field. */
enum {
#define TR_SECTION(sec, doc) TR_SECFIRST_##sec, TR_SECBACK_##sec = TR_SECFIRST_##sec - 1,
#define TR_SECTION_END(sec)
#define TR_FIELD(T, name, def, spec, unit, flags, doc) TR_CAT4(TR_IDX_, TR_SEC, _, name),
#include "core/fields/all.def"
#undef TR_SECTION
#undef TR_SECTION_END
#undef TR_FIELD
};

const tr_section_def tr_sections[] = {
#define TR_SECTION(sec, doc) {#sec, doc, TR_SECFIRST_##sec, TR_SECCOUNT_##sec},
#define TR_SECTION_END(sec)
#define TR_FIELD(T, name, def, spec, unit, flags, doc)
#include "core/fields/all.def"
#undef TR_SECTION
#undef TR_SECTION_END
#undef TR_FIELD
};
const int tr_section_count = TR_SECID_COUNT;

/* The spec column means a numeric range for numeric types and an enum name for enum types. */
#define TR_RANGE_BOOL(s)      NULL
#define TR_RANGE_OBOOL(s)     NULL
#define TR_RANGE_INT(s)       s
#define TR_RANGE_OINT(s)      s
#define TR_RANGE_FLOAT(s)     s
#define TR_RANGE_OFLOAT(s)    s
#define TR_RANGE_STR(s)       NULL
#define TR_RANGE_OSTR(s)      NULL
#define TR_RANGE_ENUM(s)      NULL
#define TR_RANGE_OENUM(s)     NULL
#define TR_RANGE_INTLIST(s)   s
#define TR_RANGE_STRLIST(s)   NULL
#define TR_ENUMREF_BOOL(s)    NULL
#define TR_ENUMREF_OBOOL(s)   NULL
#define TR_ENUMREF_INT(s)     NULL
#define TR_ENUMREF_OINT(s)    NULL
#define TR_ENUMREF_FLOAT(s)   NULL
#define TR_ENUMREF_OFLOAT(s)  NULL
#define TR_ENUMREF_STR(s)     NULL
#define TR_ENUMREF_OSTR(s)    NULL
#define TR_ENUMREF_ENUM(s)    &tr_enum_##s
#define TR_ENUMREF_OENUM(s)   &tr_enum_##s
#define TR_ENUMREF_INTLIST(s) NULL
#define TR_ENUMREF_STRLIST(s) NULL

#define TR_STR_(x)        #x
#define TR_STR(x)         TR_STR_(x)
#define TR_CAT3_(a, b, c) a##b##c
#define TR_CAT3(a, b, c)  TR_CAT3_(a, b, c)

const tr_field tr_fields[] = {
#define TR_SECTION(sec, doc)
#define TR_SECTION_END(sec)
#define TR_FIELD(T, fname, def, spec, unit, flags, doc)                                            \
    {TR_CAT4(TR_FID_, TR_SEC, _, fname),                                                           \
     TR_CAT3(TR_SECID_, TR_SEC, ),                                                                 \
     TR_STR(TR_SEC) "." #fname,                                                                    \
     #fname,                                                                                       \
     TR_T_##T,                                                                                     \
     offsetof(tr_config, TR_SEC.fname),                                                            \
     def,                                                                                          \
     TR_RANGE_##T(spec),                                                                           \
     TR_ENUMREF_##T(spec),                                                                         \
     unit,                                                                                         \
     flags,                                                                                        \
     doc},
#include "core/fields/all.def"
#undef TR_SECTION
#undef TR_SECTION_END
#undef TR_FIELD
};
const int tr_field_count = TR_FIELD_COUNT;

_Static_assert(sizeof tr_fields / sizeof tr_fields[0] == TR_FIELD_COUNT, "field table size");

/* Other spellings of a field: megatron-core's dataset configs call the sample length
 * sequence_length where Megatron-Bridge writes seq_length. */
static const struct {
    const char *alias, *path;
} FIELD_ALIASES[] = {{"dataset.sequence_length", "dataset.seq_length"}};

static const tr_field *field_by_path(const char *dotted);

const tr_field *tr_field_by_path(const char *dotted) {
    const tr_field *f = field_by_path(dotted);
    for (size_t i = 0; !f && dotted && i < sizeof FIELD_ALIASES / sizeof *FIELD_ALIASES; i++)
        if (strcmp(dotted, FIELD_ALIASES[i].alias) == 0) f = field_by_path(FIELD_ALIASES[i].path);
    return f;
}

static const tr_field *field_by_path(const char *dotted) {
    if (!dotted) return NULL;
    /* Find the section by the text before the first '.', then scan only its fields. */
    const char *dot = strchr(dotted, '.');
    if (!dot) return NULL;
    size_t len = (size_t)(dot - dotted);
    for (int s = 0; s < tr_section_count; s++) {
        const tr_section_def *sec = &tr_sections[s];
        if (strncmp(sec->name, dotted, len) != 0 || sec->name[len] != '\0') continue;
        for (int i = sec->first; i < sec->first + sec->count; i++)
            if (dot[1] == tr_fields[i].name[0] && strcmp(dot + 1, tr_fields[i].name) == 0)
                return &tr_fields[i];
        return NULL;
    }
    return NULL;
}

bool tr_field_is_nullable(const tr_field *f) {
    switch (f->type) {
    case TR_T_OBOOL:
    case TR_T_OINT:
    case TR_T_OFLOAT:
    case TR_T_OSTR:
    case TR_T_OENUM:
    case TR_T_INTLIST:
    case TR_T_STRLIST:
        return true;
    default:
        return false;
    }
}

static int levenshtein(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 127 || lb > 127) return 1000;
    int prev[128], cur[128];
    for (int j = 0; j <= lb; j++) prev[j] = j;
    for (int i = 1; i <= la; i++) {
        cur[0] = i;
        for (int j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
    }
    return prev[lb];
}

int tr_field_suggest(const char *dotted, const tr_field **out, int max) {
    /* Score: a field with the same leaf name in another section is the likeliest fix
     * (train.lr -> optimizer.lr); otherwise edit distance on the whole path and on the leaf. */
    const char *leaf = strrchr(dotted, '.');
    leaf = leaf ? leaf + 1 : dotted;
    int limit = (int)strlen(dotted) / 4;
    if (limit < 2) limit = 2;
    int best_score[8];
    int n = 0;
    if (max > 8) max = 8;
    for (int i = 0; i < tr_field_count; i++) {
        const tr_field *f = &tr_fields[i];
        /* Edit distance is at least the length difference: skip the quadratic work when
         * that alone is over the limit (most fields, for any one key). */
        int d_full = abs((int)strlen(dotted) - (int)strlen(f->path));
        int d_leaf = abs((int)strlen(leaf) - (int)strlen(f->name));
        int s_full = d_full <= limit ? levenshtein(dotted, f->path) * 2 : 1000;
        int s_leaf = strcmp(leaf, f->name) == 0 ? 1
                     : d_leaf <= limit          ? levenshtein(leaf, f->name) * 2 + 1
                                                : 1000;
        int s = s_full < s_leaf ? s_full : s_leaf;
        if (s > limit * 2) continue;
        int pos = n;
        while (pos > 0 && best_score[pos - 1] > s) pos--;
        if (pos >= max) continue;
        int last = n < max ? n : max - 1;
        for (int k = last; k > pos; k--) {
            out[k] = out[k - 1];
            best_score[k] = best_score[k - 1];
        }
        out[pos] = f;
        best_score[pos] = s;
        if (n < max) n++;
    }
    return n;
}

const char *tr_field_type_name(const tr_field *f) {
    switch (f->type) {
    case TR_T_BOOL:
        return "bool";
    case TR_T_OBOOL:
        return "bool or null";
    case TR_T_INT:
        return "int";
    case TR_T_OINT:
        return "int or null";
    case TR_T_FLOAT:
        return "float";
    case TR_T_OFLOAT:
        return "float or null";
    case TR_T_STR:
        return "string";
    case TR_T_OSTR:
        return "string or null";
    case TR_T_ENUM:
        return "enum";
    case TR_T_OENUM:
        return "enum or null";
    case TR_T_INTLIST:
        return "list of int";
    case TR_T_STRLIST:
        return "list of string";
    }
    return "?";
}
