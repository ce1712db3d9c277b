/* Distributed checkpoints over LOGICAL tensors. A caller registers each tensor it owns by a
 * layout-independent name, its global shape and the hyper-rectangle (slice) of it this rank holds;
 * saving writes the slices, loading asks for any slice of the global tensor and reads the
 * overlapping pieces of whatever shards exist. Resharding across TP/PP/DP layouts is therefore a
 * property of the storage, not of the model code. This layer is MPI-free: the caller runs the
 * collectives between the explicit steps (see docs/checkpoints.md). */
#ifndef TR_CKPT_H
#define TR_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"
#include "core/status.h"

#define TR_CKPT_FORMAT_VERSION 1
#define TR_CKPT_MAX_DIMS       8
#define TR_CKPT_MANIFEST       "manifest.json"
#define TR_CKPT_TRACKER        "latest_checkpointed_iteration.txt"

typedef enum tr_ckpt_dtype {
    TR_CKPT_F32 = 0,
    TR_CKPT_F64,
    TR_CKPT_F16,
    TR_CKPT_BF16,
    TR_CKPT_I64,
    TR_CKPT_I32,
    TR_CKPT_U8,
    TR_CKPT_DTYPE_COUNT
} tr_ckpt_dtype;

const char *tr_ckpt_dtype_name(tr_ckpt_dtype t);
size_t tr_ckpt_dtype_size(tr_ckpt_dtype t);
/* -1 when the name is unknown. */
int tr_ckpt_dtype_parse(const char *name);

/* A hyper-rectangle of a tensor: offset and extent per dimension (ndim 0 = a scalar). */
typedef struct tr_ckpt_slice {
    int ndim;
    int64_t offset[TR_CKPT_MAX_DIMS];
    int64_t shape[TR_CKPT_MAX_DIMS];
} tr_ckpt_slice;

int64_t tr_ckpt_slice_volume(const tr_ckpt_slice *s);
/* The intersection of a and b; false when it is empty. */
bool tr_ckpt_slice_overlap(const tr_ckpt_slice *a, const tr_ckpt_slice *b, tr_ckpt_slice *out);
bool tr_ckpt_slice_equal(const tr_ckpt_slice *a, const tr_ckpt_slice *b);

/* One registered tensor slice. data is the local slice, contiguous in row-major order. The same
 * name may be registered several times by one rank (e.g. the two model chunks of an interleaved
 * pipeline stage own two layer ranges). Axis hints (-1 = none) say which dimension TP, PP (layer
 * axis) and the distributed optimizer (DP) split; they let tools predict resharding. */
typedef struct tr_ckpt_tensor {
    const char *name;
    tr_ckpt_dtype dtype;
    int ndim;
    int64_t global_shape[TR_CKPT_MAX_DIMS];
    tr_ckpt_slice slice;
    int replica_id; /* 0 = this rank writes the slice; other replicas hold identical bytes */
    int tp_axis, pp_axis, dp_axis;
    void *data;
} tr_ckpt_tensor;

/* A whole tensor (slice = everything), replica 0, no axis hints. */
tr_ckpt_tensor tr_ckpt_tensor_full(const char *name, tr_ckpt_dtype dtype, int ndim,
                                   const int64_t *global_shape, void *data);
/* Restricts t to `parts` equal blocks along axis (the last block takes the remainder), keeping
 * block `index`; data is unchanged (the caller points it at the block's bytes). */
void tr_ckpt_tensor_split(tr_ckpt_tensor *t, int axis, int64_t parts, int64_t index);

/* checkpoint.fully_parallel_save: t is held identically by `group` ranks (this one is number
 * `index`, 0-based; e.g. its DP rank). Cuts t's slice along its first dimension into `group`
 * blocks and makes this rank the writer (replica 0) of block `index`, pointing data at it; a rank
 * left without rows becomes a non-writer. Keep the original registration for loading. */
void tr_ckpt_tensor_spread(tr_ckpt_tensor *t, int index, int group);

/* Coarse grouping for reports: model, optimizer, rng, state (scalars, cursors, scheduler). */
const char *tr_ckpt_tensor_kind(const char *name);

/* The parallel layout a checkpoint was written under (recorded, never needed to load). */
typedef struct tr_ckpt_layout {
    int tp, pp, vpp, dp, cp, ep;
    int dist_opt;
} tr_ckpt_layout;

void tr_ckpt_layout_init(tr_ckpt_layout *l); /* every axis 1, no distributed optimizer */

/* ------------------------------------------------------------------------------------------ */
/* Saving: begin (all ranks) -> write_shards (all ranks) -> caller barrier -> finalize (rank 0)
 * -> commit (rank 0) -> caller barrier/broadcast of the status. */

typedef struct tr_ckpt_progress tr_ckpt_progress;

typedef struct tr_ckpt_save_opts {
    const char *root; /* checkpoint.save */
    int64_t iteration;
    int rank, world; /* every rank in [0, world) takes part and writes an index */
    uint64_t nonce;  /* the same on every rank: names the temporary directory */
    tr_ckpt_layout layout;
    uint64_t config_fingerprint;
    const char *code_version;   /* NULL = "unknown" */
    bool fsync;                 /* false only for tests and benches that measure without it */
    tr_ckpt_progress *progress; /* NULL = silent; a total of 0 is set to this rank's bytes */
} tr_ckpt_save_opts;

void tr_ckpt_save_opts_init(tr_ckpt_save_opts *o, const char *root, int64_t iteration);

typedef struct tr_ckpt_save tr_ckpt_save;

/* A fresh random nonce (rank 0 makes one and broadcasts it). */
uint64_t tr_ckpt_new_nonce(void);

/* Creates <root>/iter_XXXXXXX.tmp-<nonce> (idempotent across ranks). */
tr_status tr_ckpt_save_begin(const tr_ckpt_save_opts *o, tr_ckpt_save **out, tr_diags *d);
/* Writes this rank's replica-0 slices into shard_rNNNNN.bin, fsyncs it, then publishes
 * rank_NNNNN.json (atomically): its presence means this rank finished. Call once per save. */
tr_status tr_ckpt_save_write_shards(tr_ckpt_save *s, const tr_ckpt_tensor *t, int n, tr_diags *d);
/* Rank 0, after every rank's write_shards: merges the rank indexes, checks that every tensor is
 * covered exactly once with consistent metadata, writes manifest.json and fsyncs. */
tr_status tr_ckpt_save_finalize(tr_ckpt_save *s, tr_diags *d);
/* Rank 0: renames the temporary directory to iter_XXXXXXX (swapping out an older one of the
 * same iteration), fsyncs the root, then atomically points the tracker at this iteration. */
tr_status tr_ckpt_save_commit(tr_ckpt_save *s, tr_diags *d);
const char *tr_ckpt_save_tmp_dir(const tr_ckpt_save *s);
/* Frees s; a save that never committed leaves its temporary directory for retention to clear. */
void tr_ckpt_save_free(tr_ckpt_save *s);

/* Single-process convenience: begin, write, finalize, commit with world = 1. */
tr_status tr_ckpt_save_all(const tr_ckpt_save_opts *o, const tr_ckpt_tensor *t, int n, tr_diags *d);

/* most_recent_k: keeps the newest k committed checkpoints (k < 0 keeps all), those whose
 * iteration is a multiple of retain_interval (<= 0: none) and whatever the tracker names; also
 * removes temporary directories of iterations older than the newest committed one. */
tr_status tr_ckpt_retain(const char *root, int64_t k, int64_t retain_interval, tr_diags *d);

/* ------------------------------------------------------------------------------------------ */
/* Asynchronous save: snapshot the slices (a host copy) now, write them on a background thread. */

typedef struct tr_ckpt_async tr_ckpt_async;

tr_status tr_ckpt_async_start(tr_ckpt_save *s, const tr_ckpt_tensor *t, int n, tr_ckpt_async **out,
                              tr_diags *d);
bool tr_ckpt_async_done(const tr_ckpt_async *a);
/* Waits for the writer; its diagnostics are moved into d. Frees a. */
tr_status tr_ckpt_async_join(tr_ckpt_async *a, tr_diags *d);

#endif
