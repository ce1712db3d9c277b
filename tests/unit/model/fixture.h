/* Reference tensors written by the scripts in tests/reference (format TRMFIX01: b"TRMFIX01",
 * u32 count, then per tensor u32 name length, the name, u64 element count, float32 values). */
#ifndef TR_TEST_FIXTURE_H
#define TR_TEST_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fix_tensor {
    char name[128];
    float *data;
    uint64_t n;
} fix_tensor;

typedef struct fixture {
    fix_tensor *t;
    uint32_t n;
} fixture;

static inline void fixture_free(fixture *f) {
    for (uint32_t i = 0; i < f->n; i++) free(f->t[i].data);
    free(f->t);
    f->t = NULL;
    f->n = 0;
}

/* `file` relative to tests/reference/fixtures/. */
static inline int fixture_load(fixture *f, const char *file) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/reference/fixtures/%s", TRESTLE_SOURCE_DIR, file);
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp) return fprintf(stderr, "  cannot open %s\n", path), 0;
    char magic[8];
    int ok = fread(magic, 1, 8, fp) == 8 && memcmp(magic, "TRMFIX01", 8) == 0 &&
             fread(&f->n, 4, 1, fp) == 1 && f->n < 100000;
    if (ok) f->t = calloc(f->n, sizeof *f->t);
    for (uint32_t i = 0; ok && i < f->n; i++) {
        uint32_t len = 0;
        ok = fread(&len, 4, 1, fp) == 1 && len < sizeof f->t[i].name &&
             fread(f->t[i].name, 1, len, fp) == len && fread(&f->t[i].n, 8, 1, fp) == 1 &&
             f->t[i].n < (1u << 26);
        if (ok) f->t[i].data = malloc(f->t[i].n * sizeof(float) + 1);
        ok = ok && f->t[i].data && fread(f->t[i].data, 4, f->t[i].n, fp) == f->t[i].n;
    }
    fclose(fp);
    if (!ok) fixture_free(f);
    return ok;
}

static inline const fix_tensor *fixture_get(const fixture *f, const char *prefix,
                                            const char *name) {
    char key[160];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    for (uint32_t i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, key) == 0) return &f->t[i];
    return NULL;
}

#endif
