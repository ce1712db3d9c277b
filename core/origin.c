#include "core/origin.h"

#include <stdio.h>

void tr_origin_format(const tr_origin *o, char *buf, size_t cap) {
    const char *name = o->name ? o->name : "?";
    switch (o->kind) {
    case TR_ORIGIN_DEFAULT:
        snprintf(buf, cap, "default");
        break;
    case TR_ORIGIN_PROVIDER:
        snprintf(buf, cap, "provider %s", name);
        break;
    case TR_ORIGIN_RECIPE:
        snprintf(buf, cap, "recipe %s", name);
        break;
    case TR_ORIGIN_FILE:
        if (o->line > 0)
            snprintf(buf, cap, "%s:%d:%d", name, o->line, o->col);
        else
            snprintf(buf, cap, "%s", name);
        break;
    case TR_ORIGIN_CLI:
        if (o->name)
            snprintf(buf, cap, "argv[%d] (%s)", o->argi, o->name);
        else
            snprintf(buf, cap, "argv[%d]", o->argi);
        break;
    case TR_ORIGIN_DERIVED:
        snprintf(buf, cap, "derived%s%s", o->name ? " by " : "", o->name ? name : "");
        break;
    case TR_ORIGIN_API:
        snprintf(buf, cap, "api%s%s", o->name ? " " : "", o->name ? name : "");
        break;
    }
}
