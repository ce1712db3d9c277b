/* Writes .bin/.idx pairs exactly as Megatron's IndexedDatasetBuilder does (no multimodal modes). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/datasets/indexed_dataset.h"

static const char *const KEY = "dataset.data_path";

static char *join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

static tr_status io_error(const char *path, tr_diags *diags) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
    tr_diag_add(diags, TR_SEV_ERROR, "data.write_failed", &o, NULL,
                "check that the output directory exists, is writable and has space",
                "cannot write %s: %s", path, strerror(errno));
    return TR_ERR_IO;
}

tr_status tr_indexed_writer_open(tr_indexed_writer *w, const char *prefix, tr_token_dtype dtype,
                                 tr_diags *diags) {
    memset(w, 0, sizeof *w);
    if (tr_token_dtype_size((int)dtype) == 0) return TR_ERR_INVALID;
    w->dtype = (int)dtype;
    w->idx_path = join(prefix, ".idx");
    w->bin_path = join(prefix, ".bin");
    w->cap_doc = 64;
    w->doc_indices = malloc(w->cap_doc * sizeof *w->doc_indices);
    if (!w->idx_path || !w->bin_path || !w->doc_indices) {
        tr_indexed_writer_free(w);
        return TR_ERR_NOMEM;
    }
    w->doc_indices[w->n_doc++] = 0;
    w->bin = fopen(w->bin_path, "wb");
    if (!w->bin) {
        tr_status s = io_error(w->bin_path, diags);
        tr_indexed_writer_free(w);
        return s;
    }
    return TR_OK;
}

static bool fits(int dtype, int64_t t) {
    switch (dtype) {
    case TR_DTYPE_UINT8:
        return t >= 0 && t <= UINT8_MAX;
    case TR_DTYPE_INT8:
        return t >= INT8_MIN && t <= INT8_MAX;
    case TR_DTYPE_INT16:
        return t >= INT16_MIN && t <= INT16_MAX;
    case TR_DTYPE_UINT16:
        return t >= 0 && t <= UINT16_MAX;
    case TR_DTYPE_INT32:
        return t >= INT32_MIN && t <= INT32_MAX;
    case TR_DTYPE_FLOAT32:
        return t >= -(1LL << 24) && t <= (1LL << 24); /* exact in a float */
    default:
        return true;
    }
}

static void encode(int dtype, int64_t t, uint8_t *p) {
    switch (dtype) {
    case TR_DTYPE_UINT8:
    case TR_DTYPE_INT8:
        p[0] = (uint8_t)t;
        break;
    case TR_DTYPE_INT16:
    case TR_DTYPE_UINT16: {
        uint16_t v = (uint16_t)t;
        memcpy(p, &v, 2);
    } break;
    case TR_DTYPE_INT32: {
        int32_t v = (int32_t)t;
        memcpy(p, &v, 4);
    } break;
    case TR_DTYPE_INT64:
        memcpy(p, &t, 8);
        break;
    case TR_DTYPE_FLOAT32: {
        float v = (float)t;
        memcpy(p, &v, 4);
    } break;
    case TR_DTYPE_FLOAT64: {
        double v = (double)t;
        memcpy(p, &v, 8);
    } break;
    }
}

tr_status tr_indexed_writer_add(tr_indexed_writer *w, const int64_t *tokens, uint64_t n,
                                tr_diags *diags) {
    if (w->failed) return TR_ERR_IO;
    if (n > INT32_MAX) {
        tr_origin o = tr_origin_make(TR_ORIGIN_FILE, w->idx_path);
        return tr_diag_add(diags, TR_SEV_ERROR, "data.sequence_too_long", &o, KEY,
                           "split the document: the .idx stores lengths as int32",
                           "a sequence of %llu tokens does not fit the .idx format",
                           (unsigned long long)n);
    }
    if (w->n_seq == w->cap_seq) {
        uint64_t cap = w->cap_seq ? 2 * w->cap_seq : 1024;
        int32_t *l = realloc(w->lengths, cap * sizeof *l);
        if (!l) return TR_ERR_NOMEM;
        w->lengths = l;
        w->cap_seq = cap;
    }
    size_t item = tr_token_dtype_size(w->dtype);
    uint8_t buf[4096];
    size_t used = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!fits(w->dtype, tokens[i])) {
            tr_origin o = tr_origin_make(TR_ORIGIN_FILE, w->bin_path);
            return tr_diag_add(diags, TR_SEV_ERROR, "data.token_out_of_range", &o, KEY,
                               "write with a wider dtype (int32 for vocabularies of 65500 or more)",
                               "token id %lld does not fit the %s dataset dtype",
                               (long long)tokens[i], tr_token_dtype_name(w->dtype));
        }
        encode(w->dtype, tokens[i], buf + used);
        used += item;
        if (used + 8 > sizeof buf || i + 1 == n) {
            if (fwrite(buf, 1, used, w->bin) != used) {
                w->failed = true;
                return io_error(w->bin_path, diags);
            }
            used = 0;
        }
    }
    w->lengths[w->n_seq++] = (int32_t)n;
    return TR_OK;
}

tr_status tr_indexed_writer_end_document(tr_indexed_writer *w) {
    if (w->n_doc == w->cap_doc) {
        uint64_t cap = 2 * w->cap_doc;
        int64_t *d = realloc(w->doc_indices, cap * sizeof *d);
        if (!d) return TR_ERR_NOMEM;
        w->doc_indices = d;
        w->cap_doc = cap;
    }
    w->doc_indices[w->n_doc++] = (int64_t)w->n_seq;
    return TR_OK;
}

static bool put(FILE *f, const void *p, size_t n) {
    return n == 0 || fwrite(p, 1, n, f) == n;
}

tr_status tr_indexed_writer_finish(tr_indexed_writer *w, tr_diags *diags) {
    if (w->failed || !w->bin) return TR_ERR_IO;
    int rc = fclose(w->bin);
    w->bin = NULL;
    if (rc != 0) {
        w->failed = true;
        return io_error(w->bin_path, diags);
    }
    FILE *f = fopen(w->idx_path, "wb");
    if (!f) {
        w->failed = true;
        return io_error(w->idx_path, diags);
    }
    static const uint8_t magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
    uint64_t version = 1, n = w->n_seq, d = w->n_doc;
    uint8_t code = (uint8_t)w->dtype;
    bool ok = put(f, magic, 9) && put(f, &version, 8) && put(f, &code, 1) && put(f, &n, 8) &&
              put(f, &d, 8) && put(f, w->lengths, 4 * n);
    int64_t ptr = 0, item = (int64_t)tr_token_dtype_size(w->dtype);
    for (uint64_t i = 0; ok && i < n; i++) {
        ok = put(f, &ptr, 8);
        ptr += (int64_t)w->lengths[i] * item;
    }
    ok = ok && put(f, w->doc_indices, 8 * d);
    if (fclose(f) != 0) ok = false;
    if (!ok) {
        w->failed = true;
        return io_error(w->idx_path, diags);
    }
    free(w->idx_path); /* nothing left to remove on free */
    free(w->bin_path);
    w->idx_path = w->bin_path = NULL;
    return TR_OK;
}

void tr_indexed_writer_free(tr_indexed_writer *w) {
    if (w->bin) fclose(w->bin);
    if (w->bin_path) remove(w->bin_path);
    if (w->idx_path) remove(w->idx_path);
    free(w->idx_path);
    free(w->bin_path);
    free(w->lengths);
    free(w->doc_indices);
    memset(w, 0, sizeof *w);
}
