/* A checkpoint's weight files (runtime/hf/hf.h): one model.safetensors, or the shards that
 * model.safetensors.index.json's weight_map names, each opened once. A shard name must be a plain
 * file name in the directory: an index cannot point outside it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/hf/internal.h"
#include "runtime/io/json.h"

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static tr_status index_error(tr_diags *d, const char *path, const char *what, const char *name) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
    return tr_diag_add(d, TR_SEV_ERROR, "hf.index", &o, NULL,
                       "the index must map every tensor name to a .safetensors file beside it",
                       "%s: %s%s%s", path, what, name ? ": " : "", name ? name : "");
}

static tr_status open_file(tr_hf_weights *w, const char *dir, const char *name, tr_diags *d) {
    for (int i = 0; i < w->n; i++) {
        const char *base = strrchr(w->files[i].name, '/');
        if (base && strcmp(base + 1, name) == 0) return TR_OK;
    }
    tr_st_file *g = realloc(w->files, (size_t)(w->n + 1) * sizeof *g);
    if (!g) return TR_ERR_NOMEM;
    w->files = g;
    char *path = join(dir, name);
    if (!path) return TR_ERR_NOMEM;
    tr_status st = tr_st_open(&w->files[w->n], path, d);
    free(path);
    if (st == TR_OK) w->n++;
    return st;
}

void tr_hf_index_free(tr_hf_index *x) {
    for (int i = 0; i < x->n; i++) free(x->tensors[i]), free(x->files[i]);
    free(x->tensors);
    free(x->files);
    memset(x, 0, sizeof *x);
}

tr_status tr_hf_index_parse(const char *text, size_t len, const char *path, tr_hf_index *x,
                            tr_diags *d) {
    memset(x, 0, sizeof *x);
    tr_json root = {0};
    TR_TRY(tr_json_parse(text, len, path, &root, d));
    const tr_json *map = root.type == TR_JSON_OBJECT ? tr_json_get(&root, "weight_map") : NULL;
    tr_status st = TR_OK;
    if (!map || map->type != TR_JSON_OBJECT || map->n > (size_t)INT32_MAX)
        st = index_error(d, path, "no weight_map object", NULL);
    if (st == TR_OK && map->n) {
        x->tensors = calloc(map->n, sizeof *x->tensors);
        x->files = calloc(map->n, sizeof *x->files);
        if (!x->tensors || !x->files) st = TR_ERR_NOMEM;
    }
    for (size_t i = 0; st == TR_OK && i < map->n; i++) {
        const tr_json *f = &map->items[i];
        if (strlen(map->keys[i]) != map->key_lens[i] || !map->key_lens[i])
            st = index_error(d, path, "a tensor name is empty or holds a NUL", NULL);
        else if (f->type != TR_JSON_STRING || strlen(f->str) != f->len || !f->len ||
                 strchr(f->str, '/') || strcmp(f->str, "..") == 0 || strcmp(f->str, ".") == 0)
            st = index_error(d, path, "a weight_map entry is not a file name", map->keys[i]);
        else if (!(x->tensors[i] = strdup(map->keys[i])) || !(x->files[i] = strdup(f->str)))
            st = TR_ERR_NOMEM;
        if (x->tensors && (x->tensors[i] || x->files[i])) x->n = (int)i + 1;
    }
    tr_json_free(&root);
    if (st != TR_OK) tr_hf_index_free(x);
    return st;
}

static tr_status open_index(tr_hf_weights *w, const char *dir, const char *path, tr_diags *d) {
    char *text = NULL;
    size_t len = 0;
    tr_hf_index x = {0};
    tr_status st = tr_read_file(path, "hf.index", &text, &len, d);
    if (st == TR_OK) st = tr_hf_index_parse(text, len, path, &x, d);
    for (int i = 0; st == TR_OK && i < x.n; i++) st = open_file(w, dir, x.files[i], d);
    /* Every tensor the index names must be in the file it names. */
    for (int i = 0; st == TR_OK && i < x.n; i++)
        if (!tr_hf_weights_find(w, x.tensors[i]))
            st = index_error(d, path, "no shard holds the tensor", x.tensors[i]);
    tr_hf_index_free(&x);
    free(text);
    return st;
}

/* architectures[0] of DIR/config.json, when it has one. */
static tr_status read_architecture(tr_hf_weights *w, const char *dir, tr_diags *d) {
    char *path = join(dir, "config.json"), *text = NULL;
    if (!path) return TR_ERR_NOMEM;
    size_t len = 0;
    tr_json root = {0};
    struct stat sb;
    tr_status st = stat(path, &sb) == 0 ? tr_read_file(path, "hf.config", &text, &len, d) : TR_OK;
    if (st == TR_OK && text) st = tr_json_parse(text, len, path, &root, d);
    const tr_json *a = st == TR_OK ? tr_json_get(&root, "architectures") : NULL;
    if (a && a->type == TR_JSON_ARRAY && a->n >= 1 && a->items[0].type == TR_JSON_STRING &&
        !(w->architecture = strdup(a->items[0].str)))
        st = TR_ERR_NOMEM;
    tr_json_free(&root);
    free(text);
    free(path);
    return st;
}

tr_status tr_hf_weights_open(tr_hf_weights *w, const char *dir, tr_diags *d) {
    memset(w, 0, sizeof *w);
    TR_TRY(read_architecture(w, dir, d));
    char *index = join(dir, "model.safetensors.index.json");
    if (!index) return TR_ERR_NOMEM;
    struct stat sb;
    tr_status st = stat(index, &sb) == 0 ? open_index(w, dir, index, d)
                                         : open_file(w, dir, "model.safetensors", d);
    free(index);
    if (st != TR_OK) tr_hf_weights_close(w);
    return st;
}

void tr_hf_weights_close(tr_hf_weights *w) {
    for (int i = 0; i < w->n; i++) tr_st_close(&w->files[i]);
    free(w->files);
    free(w->architecture);
    memset(w, 0, sizeof *w);
}

const tr_st_tensor *tr_hf_weights_find(const tr_hf_weights *w, const char *name) {
    for (int i = 0; i < w->n; i++) {
        const tr_st_tensor *t = tr_st_find(&w->files[i], name);
        if (t) return t;
    }
    return NULL;
}
