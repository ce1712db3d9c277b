/* Reading safetensors files (runtime/hf/safetensors.h): the checks, in the order a hostile file
 * meets them. */
#include "runtime/hf/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/input/file.h"
#include "runtime/io/json.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[TR_ST_DTYPE_COUNT] = {
    [TR_ST_BOOL] = {"BOOL", 1}, [TR_ST_U8] = {"U8", 1},   [TR_ST_I8] = {"I8", 1},
    [TR_ST_I16] = {"I16", 2},   [TR_ST_U16] = {"U16", 2}, [TR_ST_F16] = {"F16", 2},
    [TR_ST_BF16] = {"BF16", 2}, [TR_ST_I32] = {"I32", 4}, [TR_ST_U32] = {"U32", 4},
    [TR_ST_F32] = {"F32", 4},   [TR_ST_I64] = {"I64", 8}, [TR_ST_U64] = {"U64", 8},
    [TR_ST_F64] = {"F64", 8},
};

/* Offsets and dimensions must stay exact in the JSON reader's doubles. */
#define MAX_EXACT ((int64_t)1 << 53)

const char *tr_st_dtype_name(tr_st_dtype t) {
    return (unsigned)t < TR_ST_DTYPE_COUNT ? dtypes[t].name : "?";
}

size_t tr_st_dtype_size(tr_st_dtype t) {
    return (unsigned)t < TR_ST_DTYPE_COUNT ? dtypes[t].size : 0;
}

int tr_st_dtype_parse(const char *name, size_t len) {
    for (int i = 0; i < TR_ST_DTYPE_COUNT; i++)
        if (strlen(dtypes[i].name) == len && memcmp(dtypes[i].name, name, len) == 0) return i;
    return -1;
}

int64_t tr_st_numel(const tr_st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static tr_status bad(tr_diags *d, const char *id, const char *file, const char *hint,
                     const char *fmt, const char *tensor, long long a, long long b) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, file);
    char what[512];
    snprintf(what, sizeof what, fmt, a, b);
    if (tensor)
        tr_diag_add(d, TR_SEV_ERROR, id, &o, NULL, hint, "%s: tensor \"%.200s\": %s", file, tensor,
                    what);
    else
        tr_diag_add(d, TR_SEV_ERROR, id, &o, NULL, hint, "%s: %s", file, what);
    return TR_ERR_INVALID;
}

#define HEADER_HINT "the file is not a complete safetensors file: re-download or re-export it"

/* One "name": {"dtype", "shape", "data_offsets"} entry. */
static tr_status read_entry(const tr_json *v, const char *file, tr_st_tensor *t, uint64_t data_len,
                            tr_diags *d) {
    const char *name = t->name;
    if (v->type != TR_JSON_OBJECT)
        return bad(d, "safetensors.header", file, HEADER_HINT, "the entry is not an object", name,
                   0, 0);
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->keys[i], "dtype") && strcmp(v->keys[i], "shape") &&
            strcmp(v->keys[i], "data_offsets"))
            return bad(d, "safetensors.header", file, HEADER_HINT,
                       "unexpected field (an entry holds dtype, shape and data_offsets)", name, 0,
                       0);
    const tr_json *dt = tr_json_get(v, "dtype"), *sh = tr_json_get(v, "shape"),
                  *off = tr_json_get(v, "data_offsets");
    if (!dt || !sh || !off)
        return bad(d, "safetensors.header", file, HEADER_HINT,
                   "dtype, shape or data_offsets is missing", name, 0, 0);
    int dtype = dt->type == TR_JSON_STRING ? tr_st_dtype_parse(dt->str, dt->len) : -1;
    if (dtype < 0)
        return bad(d, "safetensors.header", file,
                   "Trestle reads BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64",
                   "unknown dtype", name, 0, 0);
    t->dtype = (tr_st_dtype)dtype;
    if (sh->type != TR_JSON_ARRAY || sh->n > TR_ST_MAX_DIMS)
        return bad(d, "safetensors.header", file, HEADER_HINT,
                   "shape is not an array of at most %lld dimensions", name, TR_ST_MAX_DIMS, 0);
    t->ndim = (int)sh->n;
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        int64_t dim;
        if (!tr_json_int(&sh->items[i], 0, MAX_EXACT, &dim))
            return bad(d, "safetensors.header", file, HEADER_HINT,
                       "dimension %lld is not a whole number in [0, 2^53]", name, i, 0);
        t->shape[i] = dim;
        if (__builtin_mul_overflow(numel, (uint64_t)dim, &numel))
            return bad(d, "safetensors.header", file, HEADER_HINT,
                       "the shape's element count overflows 64 bits", name, 0, 0);
    }
    int64_t b, e;
    if (off->type != TR_JSON_ARRAY || off->n != 2 ||
        !tr_json_int(&off->items[0], 0, MAX_EXACT, &b) ||
        !tr_json_int(&off->items[1], 0, MAX_EXACT, &e) || b > e)
        return bad(d, "safetensors.header", file, HEADER_HINT,
                   "data_offsets is not [begin, end] with 0 <= begin <= end", name, 0, 0);
    if ((uint64_t)e > data_len)
        return bad(d, "safetensors.layout", file, HEADER_HINT,
                   "data_offsets end %lld is past the %lld bytes of data", name, e,
                   (long long)data_len);
    uint64_t bytes;
    if (__builtin_mul_overflow(numel, (uint64_t)tr_st_dtype_size(t->dtype), &bytes) ||
        bytes != (uint64_t)(e - b))
        return bad(d, "safetensors.header", file, HEADER_HINT,
                   "data_offsets span %lld bytes, the dtype and shape need %lld", name, e - b,
                   (long long)bytes);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    return TR_OK;
}

static tr_status read_metadata(tr_st_file *f, const tr_json *v, tr_diags *d) {
    if (v->type != TR_JSON_OBJECT)
        return bad(d, "safetensors.header", f->name, HEADER_HINT, "__metadata__ is not an object",
                   NULL, 0, 0);
    f->meta_keys = calloc(v->n ? v->n : 1, sizeof *f->meta_keys);
    f->meta_values = calloc(v->n ? v->n : 1, sizeof *f->meta_values);
    if (!f->meta_keys || !f->meta_values) return TR_ERR_NOMEM;
    for (size_t i = 0; i < v->n; i++) {
        const tr_json *s = &v->items[i];
        if (s->type != TR_JSON_STRING || strlen(s->str) != s->len ||
            strlen(v->keys[i]) != v->key_lens[i])
            return bad(d, "safetensors.header", f->name, HEADER_HINT,
                       "a __metadata__ entry is not a string without NUL characters", NULL, 0, 0);
        f->meta_keys[f->n_meta] = strdup(v->keys[i]);
        f->meta_values[f->n_meta] = strdup(s->str);
        if (!f->meta_keys[f->n_meta] || !f->meta_values[f->n_meta]) return TR_ERR_NOMEM;
        f->n_meta++;
    }
    return TR_OK;
}

static int by_offset(const void *a, const void *b) {
    const tr_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const tr_st_tensor *)a)->name, ((const tr_st_tensor *)b)->name);
}

/* The ranges must tile [0, data_len): each starts where the one before it ends. */
static tr_status check_tiling(tr_st_file *f, uint64_t data_len, tr_diags *d) {
    qsort(f->t, (size_t)f->n, sizeof *f->t, by_offset);
    uint64_t at = 0;
    for (int i = 0; i < f->n; i++) {
        if (f->t[i].begin > at)
            return bad(d, "safetensors.layout", f->name, HEADER_HINT,
                       "a hole of %lld bytes at offset %lld comes before this tensor", f->t[i].name,
                       (long long)(f->t[i].begin - at), (long long)at);
        if (f->t[i].begin < at)
            return bad(d, "safetensors.layout", f->name, HEADER_HINT,
                       "its range starts at %lld, inside the tensor before it (which ends at %lld)",
                       f->t[i].name, (long long)f->t[i].begin, (long long)at);
        at = f->t[i].end;
    }
    if (at != data_len)
        return bad(d, "safetensors.layout", f->name, HEADER_HINT,
                   "%lld bytes of data follow the last tensor (which ends at %lld)", NULL,
                   (long long)(data_len - at), (long long)at);
    return TR_OK;
}

static tr_status parse(tr_st_file *f, const unsigned char *p, size_t len, tr_diags *d) {
    if (len < 8)
        return bad(d, "safetensors.header", f->name, HEADER_HINT,
                   "%lld bytes are fewer than the 8-byte header length", NULL, (long long)len, 0);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | p[i];
    if (n > TR_ST_MAX_HEADER)
        return bad(d, "safetensors.header", f->name, HEADER_HINT,
                   "the header length %lld exceeds the limit of %lld bytes", NULL, (long long)n,
                   (long long)TR_ST_MAX_HEADER);
    if (n > len - 8)
        return bad(d, "safetensors.header", f->name, HEADER_HINT,
                   "the header length %lld runs past the end of the file (%lld bytes)", NULL,
                   (long long)n, (long long)len);
    tr_json root;
    TR_TRY(tr_json_parse((const char *)p + 8, (size_t)n, f->name, &root, d));
    uint64_t data_len = len - 8 - n;
    tr_status st = TR_OK;
    if (root.type != TR_JSON_OBJECT)
        st = bad(d, "safetensors.header", f->name, HEADER_HINT, "the header is not a JSON object",
                 NULL, 0, 0);
    if (st == TR_OK && !(f->t = calloc(root.n ? root.n : 1, sizeof *f->t))) st = TR_ERR_NOMEM;
    for (size_t i = 0; st == TR_OK && i < root.n; i++) {
        if (strlen(root.keys[i]) != root.key_lens[i]) {
            st = bad(d, "safetensors.header", f->name, HEADER_HINT,
                     "a tensor name holds a NUL character", NULL, 0, 0);
        } else if (strcmp(root.keys[i], "__metadata__") == 0) {
            st = f->meta_keys ? bad(d, "safetensors.header", f->name, HEADER_HINT,
                                    "__metadata__ appears twice", NULL, 0, 0)
                              : read_metadata(f, &root.items[i], d);
        } else {
            tr_st_tensor *t = &f->t[f->n];
            if (!(t->name = strdup(root.keys[i]))) {
                st = TR_ERR_NOMEM;
                break;
            }
            f->n++;
            st = read_entry(&root.items[i], f->name, t, data_len, d);
        }
    }
    tr_json_free(&root);
    if (st == TR_OK) st = check_tiling(f, data_len, d);
    if (st != TR_OK) return st;
    qsort(f->t, (size_t)f->n, sizeof *f->t, by_name);
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->t[i - 1].name, f->t[i].name) == 0)
            return bad(d, "safetensors.header", f->name, HEADER_HINT,
                       "the name appears twice in the header", f->t[i].name, 0, 0);
    for (int i = 0; i < f->n; i++) f->t[i].data = p + 8 + n + f->t[i].begin;
    return TR_OK;
}

tr_status tr_st_parse(tr_st_file *f, const void *bytes, size_t len, const char *name, tr_diags *d) {
    memset(f, 0, sizeof *f);
    if (!(f->name = strdup(name ? name : "(memory)"))) return TR_ERR_NOMEM;
    tr_status st = parse(f, bytes, len, d);
    if (st != TR_OK) tr_st_close(f);
    return st;
}

tr_status tr_st_open(tr_st_file *f, const char *path, tr_diags *d) {
    memset(f, 0, sizeof *f);
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
    /* The read policy of core/input/file.h: a FIFO in the model directory must not hang the open.
     */
    int err = 0;
    struct stat sb;
    int fd = tr_file_open(AT_FDCWD, path, 0, &sb, &err);
    if (fd < 0) {
        tr_diag_add(d, TR_SEV_ERROR, "safetensors.open", &o, NULL,
                    "name a readable regular .safetensors file", "cannot read %s: %s", path,
                    tr_file_strerror(err));
        return err == ENOENT ? TR_ERR_NOTFOUND : TR_ERR_IO;
    }
    size_t len = (size_t)sb.st_size;
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    err = errno;
    close(fd);
    if (len && map == MAP_FAILED) {
        tr_diag_add(d, TR_SEV_ERROR, "safetensors.open", &o, NULL, NULL, "cannot map %s: %s", path,
                    strerror(err));
        return TR_ERR_IO;
    }
    static const unsigned char empty[1];
    tr_status st = tr_st_parse(f, map ? map : empty, len, path, d);
    if (st != TR_OK) {
        if (map) munmap(map, len);
        return st;
    }
    f->map = map;
    f->map_len = len;
    return TR_OK;
}

void tr_st_close(tr_st_file *f) {
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->meta_keys);
    free(f->meta_values);
    if (f->map) munmap(f->map, f->map_len);
    free(f->name);
    memset(f, 0, sizeof *f);
}

const tr_st_tensor *tr_st_find(const tr_st_file *f, const char *name) {
    tr_st_tensor key = {.name = (char *)name};
    return f->n ? bsearch(&key, f->t, (size_t)f->n, sizeof *f->t, by_name) : NULL;
}

const char *tr_st_meta(const tr_st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}
