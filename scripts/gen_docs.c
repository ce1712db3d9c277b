/* trestle_gen_docs: regenerate docs/config-reference.md and docs/validation-rules.md from the
 * field and rule tables (or, with --check, only report whether they are stale).
 *   trestle_gen_docs [--check] [SOURCE_ROOT]       exit 0 ok / 1 stale or unwritable */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/docs_gen.h"

#ifndef TRESTLE_SOURCE_DIR
#define TRESTLE_SOURCE_DIR "."
#endif

static char *render(const tr_docs_file *doc, size_t *len) {
    char *text = NULL;
    FILE *mem = open_memstream(&text, len);
    if (!mem) return NULL;
    tr_status s = doc->write(mem);
    if (fclose(mem) != 0 || s != TR_OK) {
        free(text);
        return NULL;
    }
    return text;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = NULL;
    size_t cap = 0;
    *len = 0;
    for (;;) {
        if (*len + 4096 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *grown = realloc(text, cap);
            if (!grown) break;
            text = grown;
        }
        size_t got = fread(text + *len, 1, cap - *len, f);
        *len += got;
        if (got == 0) break;
    }
    fclose(f);
    return text;
}

int main(int argc, char **argv) {
    bool check = false;
    const char *root = TRESTLE_SOURCE_DIR;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0)
            check = true;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: trestle_gen_docs [--check] [SOURCE_ROOT]\n");
            return 2;
        } else
            root = argv[i];
    }
    int failed = 0;
    for (int i = 0; i < tr_docs_file_count; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", root, tr_docs_files[i].path);
        size_t len = 0, old_len = 0;
        char *text = render(&tr_docs_files[i], &len);
        if (!text) {
            fprintf(stderr, "trestle_gen_docs: cannot render %s\n", tr_docs_files[i].path);
            return 1;
        }
        char *old = slurp(path, &old_len);
        bool fresh = old && old_len == len && memcmp(old, text, len) == 0;
        free(old);
        if (check) {
            if (!fresh) {
                fprintf(stderr, "%s is stale: run trestle_gen_docs to regenerate it\n", path);
                failed = 1;
            }
        } else if (!fresh) {
            char tmp[4200];
            snprintf(tmp, sizeof tmp, "%s.tmp", path);
            FILE *f = fopen(tmp, "wb");
            bool ok = f && fwrite(text, 1, len, f) == len;
            if (f && fclose(f) != 0) ok = false;
            if (ok && rename(tmp, path) == 0)
                printf("wrote %s\n", path);
            else {
                fprintf(stderr, "trestle_gen_docs: cannot write %s\n", path);
                remove(tmp);
                failed = 1;
            }
        }
        free(text);
    }
    return failed;
}
