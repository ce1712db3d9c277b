/* Choosing and opening a device (runtime/device/device.h): the device kinds by name and the
 * backend that serves each. */
#include <stdlib.h>
#include <string.h>

#include "runtime/device/internal.h"

tr_status tr_device_kind_parse(const char *name, tr_device_kind *out) {
    if (!name || !*name || strcmp(name, "cpu") == 0)
        *out = TR_DEVICE_CPU;
    else if (strcmp(name, "cuda") == 0)
        *out = TR_DEVICE_CUDA;
    else if (strcmp(name, "cpu-strict") == 0)
        *out = TR_DEVICE_CPU_STRICT;
    else if (strcmp(name, "cpu-count") == 0)
        *out = TR_DEVICE_CPU_COUNT;
    else
        return TR_ERR_INVALID;
    return TR_OK;
}

tr_status tr_device_open(tr_device_kind kind, int local_rank, int local_size, tr_diags *d,
                         tr_device **out) {
    *out = NULL;
    if (kind == TR_DEVICE_CPU) {
        *out = tr_device_host();
        return TR_OK;
    }
    tr_device *dev = calloc(1, sizeof *dev);
    if (!dev) return TR_ERR_NOMEM;
    tr_status st = kind == TR_DEVICE_CUDA ? tr_device_cuda_open(dev, local_rank, local_size, d)
                   : kind == TR_DEVICE_CPU_COUNT ? tr_device_count_open(dev, d)
                                                 : tr_device_strict_open(dev, d);
    if (st == TR_OK)
        st = dev->be->alloc(dev, TR_MEM_WORKSPACE, TR_DEVICE_SCRATCH_BYTES, &dev->scratch);
    if (st != TR_OK) {
        if (dev->be) dev->be->close(dev);
        free(dev);
        return st;
    }
    *out = dev;
    return TR_OK;
}

tr_status tr_device_open_from_env(int local_rank, int local_size, tr_diags *d, tr_device **out) {
    const char *name = getenv("TRESTLE_DEVICE");
    tr_device_kind kind;
    *out = NULL;
    if (tr_device_kind_parse(name, &kind) != TR_OK) {
        tr_diag_add(d, TR_SEV_ERROR, "device.unknown", NULL, "TRESTLE_DEVICE",
                    "set TRESTLE_DEVICE to cpu or cuda (cpu-strict and cpu-count are test modes)",
                    "unknown device '%s'", name);
        return TR_ERR_CONFIG;
    }
    return tr_device_open(kind, local_rank, local_size, d, out);
}

void tr_device_close(tr_device *dev) {
    if (!dev || dev == tr_device_host()) return;
    if (dev->scratch) dev->be->free(dev, TR_MEM_WORKSPACE, dev->scratch);
    dev->be->close(dev);
    free(dev);
}
