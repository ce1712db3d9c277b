/* The cpu device (runtime/device/device.h): host memory, the CPU op table, the MPI
 * communicator. One shared, stateless instance. */
#include <stdlib.h>
#include <string.h>

#include "runtime/device/internal.h"

static tr_status host_alloc(tr_device *dev, tr_mem_kind kind, size_t bytes, void **out) {
    (void)dev;
    (void)kind;
    *out = calloc(bytes ? bytes : 1, 1);
    return *out ? TR_OK : TR_ERR_NOMEM;
}

static void host_free(tr_device *dev, tr_mem_kind kind, void *p) {
    (void)dev;
    (void)kind;
    free(p);
}

tr_status tr_device_host_copy(tr_device *dev, void *dst, const void *src, size_t bytes,
                              tr_copy_dir dir) {
    (void)dev;
    (void)dir;
    if (bytes) memmove(dst, src, bytes);
    return TR_OK;
}

tr_status tr_device_host_memset0(tr_device *dev, void *p, size_t bytes) {
    (void)dev;
    if (bytes) memset(p, 0, bytes);
    return TR_OK;
}

tr_status tr_device_host_sync(tr_device *dev) {
    (void)dev;
    return TR_OK;
}

tr_status tr_device_host_comm_create(tr_device *dev, const struct tr_parallel_state *ps,
                                     const tr_comm_options *opt, bool nccl, tr_diags *diags,
                                     tr_comm **out) {
    (void)dev;
    (void)nccl; /* NCCL needs device memory: on the host the MPI backend serves both settings */
    return tr_comm_mpi_create(ps, opt, diags, out);
}

static size_t host_peak(const tr_device *dev, tr_mem_kind kind) {
    (void)dev;
    (void)kind;
    return 0;
}

static void host_log_peaks(const tr_device *dev) {
    (void)dev;
}

static void host_close(tr_device *dev) {
    (void)dev;
}

static const tr_device_backend host_backend = {host_alloc,          host_free,
                                               tr_device_host_copy, tr_device_host_memset0,
                                               tr_device_host_sync, tr_device_host_comm_create,
                                               host_peak,           host_log_peaks,
                                               host_close};

/* Stateless: the op table is looked up on use (tr_device_ops), so nothing here changes. */
static tr_device host_device = {TR_DEVICE_CPU, "cpu", NULL, &host_backend, NULL, 0, NULL};

tr_device *tr_device_host(void) {
    return &host_device;
}
