/* How a rule reports a violation (core/rules/rule.h): the message, the key to blame and the
 * catalog-mode downgrade of rules about launch inputs. */
#include <stdarg.h>

#include "core/rules/rule.h"

static int origin_rank(tr_origin_kind kind) {
    switch (kind) {
    case TR_ORIGIN_CLI:
        return 6;
    case TR_ORIGIN_FILE:
        return 5;
    case TR_ORIGIN_API:
        return 4;
    case TR_ORIGIN_RECIPE:
        return 3;
    case TR_ORIGIN_PROVIDER:
        return 2;
    case TR_ORIGIN_DEFAULT:
        return 1;
    case TR_ORIGIN_DERIVED:
        return 0;
    }
    return 0;
}

bool tr_rule_is_capability(const tr_rule *r) {
    return strncmp(r->id, "runtime.", 8) == 0;
}

void tr_rule_fail(const tr_rule *self, const tr_config *c, const tr_validate_opts *opts,
                  tr_diags *d, const char *keys, const char *hint, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Point at the key the user touched last: an override on the command line beats a YAML
     * file, which beats the recipe, the provider and the defaults; derived values come last
     * because nobody typed them. Ties keep the first key listed. */
    const tr_origin *origin = NULL;
    int best = -1;
    for (const char *k = keys; k && *k;) {
        size_t n = strcspn(k, ",");
        char key[160];
        if (n < sizeof key) {
            memcpy(key, k, n);
            key[n] = 0;
            const tr_field *f = tr_field_by_path(key);
            if (f) {
                int r = origin_rank(c->origin[f->id].kind);
                if (r > best) best = r, origin = &c->origin[f->id];
            }
        }
        k += n + (k[n] == ',');
    }
    tr_severity sev = self->severity;
    const char *id = self->id;
    char launch_id[160];
    if (self->launch_input && (opts->catalog_mode || opts->defer_launch_inputs)) {
        /* A catalog entry cannot know the files of a real launch: say what a launch must
         * supply without failing the entry. */
        sev = TR_SEV_NOTE;
        id = TR_FMT(launch_id, "launch.%s", self->id);
    }
    /* A recipe this runtime cannot train yet is still a valid configuration: the catalog lists
     * the refusal under the rule's own id without failing the entry. */
    if (opts->catalog_mode && tr_rule_is_capability(self) && sev == TR_SEV_ERROR) sev = TR_SEV_NOTE;
    tr_diag_add(d, sev, id, origin, keys, hint, "%s", msg);
}
