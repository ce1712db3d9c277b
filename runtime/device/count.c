/* The cpu-count device (runtime/device/device.h), FOR TESTS: the cpu device's host memory and op
 * table, with every allocation counted per memory kind in whole pages as cpu-strict counts it,
 * and no guard, so host code may touch its buffers. It measures the memory of what runs on
 * host-visible devices only (the MoE layer), which cpu-strict cannot run. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/device/internal.h"

/* Each allocation's header: its counted length and kind, before the bytes handed out (the
 * header keeps calloc's alignment). */
typedef struct count_head {
    size_t len;
    int kind;
    char pad[64 - sizeof(size_t) - sizeof(int)];
} count_head;

typedef struct count_impl {
    size_t page;
    size_t used[TR_MEM_KIND_COUNT], peak[TR_MEM_KIND_COUNT];
} count_impl;

static count_impl *impl_of(const tr_device *dev) {
    return (count_impl *)dev->impl;
}

static tr_status count_alloc(tr_device *dev, tr_mem_kind kind, size_t bytes, void **out) {
    count_impl *s = impl_of(dev);
    count_head *h = calloc(1, sizeof *h + (bytes ? bytes : 1));
    if (!h) return TR_ERR_NOMEM;
    h->len = bytes ? (bytes + s->page - 1) / s->page * s->page : s->page;
    h->kind = (int)kind;
    s->used[kind] += h->len;
    if (s->used[kind] > s->peak[kind]) s->peak[kind] = s->used[kind];
    *out = h + 1;
    return TR_OK;
}

static void count_free(tr_device *dev, tr_mem_kind kind, void *p) {
    (void)kind;
    count_impl *s = impl_of(dev);
    count_head *h = (count_head *)p - 1;
    size_t *u = &s->used[h->kind];
    *u -= h->len < *u ? h->len : *u;
    free(h);
}

static size_t count_peak(const tr_device *dev, tr_mem_kind kind) {
    return impl_of(dev)->peak[kind];
}

static void count_log_peaks(const tr_device *dev) {
    tr_device_log_kind_peaks(impl_of(dev)->peak, "cpu-count");
}

static void count_close(tr_device *dev) {
    free(dev->impl);
    dev->impl = NULL;
}

static const tr_device_backend count_backend = {count_alloc,         count_free,
                                                tr_device_host_copy, tr_device_host_memset0,
                                                tr_device_host_sync, tr_device_host_comm_create,
                                                count_peak,          count_log_peaks,
                                                count_close};

tr_status tr_device_count_open(tr_device *dev, tr_diags *d) {
    (void)d;
    count_impl *s = calloc(1, sizeof *s);
    if (!s) return TR_ERR_NOMEM;
    long page = sysconf(_SC_PAGESIZE);
    s->page = page > 0 ? (size_t)page : 4096;
    dev->kind = TR_DEVICE_CPU_COUNT;
    dev->name = "cpu-count";
    dev->ops = tr_ops_cpu();
    dev->be = &count_backend;
    dev->impl = s;
    return TR_OK;
}
