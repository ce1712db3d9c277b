/* The manifest: the one file that makes a checkpoint directory a checkpoint. JSON, versioned,
 * parsed strictly (unknown keys, wrong types, out-of-range slices and file names that could leave
 * the directory are errors). The per-rank index files written during a save use the same tensor
 * records, so one parser serves both. Layout:
 *   {"format": "trestle-checkpoint", "version": 1, "code_version": "...", "iteration": N,
 *    "config_fingerprint": "16 hex", "world": W,
 *    "layout": {"tp":..,"pp":..,"vpp":..,"dp":..,"cp":..,"ep":..,"dist_opt":0|1},
 *    "files": [{"name": "shard_r00000.bin", "bytes": N}, ...],
 *    "tensors": [{"name": "...", "dtype": "f32", "shape": [..], "tp_axis": -1, "pp_axis": -1,
 *                 "dp_axis": -1, "shards": [{"offset": [..], "shape": [..], "file": 0,
 *                 "pos": N, "bytes": N, "xxh3": "16 hex"}, ...]}, ...]}
 * A rank index has "format": "trestle-checkpoint-rank" and "rank" instead of the layout. */
#ifndef TR_CKPT_MANIFEST_H
#define TR_CKPT_MANIFEST_H

#include "runtime/checkpoint/ckpt.h"

typedef struct tr_ckpt_shard {
    tr_ckpt_slice slice;
    int file; /* index into manifest files */
    uint64_t pos, bytes, xxh3;
} tr_ckpt_shard;

typedef struct tr_ckpt_entry {
    char *name;
    tr_ckpt_dtype dtype;
    int ndim;
    int64_t shape[TR_CKPT_MAX_DIMS];
    int tp_axis, pp_axis, dp_axis;
    tr_ckpt_shard *shards;
    int n_shards, cap_shards;
} tr_ckpt_entry;

typedef struct tr_ckpt_file {
    char *name;
    uint64_t bytes;
} tr_ckpt_file;

typedef struct tr_ckpt_manifest {
    bool is_rank_index;
    int rank; /* rank indexes only */
    char *code_version;
    int64_t iteration;
    uint64_t config_fingerprint;
    int world;
    tr_ckpt_layout layout;
    tr_ckpt_file *files;
    int n_files, cap_files;
    tr_ckpt_entry *tensors;
    int n_tensors, cap_tensors;
} tr_ckpt_manifest;

void tr_ckpt_manifest_init(tr_ckpt_manifest *m);
void tr_ckpt_manifest_free(tr_ckpt_manifest *m);

/* Builders (used by the writer and the merge). */
tr_status tr_ckpt_manifest_add_file(tr_ckpt_manifest *m, const char *name, uint64_t bytes,
                                    int *index);
/* The entry for name, created from proto's metadata when absent; a mismatch with an existing
 * entry's dtype/shape/axes is reported (id checkpoint.inconsistent_tensor) naming the tensor. */
tr_status tr_ckpt_manifest_entry(tr_ckpt_manifest *m, const tr_ckpt_entry *proto,
                                 tr_ckpt_entry **out, const char *where, tr_diags *d);
tr_status tr_ckpt_entry_add_shard(tr_ckpt_entry *e, const tr_ckpt_shard *s);
const tr_ckpt_entry *tr_ckpt_manifest_find(const tr_ckpt_manifest *m, const char *name);
/* Sorts tensors by name and shards by offset: the bytes of a manifest do not depend on the order
 * in which ranks registered their tensors. */
void tr_ckpt_manifest_sort(tr_ckpt_manifest *m);

/* Every slice inside its tensor, shards pairwise disjoint, and (when require_cover) the shards of
 * each tensor tiling it completely; every shard inside its file. path names the file in
 * messages. */
tr_status tr_ckpt_manifest_check(const tr_ckpt_manifest *m, bool require_cover, const char *path,
                                 tr_diags *d);

/* A file name that stays inside the checkpoint directory: no '/', not "." or "..", printable. */
bool tr_ckpt_safe_name(const char *name);

/* Serializes to a malloc'd NUL-terminated string. */
tr_status tr_ckpt_manifest_write(const tr_ckpt_manifest *m, char **out, size_t *len);
/* Strict parse; path is used in messages. Runs tr_ckpt_manifest_check (cover required for
 * manifests, not for rank indexes). */
tr_status tr_ckpt_manifest_parse(const char *text, size_t len, const char *path,
                                 tr_ckpt_manifest *m, tr_diags *d);

#endif
