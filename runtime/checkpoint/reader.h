/* Loading: open one checkpoint directory, then read any slice of any tensor. Each read fetches the
 * overlapping pieces of whatever shards were saved (resharding is an intersection of
 * hyper-rectangles) and verifies the checksum of every shard it touches. Files are opened only
 * inside the checkpoint directory (no "..", no absolute paths, no symbolic links), and every
 * error names the tensor and the file. */
#ifndef TR_CKPT_READER_H
#define TR_CKPT_READER_H

#include "runtime/checkpoint/ckpt.h"
#include "runtime/checkpoint/manifest.h"

typedef struct tr_ckpt_reader tr_ckpt_reader;

/* The directory of the checkpoint to load from root: iteration `step`, or (step < 0) the one the
 * tracker names. *iter_dir is malloc'd. TR_ERR_NOTFOUND (checkpoint.no_checkpoint) when there is
 * none. */
tr_status tr_ckpt_find(const char *root, int64_t step, char **iter_dir, int64_t *iteration,
                       tr_diags *d);

/* Parses and checks the manifest and that every data file exists with the recorded size. */
tr_status tr_ckpt_open(const char *iter_dir, tr_ckpt_reader **out, tr_diags *d);
void tr_ckpt_close(tr_ckpt_reader *r);
const tr_ckpt_manifest *tr_ckpt_reader_manifest(const tr_ckpt_reader *r);

/* Reads slice `want` of tensor `name` (dtype must match) into dst, contiguous row-major. */
tr_status tr_ckpt_read(tr_ckpt_reader *r, const char *name, tr_ckpt_dtype dtype,
                       const tr_ckpt_slice *want, void *dst, tr_diags *d);
/* Reads each t[i].slice into t[i].data (every replica loads); the global shapes must match. */
tr_status tr_ckpt_load_tensors(tr_ckpt_reader *r, const tr_ckpt_tensor *t, int n, tr_diags *d);
/* Checksums every shard; reports every bad one, not just the first. progress may be NULL. */
tr_status tr_ckpt_verify(tr_ckpt_reader *r, tr_ckpt_progress *progress, tr_diags *d);

#endif
