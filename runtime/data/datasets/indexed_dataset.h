/* Megatron's indexed dataset (.bin token file + .idx index), read and written byte-compatibly
 * (layout: docs/data.md and reference megatron-core.md §8.1). The reader memory-maps both files
 * and checks every header field and offset before handing anything out, so a damaged or
 * mismatched pair is reported once, at open, with the file and the broken field. */
#ifndef TR_DATA_INDEXED_DATASET_H
#define TR_DATA_INDEXED_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/diag.h"
#include "core/status.h"

/* Megatron's DType codes, as stored in byte 17 of the .idx. */
typedef enum tr_token_dtype {
    TR_DTYPE_UINT8 = 1,
    TR_DTYPE_INT8 = 2,
    TR_DTYPE_INT16 = 3,
    TR_DTYPE_INT32 = 4,
    TR_DTYPE_INT64 = 5,
    TR_DTYPE_FLOAT64 = 6,
    TR_DTYPE_FLOAT32 = 7,
    TR_DTYPE_UINT16 = 8
} tr_token_dtype;

/* Bytes per element; 0 for a code Megatron does not define. */
size_t tr_token_dtype_size(int code);
const char *tr_token_dtype_name(int code);
/* The dtype Megatron's preprocessing picks for a vocabulary: uint16 below 65500, else int32. */
tr_token_dtype tr_token_dtype_for_vocab(int64_t vocab_size);

/* The parsed .idx: pointers into the mapped file (or the caller's buffer), never copies. The
 * arrays start at byte 34, so they are not aligned for their element type: read them through the
 * accessors below, which load bytes rather than dereference misaligned pointers. */
typedef struct tr_idx_view {
    int dtype;
    uint64_t n_sequences;
    uint64_t n_documents;             /* number of entries of document_indices (documents + 1) */
    const uint8_t *sequence_lengths;  /* int32[n_sequences] */
    const uint8_t *sequence_pointers; /* int64[n_sequences] */
    const uint8_t *document_indices;  /* int64[n_documents] */
    const uint8_t *sequence_modes;    /* int8[n_sequences]; NULL without the multimodal trailer */
} tr_idx_view;

static inline int32_t tr_idx_length(const tr_idx_view *v, uint64_t i) {
    int32_t x;
    memcpy(&x, v->sequence_lengths + 4 * i, 4);
    return x;
}
static inline int64_t tr_idx_pointer(const tr_idx_view *v, uint64_t i) {
    int64_t x;
    memcpy(&x, v->sequence_pointers + 8 * i, 8);
    return x;
}
static inline int64_t tr_idx_document(const tr_idx_view *v, uint64_t i) {
    int64_t x;
    memcpy(&x, v->document_indices + 8 * i, 8);
    return x;
}

/* Parses and checks an in-memory .idx. bin_size is the size of the matching .bin in bytes, or -1
 * to skip the checks against it. name is used in messages. The buffer must outlive the view. */
tr_status tr_idx_parse(const void *buf, size_t size, int64_t bin_size, const char *name,
                       tr_idx_view *out, tr_diags *diags);

typedef struct tr_indexed_dataset {
    tr_idx_view idx;
    const uint8_t *bin;
    size_t bin_size, idx_size;
    void *idx_map, *bin_map; /* mappings to release */
    char *prefix;
} tr_indexed_dataset;

/* Opens <prefix>.idx and <prefix>.bin. On failure *ds is left empty and diags say why. */
tr_status tr_indexed_open(tr_indexed_dataset *ds, const char *prefix, tr_diags *diags);
void tr_indexed_close(tr_indexed_dataset *ds);

static inline uint64_t tr_indexed_n_sequences(const tr_indexed_dataset *ds) {
    return ds->idx.n_sequences;
}
/* Documents, i.e. len(document_indices) - 1. */
static inline uint64_t tr_indexed_n_documents(const tr_indexed_dataset *ds) {
    return ds->idx.n_documents - 1;
}

/* Copies tokens [offset, offset+count) of sequence i into out as int64, converting from the file's
 * dtype. Fails (TR_ERR_INVALID) when the range leaves the sequence. */
tr_status tr_indexed_read(const tr_indexed_dataset *ds, uint64_t i, uint64_t offset, uint64_t count,
                          int64_t *out);

/* Writer: tokens are appended sequence by sequence; end_document closes a document made of the
 * sequences added since the previous one. finish writes the .idx; the .bin is streamed. */
typedef struct tr_indexed_writer {
    int dtype;
    void *bin; /* FILE* */
    char *idx_path, *bin_path;
    int32_t *lengths;
    int64_t *doc_indices;
    uint64_t n_seq, cap_seq, n_doc, cap_doc;
    bool failed;
} tr_indexed_writer;

tr_status tr_indexed_writer_open(tr_indexed_writer *w, const char *prefix, tr_token_dtype dtype,
                                 tr_diags *diags);
/* Fails with a diagnostic when a token does not fit the dtype. */
tr_status tr_indexed_writer_add(tr_indexed_writer *w, const int64_t *tokens, uint64_t n,
                                tr_diags *diags);
tr_status tr_indexed_writer_end_document(tr_indexed_writer *w);
tr_status tr_indexed_writer_finish(tr_indexed_writer *w, tr_diags *diags);
/* Releases everything; removes the partial files unless finish succeeded. */
void tr_indexed_writer_free(tr_indexed_writer *w);

#endif
