/* On-disk cache of built dataset indices. A cache entry is one file named after a key: the
 * xxHash3 of a description string holding everything that determines the indices (the data's
 * identity and sequence lengths, split range, sample count, seed, sequence length, flags). A
 * changed input gives a new key, so a stale entry is never read; a damaged entry is reported.
 *
 * Multi-rank protocol (the caller owns the communication, this code is MPI-free): rank 0 calls
 * with TR_INDEX_BUILD_OR_LOAD, which builds and writes missing entries; every rank then passes a
 * barrier; the other ranks call with TR_INDEX_LOAD_ONLY, which reads what rank 0 wrote and fails
 * if it is missing. Files are written to a temporary name and renamed, so a reader never sees a
 * half-written entry. */
#ifndef TR_DATA_INDEX_CACHE_H
#define TR_DATA_INDEX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"
#include "core/status.h"

typedef enum tr_index_cache_mode {
    TR_INDEX_NO_CACHE = 0,  /* always build in memory, never touch the disk */
    TR_INDEX_BUILD_OR_LOAD, /* rank 0 (or a single process): load on a hit, else build and save */
    TR_INDEX_LOAD_ONLY      /* other ranks after the barrier: load, error on a miss */
} tr_index_cache_mode;

uint64_t tr_index_cache_key(const char *description);

/* One array of a cache entry: *data points to count elements of elem bytes. load allocates. */
typedef struct tr_cache_array {
    void **data;
    int64_t *count;
    size_t elem;
} tr_cache_array;

/* <dir>/<key as 16 hex digits>-<name>.tridx */
char *tr_index_cache_path(const char *dir, uint64_t key, const char *name);

/* Writes the arrays atomically; creates dir if needed. */
tr_status tr_index_cache_save(const char *dir, uint64_t key, const char *name,
                              const tr_cache_array *arrays, int n, tr_diags *diags);
/* *hit = false (TR_OK) when there is no entry; an entry that exists but is damaged or belongs to
 * another key is an error. On a hit every array is allocated (free() each). */
tr_status tr_index_cache_load(const char *dir, uint64_t key, const char *name,
                              const tr_cache_array *arrays, int n, int *hit, tr_diags *diags);

#endif
