/* Helpers for writing validation rules (the files of core/rules/). A rule's check reads the
 * finalized config and reports each violation through TR_FAIL, which fills the rule id, severity,
 * the origin of the first key named, and turns launch-only rules into notes in catalog mode. */
#ifndef TR_CORE_RULES_RULE_H
#define TR_CORE_RULES_RULE_H

#include "core/config_query.h"
#include "core/validate.h"

#define TR_RULE_FN(name)                                                                           \
    void name(const tr_config *c, const tr_validate_opts *opts, const tr_rule *self, tr_diags *d)

/* keys: comma-separated dotted keys, the first one locating the problem; hint may be NULL. */
void tr_rule_fail(const tr_rule *self, const tr_config *c, const tr_validate_opts *opts,
                  tr_diags *d, const char *keys, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* Only usable inside a TR_RULE_FN body. */
#define TR_FAIL(keys, hint, ...) tr_rule_fail(self, c, opts, d, keys, hint, __VA_ARGS__)

#endif
