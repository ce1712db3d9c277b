/* Device memory in one arena per kind: each kind takes one cudaMalloc up front and hands out
 * aligned ranges by bumping an offset, so a training step does no cudaMalloc/cudaFree and the
 * peak of every kind is known exactly. Release is stack-like (mark / reset): the runtime frees
 * only the newest allocation of a kind that way, and otherwise allocates once and keeps it. */
#ifndef TR_CUDA_ARENA_H
#define TR_CUDA_ARENA_H

#include <stddef.h>
#include <stdio.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tr_arena_kind {
    TR_ARENA_PARAMS = 0,
    TR_ARENA_GRADS,
    TR_ARENA_OPTIMIZER,
    TR_ARENA_ACTIVATIONS,
    TR_ARENA_WORKSPACE,
    TR_ARENA_KIND_COUNT
} tr_arena_kind;

#define TR_ARENA_ALIGN 256 /* cuBLASLt and 16-byte vector loads want at least this */

typedef struct tr_arena {
    tr_arena_kind kind;
    char *base;      /* device memory (or caller memory for tr_arena_init) */
    size_t capacity; /* bytes */
    size_t used;     /* bytes handed out, padding included */
    size_t peak;     /* highest `used` since creation or tr_arena_reset_peak */
    int owned;       /* base came from cudaMalloc */
} tr_arena;

typedef struct tr_arenas {
    tr_arena a[TR_ARENA_KIND_COUNT];
} tr_arenas;

const char *tr_arena_kind_name(tr_arena_kind k);

/* Accounting over memory the caller owns (used by tests and by sub-allocators). */
tr_status tr_arena_init(tr_arena *a, tr_arena_kind kind, void *base, size_t capacity);
/* One cudaMalloc of `capacity` bytes; TR_ERR_NOMEM (logged with the kind and size) on failure. */
tr_status tr_arena_create(tr_arena *a, tr_arena_kind kind, size_t capacity);
void tr_arena_destroy(tr_arena *a); /* frees owned memory; safe on a zeroed arena */

/* `bytes` rounded up to TR_ARENA_ALIGN; TR_ERR_NOMEM (logged: kind, request, used, capacity)
 * when it does not fit, leaving the arena unchanged. A zero-byte request returns a valid
 * aligned pointer and uses nothing. */
tr_status tr_arena_alloc(tr_arena *a, size_t bytes, void **out);
size_t tr_arena_mark(const tr_arena *a);
/* Releases everything allocated after `mark`; TR_ERR_INVALID for a mark above `used`. */
tr_status tr_arena_reset(tr_arena *a, size_t mark);
void tr_arena_reset_peak(tr_arena *a);

/* Capacities per kind (bytes, 0 = none); destroys what was made on failure. */
tr_status tr_arenas_create(tr_arenas *s, const size_t capacity[TR_ARENA_KIND_COUNT]);
void tr_arenas_destroy(tr_arenas *s);
size_t tr_arenas_peak_total(const tr_arenas *s);
/* One line per kind (used, peak, capacity in MiB) plus the total, through tr_log at INFO. */
void tr_arenas_log_peaks(const tr_arenas *s);

#ifdef __cplusplus
}
#endif

#endif
