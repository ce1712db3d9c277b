/* See runtime/device/device.h: the device interface over whichever backend a device has, and
 * the helpers every backend shares (scalars through device scratch). */
#include "core/log.h"
#include "runtime/device/internal.h"

tr_device_kind tr_device_kind_of(const tr_device *dev) {
    return dev->kind;
}

const char *tr_device_name(const tr_device *dev) {
    return dev->name;
}

bool tr_device_host_visible(const tr_device *dev) {
    return dev->kind == TR_DEVICE_CPU || dev->kind == TR_DEVICE_CPU_COUNT;
}

const tr_ops *tr_device_ops(const tr_device *dev) {
    return dev->kind == TR_DEVICE_CPU ? tr_ops_cpu() : dev->ops;
}

tr_status tr_device_alloc(tr_device *dev, tr_mem_kind kind, size_t bytes, void **out) {
    *out = NULL;
    if ((int)kind < 0 || kind >= TR_MEM_KIND_COUNT) return TR_ERR_INVALID;
    return dev->be->alloc(dev, kind, bytes, out);
}

void tr_device_free(tr_device *dev, tr_mem_kind kind, void *p) {
    if (p) dev->be->free(dev, kind, p);
}

tr_status tr_device_to_device(tr_device *dev, void *dst, const void *host_src, size_t bytes) {
    if (!bytes) return TR_OK;
    if (!dst || !host_src) return TR_ERR_INVALID;
    return dev->be->copy(dev, dst, host_src, bytes, TR_COPY_TO_DEVICE);
}

tr_status tr_device_to_host(tr_device *dev, void *host_dst, const void *src, size_t bytes) {
    if (!bytes) return TR_OK;
    if (!host_dst || !src) return TR_ERR_INVALID;
    if (dev != tr_device_host()) dev->host_reads++;
    return dev->be->copy(dev, host_dst, src, bytes, TR_COPY_TO_HOST);
}

int64_t tr_device_host_reads(const tr_device *dev) {
    return dev->host_reads;
}

tr_status tr_device_copy(tr_device *dev, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return TR_OK;
    if (!dst || !src) return TR_ERR_INVALID;
    return dev->be->copy(dev, dst, src, bytes, TR_COPY_ON_DEVICE);
}

tr_status tr_device_memset0(tr_device *dev, void *p, size_t bytes) {
    if (!bytes) return TR_OK;
    if (!p) return TR_ERR_INVALID;
    return dev->be->memset0(dev, p, bytes);
}

tr_status tr_device_sync(tr_device *dev) {
    return dev->be->sync(dev);
}

tr_status tr_device_sum_squares(tr_device *dev, const float *x, int64_t n, float *host_out) {
    const tr_ops *ops = tr_device_ops(dev);
    if (tr_device_host_visible(dev)) return ops->sum_squares(host_out, x, n);
    TR_TRY(ops->sum_squares((float *)dev->scratch, x, n));
    return tr_device_to_host(dev, host_out, dev->scratch, sizeof *host_out);
}

tr_status tr_device_comm_create(tr_device *dev, const struct tr_parallel_state *ps,
                                const tr_comm_options *opt, bool nccl, tr_diags *diags,
                                tr_comm **out) {
    return dev->be->comm_create(dev, ps, opt, nccl, diags, out);
}

tr_status tr_device_all_reduce_host(tr_device *dev, tr_comm *c, int group, void *buf, size_t count,
                                    tr_comm_dtype t, tr_comm_op op) {
    if (tr_device_host_visible(dev)) return tr_comm_all_reduce_inplace(c, group, buf, count, t, op);
    size_t bytes = count * tr_comm_dtype_size(t);
    if (bytes > TR_DEVICE_SCRATCH_BYTES) return TR_ERR_INVALID;
    TR_TRY(tr_device_to_device(dev, dev->scratch, buf, bytes));
    TR_TRY(tr_comm_all_reduce_inplace(c, group, dev->scratch, count, t, op));
    return tr_device_to_host(dev, buf, dev->scratch, bytes);
}

tr_status tr_device_all_gather_host(tr_device *dev, tr_comm *c, int group, const void *send,
                                    void *recv, size_t count, tr_comm_dtype t) {
    if (tr_device_host_visible(dev)) return tr_comm_all_gather(c, group, send, recv, count, t);
    int size = tr_comm_group_size(c, group);
    size_t bytes = count * tr_comm_dtype_size(t), total = bytes * (size_t)(size > 0 ? size : 1);
    if (2 * total > TR_DEVICE_SCRATCH_BYTES) return TR_ERR_INVALID;
    char *in = dev->scratch, *out = in + total;
    TR_TRY(tr_device_to_device(dev, in, send, bytes));
    TR_TRY(tr_comm_all_gather(c, group, in, out, count, t));
    return tr_device_to_host(dev, recv, out, total);
}

size_t tr_device_scratch_bytes(void) {
    return TR_DEVICE_SCRATCH_BYTES;
}

size_t tr_device_peak(const tr_device *dev, tr_mem_kind kind) {
    return dev->be->peak(dev, kind);
}

void tr_device_log_peaks(const tr_device *dev) {
    dev->be->log_peaks(dev);
}

const char *tr_mem_kind_name(tr_mem_kind kind) {
    static const char *const names[TR_MEM_KIND_COUNT] = {"params", "grads", "optimizer",
                                                         "activations", "workspace"};
    return (int)kind >= 0 && kind < TR_MEM_KIND_COUNT ? names[kind] : "?";
}

void tr_device_log_kind_peaks(const size_t *peak, const char *what) {
    for (int k = 0; k < TR_MEM_KIND_COUNT; k++)
        TR_INFO("device memory %-11s peak %.1f MiB, %zu bytes (%s, whole pages)",
                tr_mem_kind_name((tr_mem_kind)k), (double)peak[k] / (1024.0 * 1024.0), peak[k],
                what);
}
