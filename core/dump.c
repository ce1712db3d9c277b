/* Canonical YAML dump of a resolved config and its fingerprint. The dump is also a valid
 * override file: loading it over any recipe reproduces the same config. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/config.h"

tr_status tr_config_dump_yaml(const tr_config *c, FILE *out) {
    char buf[8192];
    int section = -1;
    for (int i = 0; i < tr_field_count; i++) {
        const tr_field *f = &tr_fields[i];
        if (f->section != section) {
            section = f->section;
            if (fprintf(out, "%s:\n", tr_sections[section].name) < 0) return TR_ERR_IO;
        }
        tr_config_field_format(c, f, buf, sizeof buf);
        if (fprintf(out, "  %s: %s\n", f->name, buf) < 0) return TR_ERR_IO;
    }
    return TR_OK;
}

char *tr_config_dump_yaml_string(const tr_config *c) {
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) return NULL;
    tr_status s = tr_config_dump_yaml(c, mem);
    if (fclose(mem) != 0 || s != TR_OK) {
        free(text);
        return NULL;
    }
    return text;
}

uint64_t tr_config_fingerprint(const tr_config *c) {
    char *text = tr_config_dump_yaml_string(c);
    if (!text) return 0;
    uint64_t h = XXH3_64bits(text, strlen(text));
    free(text);
    return h;
}
