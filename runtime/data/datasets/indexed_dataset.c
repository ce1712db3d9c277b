#include "runtime/data/datasets/indexed_dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/input/file.h"

/* The format is little-endian and we read it in place. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "indexed datasets need a little-endian host");

static const uint8_t IDX_MAGIC[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
enum { IDX_HEADER_BYTES = 34 };
static const char *const KEY = "dataset.data_path";

size_t tr_token_dtype_size(int code) {
    switch (code) {
    case TR_DTYPE_UINT8:
    case TR_DTYPE_INT8:
        return 1;
    case TR_DTYPE_INT16:
    case TR_DTYPE_UINT16:
        return 2;
    case TR_DTYPE_INT32:
    case TR_DTYPE_FLOAT32:
        return 4;
    case TR_DTYPE_INT64:
    case TR_DTYPE_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

const char *tr_token_dtype_name(int code) {
    switch (code) {
    case TR_DTYPE_UINT8:
        return "uint8";
    case TR_DTYPE_INT8:
        return "int8";
    case TR_DTYPE_INT16:
        return "int16";
    case TR_DTYPE_INT32:
        return "int32";
    case TR_DTYPE_INT64:
        return "int64";
    case TR_DTYPE_FLOAT64:
        return "float64";
    case TR_DTYPE_FLOAT32:
        return "float32";
    case TR_DTYPE_UINT16:
        return "uint16";
    default:
        return "unknown";
    }
}

tr_token_dtype tr_token_dtype_for_vocab(int64_t vocab_size) {
    return vocab_size < 65500 ? TR_DTYPE_UINT16 : TR_DTYPE_INT32;
}

static uint64_t load_u64(const uint8_t *p) {
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

static tr_origin file_origin(const char *name) {
    return tr_origin_make(TR_ORIGIN_FILE, name);
}

tr_status tr_idx_parse(const void *buf, size_t size, int64_t bin_size, const char *name,
                       tr_idx_view *out, tr_diags *diags) {
    const uint8_t *p = buf;
    tr_origin o = file_origin(name);
    memset(out, 0, sizeof *out);
    size_t magic_cmp = size < sizeof IDX_MAGIC ? size : sizeof IDX_MAGIC;
    if (memcmp(p, IDX_MAGIC, magic_cmp) != 0)
        return tr_diag_add(diags, TR_SEV_ERROR, "data.idx_bad_magic", &o, KEY,
                           "pass the prefix of a Megatron indexed dataset (the .idx written by "
                           "preprocess_data), not another file",
                           "%s is not a Megatron .idx file: it does not start with MMIDIDX", name);
    if (size < IDX_HEADER_BYTES)
        return tr_diag_add(diags, TR_SEV_ERROR, "data.idx_truncated", &o, KEY,
                           "the file was cut short (interrupted copy or write?); regenerate it",
                           "%s is truncated: %zu bytes, but the header alone takes %d", name, size,
                           IDX_HEADER_BYTES);
    uint64_t version = load_u64(p + 9);
    if (version != 1)
        return tr_diag_add(diags, TR_SEV_ERROR, "data.idx_version", &o, KEY,
                           "only version 1 of the indexed format exists; regenerate the data with "
                           "preprocess_data",
                           "%s has format version %llu; Trestle reads version 1", name,
                           (unsigned long long)version);
    int dtype = p[17];
    if (tr_token_dtype_size(dtype) == 0)
        return tr_diag_add(diags, TR_SEV_ERROR, "data.idx_dtype", &o, KEY,
                           "valid codes are 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, "
                           "7 float32, 8 uint16; the file is damaged or not Megatron's",
                           "%s has token dtype code %d, which is not a Megatron dtype", name,
                           dtype);
    uint64_t n = load_u64(p + 18), d = load_u64(p + 26);
    /* 34 + 12N + 8D without overflow: both counts are bounded by the file size anyway. */
    if (n > size / 12 || d > size / 8 || IDX_HEADER_BYTES + 12 * n + 8 * d > size)
        return tr_diag_add(diags, TR_SEV_ERROR, "data.idx_truncated", &o, KEY,
                           "the file was cut short or its header is damaged; regenerate it",
                           "%s is truncated: the header announces %llu sequences and %llu document "
                           "boundaries, which need more than its %zu bytes",
                           name, (unsigned long long)n, (unsigned long long)d, size);
    size_t body = IDX_HEADER_BYTES + 12 * n + 8 * d;
    out->dtype = dtype;
    out->n_sequences = n;
    out->n_documents = d;
    out->sequence_lengths = p + IDX_HEADER_BYTES;
    out->sequence_pointers = p + IDX_HEADER_BYTES + 4 * n;
    out->document_indices = p + IDX_HEADER_BYTES + 12 * n;
    if (size == body + n)
        out->sequence_modes = p + body;
    else if (size != body)
        return tr_diag_add(diags, TR_SEV_ERROR, "data.idx_trailing_bytes", &o, KEY,
                           "the file is damaged or was written by an incompatible tool; "
                           "regenerate it",
                           "%s has %zu bytes after its document indices; a Megatron .idx has "
                           "none, or exactly one mode byte per sequence (%llu)",
                           name, size - body, (unsigned long long)n);
    if (d < 1 || tr_idx_document(out, 0) != 0 || (uint64_t)tr_idx_document(out, d - 1) != n)
        return tr_diag_add(
            diags, TR_SEV_ERROR, "data.idx_document_indices", &o, KEY,
            "document boundaries must start at 0 and end at the sequence count; "
            "regenerate the file",
            "%s: document indices must run from 0 to %llu, but they are %s%lld..%lld", name,
            (unsigned long long)n, d < 1 ? "empty " : "",
            d < 1 ? 0LL : (long long)tr_idx_document(out, 0),
            d < 1 ? 0LL : (long long)tr_idx_document(out, d - 1));
    for (uint64_t i = 1; i < d; i++)
        if (tr_idx_document(out, i) < tr_idx_document(out, i - 1))
            return tr_diag_add(diags, TR_SEV_ERROR, "data.idx_document_indices", &o, KEY,
                               "document boundaries must not decrease; regenerate the file",
                               "%s: document boundary %llu (%lld) is before boundary %llu (%lld)",
                               name, (unsigned long long)i, (long long)tr_idx_document(out, i),
                               (unsigned long long)(i - 1), (long long)tr_idx_document(out, i - 1));
    size_t item = tr_token_dtype_size(dtype);
    int64_t expect = 0;
    for (uint64_t i = 0; i < n; i++) {
        int32_t len = tr_idx_length(out, i);
        if (len < 0)
            return tr_diag_add(diags, TR_SEV_ERROR, "data.idx_sequence_length", &o, KEY,
                               "the index is damaged; regenerate it",
                               "%s: sequence %llu has negative length %d", name,
                               (unsigned long long)i, len);
        if (tr_idx_pointer(out, i) != expect)
            return tr_diag_add(diags, TR_SEV_ERROR, "data.idx_offsets", &o, KEY,
                               "sequence offsets must be the running sum of the lengths times the "
                               "dtype size; the index is damaged or belongs to other data",
                               "%s: sequence %llu starts at byte %lld of the .bin, but the "
                               "sequences before it end at byte %lld",
                               name, (unsigned long long)i, (long long)tr_idx_pointer(out, i),
                               (long long)expect);
        expect += (int64_t)len * (int64_t)item; /* < 2^31 * 8 per step, n < 2^61: no overflow */
    }
    if (bin_size >= 0 && expect != bin_size)
        return tr_diag_add(
            diags, TR_SEV_ERROR,
            expect > bin_size ? "data.bin_truncated" : "data.bin_size_mismatch", &o, KEY,
            "the .bin and .idx must come from the same preprocessing run; "
            "regenerate both or copy the .bin again",
            "%s describes %lld bytes of %s tokens, but the .bin has %lld bytes", name,
            (long long)expect, tr_token_dtype_name(dtype), (long long)bin_size);
    return TR_OK;
}

static char *join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

/* Maps a whole file read-only. An empty file maps to a non-NULL dummy so callers need not care. */
static tr_status map_file(const char *path, void **map, size_t *size, tr_diags *diags) {
    static const uint8_t empty[8];
    tr_origin o = file_origin(path);
    int err;
    struct stat st;
    int fd = tr_file_open(AT_FDCWD, path, 0, &st, &err);
    if (fd < 0) {
        bool notreg = err == EISDIR || err == TR_FILE_ENOTREG;
        tr_diag_add(diags, TR_SEV_ERROR, "data.file_open", &o, KEY,
                    "check the path prefix: Trestle opens <prefix>.idx and <prefix>.bin, which "
                    "must be regular files",
                    "cannot open %s: %s", path, tr_file_strerror(err));
        return err == ENOENT ? TR_ERR_NOTFOUND : notreg ? TR_ERR_INVALID : TR_ERR_IO;
    }
    *size = (size_t)st.st_size;
    if (*size == 0) {
        close(fd);
        *map = (void *)empty;
        return TR_OK;
    }
    void *m = mmap(NULL, *size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        tr_diag_add(diags, TR_SEV_ERROR, "data.file_map", &o, KEY, NULL, "cannot map %s: %s", path,
                    strerror(errno));
        return TR_ERR_IO;
    }
    *map = m;
    return TR_OK;
}

static void unmap_file(void *map, size_t size) {
    if (map && size > 0) munmap(map, size);
}

tr_status tr_indexed_open(tr_indexed_dataset *ds, const char *prefix, tr_diags *diags) {
    memset(ds, 0, sizeof *ds);
    char *idx_path = join(prefix, ".idx"), *bin_path = join(prefix, ".bin");
    ds->prefix = strdup(prefix);
    tr_status s = TR_ERR_NOMEM;
    if (!idx_path || !bin_path || !ds->prefix) goto fail;
    s = map_file(idx_path, &ds->idx_map, &ds->idx_size, diags);
    if (s != TR_OK) goto fail;
    void *bin_map = NULL;
    s = map_file(bin_path, &bin_map, &ds->bin_size, diags);
    if (s != TR_OK) goto fail;
    ds->bin_map = bin_map;
    ds->bin = bin_map;
    s = tr_idx_parse(ds->idx_map, ds->idx_size, (int64_t)ds->bin_size, idx_path, &ds->idx, diags);
    if (s != TR_OK) goto fail;
    free(idx_path);
    free(bin_path);
    return TR_OK;
fail:
    free(idx_path);
    free(bin_path);
    tr_indexed_close(ds);
    return s;
}

void tr_indexed_close(tr_indexed_dataset *ds) {
    unmap_file(ds->idx_map, ds->idx_size);
    unmap_file(ds->bin_map, ds->bin_size);
    free(ds->prefix);
    memset(ds, 0, sizeof *ds);
}

/* Float token files exist in the format; ids must still be whole numbers in int64 range. */
static bool float_to_id(double x, int64_t *out) {
    if (!isfinite(x) || x != floor(x) || x < -9.2e18 || x > 9.2e18) return false;
    *out = (int64_t)x;
    return true;
}

tr_status tr_indexed_read(const tr_indexed_dataset *ds, uint64_t i, uint64_t offset, uint64_t count,
                          int64_t *out) {
    if (i >= ds->idx.n_sequences) return TR_ERR_INVALID;
    uint64_t len = (uint64_t)tr_idx_length(&ds->idx, i);
    if (offset > len || count > len - offset) return TR_ERR_INVALID;
    size_t item = tr_token_dtype_size(ds->idx.dtype);
    const uint8_t *p = ds->bin + tr_idx_pointer(&ds->idx, i) + offset * item;
    for (uint64_t k = 0; k < count; k++, p += item) {
        switch (ds->idx.dtype) {
        case TR_DTYPE_UINT8:
            out[k] = p[0];
            break;
        case TR_DTYPE_INT8:
            out[k] = (int8_t)p[0];
            break;
        case TR_DTYPE_INT16: {
            int16_t v;
            memcpy(&v, p, 2);
            out[k] = v;
        } break;
        case TR_DTYPE_UINT16: {
            uint16_t v;
            memcpy(&v, p, 2);
            out[k] = v;
        } break;
        case TR_DTYPE_INT32: {
            int32_t v;
            memcpy(&v, p, 4);
            out[k] = v;
        } break;
        case TR_DTYPE_INT64:
            memcpy(&out[k], p, 8);
            break;
        case TR_DTYPE_FLOAT32: {
            float v;
            memcpy(&v, p, 4);
            if (!float_to_id(v, &out[k])) return TR_ERR_INVALID;
        } break;
        case TR_DTYPE_FLOAT64: {
            double v;
            memcpy(&v, p, 8);
            if (!float_to_id(v, &out[k])) return TR_ERR_INVALID;
        } break;
        default:
            return TR_ERR_INTERNAL;
        }
    }
    return TR_OK;
}
