/* Where a configuration value came from: the basis of --explain and of every error location. */
#ifndef TR_ORIGIN_H
#define TR_ORIGIN_H

#include <stddef.h>
#include <stdint.h>

typedef enum tr_origin_kind {
    TR_ORIGIN_DEFAULT = 0, /* the field table's default */
    TR_ORIGIN_PROVIDER,    /* a model provider (name = provider) */
    TR_ORIGIN_RECIPE,      /* a recipe function (name = recipe) */
    TR_ORIGIN_FILE,        /* a YAML file (name = path, line/col 1-based) */
    TR_ORIGIN_CLI,         /* a command-line override (argi = index in argv) */
    TR_ORIGIN_DERIVED,     /* computed by finalize() */
    TR_ORIGIN_API          /* set by a caller of the C API */
} tr_origin_kind;

typedef struct tr_origin {
    tr_origin_kind kind;
    const char *name; /* not owned: recipe names are static, file names are interned by the owner */
    int32_t line, col;
    int32_t argi;
} tr_origin;

/* "file.yaml:3:7", "argv[4]", "recipe llama32_1b_pretrain", "default", "derived". */
void tr_origin_format(const tr_origin *o, char *buf, size_t cap);

static inline tr_origin tr_origin_make(tr_origin_kind kind, const char *name) {
    tr_origin o = {kind, name, 0, 0, -1};
    return o;
}

#endif
