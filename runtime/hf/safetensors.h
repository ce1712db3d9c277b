/* safetensors, the file format Hugging Face checkpoints ship in: an 8-byte little-endian header
 * length N, N bytes of JSON mapping each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (offsets into the data that follows the header) plus an optional "__metadata__"
 * object of strings, then the tensors' bytes, row-major, little-endian.
 *
 * Reading treats the file as hostile: the header length is checked against the file, every
 * range against the data and against its dtype x shape (in 64 bits, overflow detected), and the
 * ranges against each other, which must tile the data exactly (no overlap, no hole, as the
 * reference implementation requires). A file that fails any check is one diagnostic naming the
 * file and the tensor, never a read out of bounds. The file is mapped read-only; tensor data
 * points into the mapping.
 *
 * Writing puts the header (padded with spaces to 8 bytes, so every tensor starts aligned) and
 * the data into a temporary file next to the target, fsyncs it and renames it over the target:
 * a reader never sees a half-written file under the final name. */
#ifndef TR_HF_SAFETENSORS_H
#define TR_HF_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"
#include "core/status.h"

typedef enum tr_st_dtype {
    TR_ST_BOOL,
    TR_ST_U8,
    TR_ST_I8,
    TR_ST_I16,
    TR_ST_U16,
    TR_ST_F16,
    TR_ST_BF16,
    TR_ST_I32,
    TR_ST_U32,
    TR_ST_F32,
    TR_ST_I64,
    TR_ST_U64,
    TR_ST_F64,
    TR_ST_DTYPE_COUNT
} tr_st_dtype;

enum { TR_ST_MAX_DIMS = 8 };
/* The reference implementation's limit on the JSON header. */
#define TR_ST_MAX_HEADER ((uint64_t)100 << 20)

typedef struct tr_st_tensor {
    char *name;
    tr_st_dtype dtype;
    int ndim;
    int64_t shape[TR_ST_MAX_DIMS];
    uint64_t begin, end; /* byte range in the data section */
    const void *data;    /* end - begin bytes inside the mapping */
} tr_st_tensor;

typedef struct tr_st_file {
    char *name; /* the path, for messages */
    void *map;  /* the whole file, read-only (NULL for a parsed buffer) */
    size_t map_len;
    tr_st_tensor *t; /* sorted by name */
    int n;
    char **meta_keys, **meta_values;
    int n_meta;
} tr_st_file;

/* The dtype's name in headers ("F32", "BF16", ...) and its element size; -1 for an unknown name. */
const char *tr_st_dtype_name(tr_st_dtype t);
size_t tr_st_dtype_size(tr_st_dtype t);
int tr_st_dtype_parse(const char *name, size_t len);

/* Maps path and checks it. Diagnostics: "safetensors.open" (not a readable regular file),
 * "safetensors.header" (length, JSON, an entry's fields), "safetensors.layout" (ranges that
 * overlap, leave a hole or do not fit the data). */
tr_status tr_st_open(tr_st_file *f, const char *path, tr_diags *d);
/* The same checks on bytes already in memory (they must outlive f); `name` is for messages. */
tr_status tr_st_parse(tr_st_file *f, const void *bytes, size_t len, const char *name, tr_diags *d);
void tr_st_close(tr_st_file *f);

const tr_st_tensor *tr_st_find(const tr_st_file *f, const char *name);
/* The value of metadata key `key`, or NULL. */
const char *tr_st_meta(const tr_st_file *f, const char *key);
/* Elements of a tensor (the product of its shape; 1 for a scalar). */
int64_t tr_st_numel(const tr_st_tensor *t);

/* One tensor to write: data holds numel x dtype size bytes, little-endian, row-major. */
typedef struct tr_st_entry {
    const char *name;
    tr_st_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data;
} tr_st_entry;

/* Writes the tensors in the order given, with metadata pairs (meta_keys[i], meta_values[i]).
 * Names must be distinct and not "__metadata__". Diagnostic "safetensors.write" on failure; the
 * target is then untouched. */
tr_status tr_st_write(const char *path, const tr_st_entry *e, int n, const char *const *meta_keys,
                      const char *const *meta_values, int n_meta, tr_diags *d);

/* The same file written a tensor at a time, so that a converter holds one tensor, not the model:
 * tr_st_stream_open writes the header of the entries (their data unused), each tensor's bytes
 * then go to its place with tr_st_stream_put in any order, and tr_st_stream_commit renames the
 * temporary file over the target once every tensor was put (tr_st_stream_abort removes it). The
 * bytes are tr_st_write's for the same entries. tr_st_stream_put_range puts a tensor's bytes a
 * piece at a time (pieces not overlapping), so that a converter needs no whole-tensor buffer of
 * the file's dtype; the tensor counts as put once all its bytes are. Each piece's writeback is
 * started as it is written, so the commit's fsync waits for what is left, not the whole file. */
typedef struct tr_st_stream {
    char *path, *tmp;
    int fd;
    int n;
    uint64_t *at, *bytes, *filled; /* each tensor's file offset, size, bytes put so far */
    bool *done;
} tr_st_stream;
tr_status tr_st_stream_open(tr_st_stream *s, const char *path, const tr_st_entry *e, int n,
                            const char *const *meta_keys, const char *const *meta_values,
                            int n_meta, tr_diags *d);
tr_status tr_st_stream_put(tr_st_stream *s, int i, const void *data, tr_diags *d);
tr_status tr_st_stream_put_range(tr_st_stream *s, int i, uint64_t offset, const void *data,
                                 uint64_t n_bytes, tr_diags *d);
tr_status tr_st_stream_commit(tr_st_stream *s, tr_diags *d);
void tr_st_stream_abort(tr_st_stream *s);

#endif
