#include "core/field_parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool tr_text_is_null(const char *s) {
    return !s || !*s || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL") ||
           !strcmp(s, "~") || !strcmp(s, "None");
}

bool tr_parse_bool(const char *s, bool *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) return *out = true, true;
        if (!strcasecmp(s, no[i])) return *out = false, true;
    }
    return false;
}

bool tr_parse_int(const char *s, int64_t *out) {
    if (!s || !*s || isspace((unsigned char)*s)) return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

bool tr_parse_float(const char *s, double *out) {
    if (!s || !*s || isspace((unsigned char)*s)) return false;
    const char *p = s;
    int sign = 1;
    if (*p == '+' || *p == '-') sign = *p++ == '-' ? -1 : 1;
    /* YAML spells infinity .inf and NaN .nan; Python prints inf and nan. */
    if (!strcasecmp(p, ".inf") || !strcasecmp(p, "inf") || !strcasecmp(p, "infinity"))
        return *out = sign * INFINITY, true;
    if (!strcasecmp(p, ".nan") || !strcasecmp(p, "nan")) return *out = NAN, true;
    /* strtod also reads hexadecimal ("0x10"): numbers in configs are decimal only. */
    if (strpbrk(p, "xX")) return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (*end || (errno == ERANGE && fabs(v) > 1.0)) return false;
    if (isinf(v) || isnan(v)) return false; /* only the explicit spellings above */
    *out = v;
    return true;
}

int tr_enum_lookup(const tr_enum_def *e, const char *s) {
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < e->n; i++) {
            int (*cmp)(const char *, const char *) = pass ? strcasecmp : strcmp;
            if (!cmp(s, e->values[i].name)) return i;
            const char *a = e->values[i].aliases;
            while (a && *a) {
                const char *bar = strchr(a, '|');
                size_t len = bar ? (size_t)(bar - a) : strlen(a);
                if (strlen(s) == len && (pass ? strncasecmp(s, a, len) : strncmp(s, a, len)) == 0)
                    return i;
                a += len + (bar ? 1 : 0);
            }
        }
    }
    return -1;
}

void tr_enum_names(const tr_enum_def *e, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < e->n && used < cap; i++) {
        int k = snprintf(buf + used, cap - used, "%s%s", i ? "|" : "", e->values[i].name);
        if (k < 0) break;
        used += (size_t)k;
    }
}

bool tr_range_check(const char *spec, double x, char *why, size_t cap) {
    if (!spec || !*spec || !strstr(spec, "..")) spec = "";
    const char *dots = strstr(spec, "..");
    if (!dots) {
        if (isfinite(x)) return true;
        if (why) snprintf(why, cap, "a finite number");
        return false;
    }
    char lo_s[64] = "", hi_s[64] = "";
    snprintf(lo_s, sizeof lo_s, "%.*s", (int)(dots - spec), spec);
    snprintf(hi_s, sizeof hi_s, "%s", dots + 2);
    double lo, hi;
    bool has_lo = *lo_s && tr_parse_float(lo_s, &lo);
    bool has_hi = *hi_s && tr_parse_float(hi_s, &hi);
    /* NaN compares false with every bound, and infinity is a value only where the range names
     * it ("0..inf"): a field that must be finite says so by having finite bounds or none. */
    bool ok = !isnan(x) && (isfinite(x) || (has_lo && x == lo) || (has_hi && x == hi));
    if (!ok) {
        if (why) snprintf(why, cap, "a finite number%s%s", *spec ? " in " : "", spec);
        return false;
    }
    ok = (!has_lo || x >= lo) && (!has_hi || x <= hi);
    if (!ok && why) {
        if (has_lo && has_hi)
            snprintf(why, cap, "between %s and %s", lo_s, hi_s);
        else if (has_lo)
            snprintf(why, cap, ">= %s", lo_s);
        else
            snprintf(why, cap, "<= %s", hi_s);
    }
    return ok;
}

void tr_format_float(double x, char *buf, size_t cap) {
    if (isinf(x)) {
        snprintf(buf, cap, "%s", x > 0 ? "inf" : "-inf");
        return;
    }
    if (isnan(x)) {
        snprintf(buf, cap, "nan");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) break;
    }
    /* Keep a float recognisable as one in the dump: "1" -> "1.0". */
    if (!strpbrk(buf, ".eEn")) {
        size_t len = strlen(buf);
        if (len + 3 <= cap) memcpy(buf + len, ".0", 3);
    }
}

static bool needs_quotes(const char *s) {
    if (!*s) return true;
    if (tr_text_is_null(s)) return true;
    bool b;
    double d;
    if (tr_parse_bool(s, &b) || tr_parse_float(s, &d)) return true;
    if (isspace((unsigned char)s[0]) || isspace((unsigned char)s[strlen(s) - 1])) return true;
    if (strchr("-?:,[]{}#&*!|>'\"%@`", s[0])) return true;
    if (strstr(s, "${")) return true;
    for (const char *p = s; *p; p++) {
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f || *p == '"' || *p == '\\')
            return true;
        if ((*p == ':' || *p == '#') &&
            (p[1] == ' ' || p[1] == '\0' || (*p == '#' && p > s && p[-1] == ' ')))
            return true;
        if (*p == ',' || *p == '[' || *p == ']' || *p == '{' || *p == '}') return true;
    }
    return false;
}

void tr_format_string(const char *s, char *buf, size_t cap) {
    if (cap == 0) return;
    if (!needs_quotes(s)) {
        snprintf(buf, cap, "%s", s);
        return;
    }
    size_t o = 0;
#define EMIT(c)                                                                                    \
    do {                                                                                           \
        if (o + 1 < cap) buf[o++] = (c);                                                           \
    } while (0)
    EMIT('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[16] = "";
        if (*p == '"' || *p == '\\') {
            snprintf(esc, sizeof esc, "\\%c", *p);
        } else if (*p == '\n') {
            snprintf(esc, sizeof esc, "\\n");
        } else if (*p == '\t') {
            snprintf(esc, sizeof esc, "\\t");
        } else if (*p < 0x20 || *p == 0x7f) {
            /* YAML forbids raw control characters, DEL included. */
            snprintf(esc, sizeof esc, "\\x%02x", *p);
        } else if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            /* C1 controls (U+0080..U+009F, NEL among them) are line breaks or forbidden. */
            snprintf(esc, sizeof esc, "\\u%04x", p[1]);
            p++;
        } else if (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) {
            /* U+2028/U+2029 are YAML line breaks: keep them from folding the scalar. */
            snprintf(esc, sizeof esc, "\\u%04x", 0x2000 + (p[2] - 0x80));
            p += 2;
        } else if (p[0] == '$' && p[1] == '{') {
            /* The overlay reads "${" as an interpolation and "\${" as a literal "${". */
            snprintf(esc, sizeof esc, "\\\\$");
        }
        if (esc[0]) {
            for (char *e = esc; *e; e++) EMIT(*e);
        } else {
            EMIT((char)*p);
        }
    }
    EMIT('"');
#undef EMIT
    buf[o] = '\0';
}
