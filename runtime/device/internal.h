/* Internal to the files of runtime/device/: the device object and what each backend provides. */
#ifndef TR_RUNTIME_DEVICE_INTERNAL_H
#define TR_RUNTIME_DEVICE_INTERNAL_H

#include "runtime/device/device.h"

/* Bytes of device scratch for host scalars moved through ops and collectives. */
#define TR_DEVICE_SCRATCH_BYTES 4096

typedef enum tr_copy_dir { TR_COPY_TO_DEVICE, TR_COPY_TO_HOST, TR_COPY_ON_DEVICE } tr_copy_dir;

typedef struct tr_device_backend {
    tr_status (*alloc)(tr_device *dev, tr_mem_kind kind, size_t bytes, void **out);
    void (*free)(tr_device *dev, tr_mem_kind kind, void *p);
    tr_status (*copy)(tr_device *dev, void *dst, const void *src, size_t bytes, tr_copy_dir dir);
    tr_status (*memset0)(tr_device *dev, void *p, size_t bytes);
    tr_status (*sync)(tr_device *dev);
    tr_status (*comm_create)(tr_device *dev, const struct tr_parallel_state *ps,
                             const tr_comm_options *opt, bool nccl, tr_diags *diags, tr_comm **out);
    size_t (*peak)(const tr_device *dev, tr_mem_kind kind);
    void (*log_peaks)(const tr_device *dev);
    void (*close)(tr_device *dev);
} tr_device_backend;

struct tr_device {
    tr_device_kind kind;
    const char *name;
    const tr_ops *ops;
    const tr_device_backend *be;
    void *scratch;      /* TR_DEVICE_SCRATCH_BYTES of device memory (not on the host device) */
    int64_t host_reads; /* tr_device_to_host calls (not counted on the shared host device) */
    void *impl;
};

/* Each fills dev (kind, name, ops, be, impl) or reports why it cannot. */
tr_status tr_device_cuda_open(tr_device *dev, int local_rank, int local_size, tr_diags *d);
tr_status tr_device_strict_open(tr_device *dev, tr_diags *d);
tr_status tr_device_count_open(tr_device *dev, tr_diags *d);

/* The host backend's copies, zeroing, sync and MPI communicator (host.c), which cpu-count shares;
 * and the per-kind peak lines the counting backends log. */
tr_status tr_device_host_copy(tr_device *dev, void *dst, const void *src, size_t bytes,
                              tr_copy_dir dir);
tr_status tr_device_host_memset0(tr_device *dev, void *p, size_t bytes);
tr_status tr_device_host_sync(tr_device *dev);
tr_status tr_device_host_comm_create(tr_device *dev, const struct tr_parallel_state *ps,
                                     const tr_comm_options *opt, bool nccl, tr_diags *diags,
                                     tr_comm **out);
void tr_device_log_kind_peaks(const size_t *peak, const char *what);

#endif
