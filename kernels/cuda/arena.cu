/* Device arenas: bump allocation over one cudaMalloc per kind, with used/peak accounting. */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "core/log.h"
}
#include "kernels/cuda/arena.h"

static const char *const g_kind_names[TR_ARENA_KIND_COUNT] = {"params", "grads", "optimizer",
                                                              "activations", "workspace"};

extern "C" const char *tr_arena_kind_name(tr_arena_kind k) {
    return (unsigned)k < TR_ARENA_KIND_COUNT ? g_kind_names[k] : "unknown";
}

static double mib(size_t b) {
    return (double)b / (1024.0 * 1024.0);
}

extern "C" tr_status tr_arena_init(tr_arena *a, tr_arena_kind kind, void *base, size_t capacity) {
    if (!a || (unsigned)kind >= TR_ARENA_KIND_COUNT || (capacity && !base)) return TR_ERR_INVALID;
    if ((uintptr_t)base % TR_ARENA_ALIGN) return TR_ERR_INVALID;
    a->kind = kind;
    a->base = (char *)base;
    a->capacity = capacity;
    a->used = a->peak = 0;
    a->owned = 0;
    return TR_OK;
}

extern "C" tr_status tr_arena_create(tr_arena *a, tr_arena_kind kind, size_t capacity) {
    if (!a || (unsigned)kind >= TR_ARENA_KIND_COUNT) return TR_ERR_INVALID;
    void *base = NULL;
    if (capacity) {
        cudaError_t e = cudaMalloc(&base, capacity);
        if (e != cudaSuccess) {
            tr_log(TR_LOG_ERROR,
                   "CUDA arena '%s': cudaMalloc of %.1f MiB failed (%s); lower the micro batch "
                   "size or sequence length, or use recompute / a larger tensor-parallel size",
                   tr_arena_kind_name(kind), mib(capacity), cudaGetErrorString(e));
            cudaGetLastError();
            return e == cudaErrorMemoryAllocation ? TR_ERR_NOMEM : TR_ERR_INTERNAL;
        }
    }
    tr_status st = tr_arena_init(a, kind, base, capacity); /* cudaMalloc aligns to 256 or more */
    a->owned = capacity != 0;
    return st;
}

extern "C" void tr_arena_destroy(tr_arena *a) {
    if (!a) return;
    if (a->owned) cudaFree(a->base);
    a->base = NULL;
    a->capacity = a->used = a->peak = 0;
    a->owned = 0;
}

extern "C" tr_status tr_arena_alloc(tr_arena *a, size_t bytes, void **out) {
    if (!a || !out) return TR_ERR_INVALID;
    *out = NULL;
    size_t rounded = (bytes + TR_ARENA_ALIGN - 1) / TR_ARENA_ALIGN * TR_ARENA_ALIGN;
    if (rounded < bytes || rounded > a->capacity - a->used) {
        tr_log(TR_LOG_ERROR,
               "CUDA arena '%s' is full: %zu bytes asked with %.1f of %.1f MiB in use; raise its "
               "capacity or lower the micro batch size",
               tr_arena_kind_name(a->kind), bytes, mib(a->used), mib(a->capacity));
        return TR_ERR_NOMEM;
    }
    *out = a->base + a->used;
    a->used += rounded;
    if (a->used > a->peak) a->peak = a->used;
    return TR_OK;
}

extern "C" size_t tr_arena_mark(const tr_arena *a) {
    return a ? a->used : 0;
}

extern "C" tr_status tr_arena_reset(tr_arena *a, size_t mark) {
    if (!a || mark > a->used) return TR_ERR_INVALID;
    a->used = mark;
    return TR_OK;
}

extern "C" void tr_arena_reset_peak(tr_arena *a) {
    if (a) a->peak = a->used;
}

extern "C" tr_status tr_arenas_create(tr_arenas *s, const size_t capacity[TR_ARENA_KIND_COUNT]) {
    if (!s || !capacity) return TR_ERR_INVALID;
    for (int k = 0; k < TR_ARENA_KIND_COUNT; k++) s->a[k] = tr_arena{};
    for (int k = 0; k < TR_ARENA_KIND_COUNT; k++) {
        tr_status st = tr_arena_create(&s->a[k], (tr_arena_kind)k, capacity[k]);
        if (st != TR_OK) {
            tr_arenas_destroy(s);
            return st;
        }
    }
    return TR_OK;
}

extern "C" void tr_arenas_destroy(tr_arenas *s) {
    if (!s) return;
    for (int k = 0; k < TR_ARENA_KIND_COUNT; k++) tr_arena_destroy(&s->a[k]);
}

extern "C" size_t tr_arenas_peak_total(const tr_arenas *s) {
    size_t t = 0;
    if (s)
        for (int k = 0; k < TR_ARENA_KIND_COUNT; k++) t += s->a[k].peak;
    return t;
}

extern "C" void tr_arenas_log_peaks(const tr_arenas *s) {
    if (!s) return;
    for (int k = 0; k < TR_ARENA_KIND_COUNT; k++) {
        const tr_arena *a = &s->a[k];
        tr_log(TR_LOG_INFO, "device memory %-11s used %9.1f MiB, peak %9.1f MiB of %9.1f MiB",
               tr_arena_kind_name((tr_arena_kind)k), mib(a->used), mib(a->peak), mib(a->capacity));
    }
    tr_log(TR_LOG_INFO, "device memory peak total %.1f MiB", mib(tr_arenas_peak_total(s)));
}
