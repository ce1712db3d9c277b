/* The cuda device (runtime/device/device.h): the GPU chosen by local rank, a context with its own
 * stream bound to this thread, one arena per memory kind, copies and memsets on that stream so
 * they are ordered with the ops. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "runtime/comm/nccl.h"
#include "runtime/comm/staged.h"
#include "runtime/device/internal.h"

#ifdef TRESTLE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/arena.h"
#include "kernels/cuda/cuda_ops.h"

typedef struct cuda_impl {
    tr_cuda_ctx *ctx;
    cudaStream_t stream;
    int device;
    tr_arenas arenas;
    /* The newest allocation of each kind and the arena mark before it, so freeing it (the
     * pipeline's transfer buffers, a relayout's old buffers) gives the memory back. */
    void *last[TR_MEM_KIND_COUNT];
    size_t last_mark[TR_MEM_KIND_COUNT];
} cuda_impl;

static cuda_impl *impl_of(const tr_device *dev) {
    return dev->impl;
}

static tr_status cuda_failed(cudaError_t e, const char *what) {
    TR_ERROR("cuda device: %s failed: %s", what, cudaGetErrorName(e));
    return e == cudaErrorMemoryAllocation ? TR_ERR_NOMEM : TR_ERR_INTERNAL;
}

static tr_status cuda_alloc(tr_device *dev, tr_mem_kind kind, size_t bytes, void **out) {
    cuda_impl *c = impl_of(dev);
    tr_arena *a = &c->arenas.a[kind];
    size_t mark = tr_arena_mark(a);
    TR_TRY(tr_arena_alloc(a, bytes, out));
    c->last[kind] = *out;
    c->last_mark[kind] = mark;
    cudaError_t e = bytes ? cudaMemsetAsync(*out, 0, bytes, c->stream) : cudaSuccess;
    return e == cudaSuccess ? TR_OK : cuda_failed(e, "cudaMemsetAsync");
}

static void cuda_free(tr_device *dev, tr_mem_kind kind, void *p) {
    cuda_impl *c = impl_of(dev);
    if (p != c->last[kind]) return; /* released with the arena */
    tr_arena_reset(&c->arenas.a[kind], c->last_mark[kind]);
    c->last[kind] = NULL;
}

static tr_status cuda_copy(tr_device *dev, void *dst, const void *src, size_t bytes,
                           tr_copy_dir dir) {
    cuda_impl *c = impl_of(dev);
    enum cudaMemcpyKind k = dir == TR_COPY_TO_DEVICE ? cudaMemcpyHostToDevice
                            : dir == TR_COPY_TO_HOST ? cudaMemcpyDeviceToHost
                                                     : cudaMemcpyDeviceToDevice;
    /* On the compute stream, so a copy sees every op queued before it. From pageable host
     * memory the call returns once the source is staged, so the caller may reuse it. */
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k, c->stream);
    if (e != cudaSuccess) return cuda_failed(e, "cudaMemcpyAsync");
    if (dir != TR_COPY_TO_HOST) return TR_OK;
    e = cudaStreamSynchronize(c->stream);
    return e == cudaSuccess ? TR_OK : cuda_failed(e, "cudaStreamSynchronize");
}

static tr_status cuda_memset0(tr_device *dev, void *p, size_t bytes) {
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, impl_of(dev)->stream);
    return e == cudaSuccess ? TR_OK : cuda_failed(e, "cudaMemsetAsync");
}

static tr_status cuda_sync(tr_device *dev) {
    (void)dev;
    return tr_cuda_sync();
}

static tr_status cuda_comm_create(tr_device *dev, const struct tr_parallel_state *ps,
                                  const tr_comm_options *opt, bool nccl, tr_diags *diags,
                                  tr_comm **out) {
    void *stream = impl_of(dev)->stream;
    if (nccl && !tr_comm_nccl_built()) {
        tr_diag_add(diags, TR_SEV_WARNING, "device.no_nccl", NULL, "dist.distributed_backend",
                    "build with NCCL (TRESTLE_NCCL_LIB), or set dist.distributed_backend=mpi",
                    "this build has no NCCL: communication goes through the host-staged MPI "
                    "path");
        nccl = false;
    }
    return nccl ? tr_comm_nccl_create(ps, opt, stream, diags, out)
                : tr_comm_staged_create(ps, opt, stream, diags, out);
}

static size_t cuda_peak(const tr_device *dev, tr_mem_kind kind) {
    return impl_of(dev)->arenas.a[kind].peak;
}

static void cuda_log_peaks(const tr_device *dev) {
    tr_arenas_log_peaks(&impl_of(dev)->arenas);
}

static void cuda_close(tr_device *dev) {
    cuda_impl *c = impl_of(dev);
    if (!c) return;
    if (c->ctx) tr_cuda_sync();
    tr_arenas_destroy(&c->arenas);
    tr_cuda_ctx_destroy(c->ctx);
    free(c);
    dev->impl = NULL;
}

static const tr_device_backend cuda_backend = {cuda_alloc,   cuda_free,      cuda_copy,
                                               cuda_memset0, cuda_sync,      cuda_comm_create,
                                               cuda_peak,    cuda_log_peaks, cuda_close};

/* Each kind reserves its share of this rank's memory up front (one cudaMalloc per kind, no
 * allocation during steps). The shares fit fp32 AdamW training: optimizer state is twice the
 * parameters, activations the rest. TRESTLE_CUDA_MEMORY_MB sets the rank's budget; by default
 * 90% of the GPU divided among the ranks sharing it. */
static tr_status arena_sizes(int local_size, size_t cap[TR_ARENA_KIND_COUNT]) {
    static const double share[TR_ARENA_KIND_COUNT] = {0.14, 0.14, 0.28, 0.40, 0.04};
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (e != cudaSuccess) return cuda_failed(e, "cudaMemGetInfo");
    int devices = tr_cuda_device_count();
    int sharing = devices > 0 ? (local_size + devices - 1) / devices : 1;
    double budget = 0.9 * (double)total_b / (sharing > 0 ? sharing : 1);
    const char *env = getenv("TRESTLE_CUDA_MEMORY_MB");
    if (env && *env) budget = atof(env) * 1024.0 * 1024.0;
    for (int k = 0; k < TR_ARENA_KIND_COUNT; k++) cap[k] = (size_t)(budget * share[k]);
    return TR_OK;
}

tr_status tr_device_cuda_open(tr_device *dev, int local_rank, int local_size, tr_diags *d) {
    if (tr_cuda_device_count() < 1) {
        tr_diag_add(d, TR_SEV_ERROR, "device.unavailable", NULL, "TRESTLE_DEVICE",
                    "run on a machine with an NVIDIA GPU, or set TRESTLE_DEVICE=cpu",
                    "TRESTLE_DEVICE=cuda, but no CUDA device is visible");
        return TR_ERR_CONFIG;
    }
    cuda_impl *c = calloc(1, sizeof *c);
    if (!c) return TR_ERR_NOMEM;
    dev->kind = TR_DEVICE_CUDA;
    dev->name = "cuda";
    dev->ops = tr_ops_cuda();
    dev->be = &cuda_backend;
    dev->impl = c;
    TR_TRY(tr_cuda_select_device(local_rank, &c->device));
    TR_TRY(tr_cuda_ctx_create(NULL, &c->ctx));
    tr_cuda_bind(c->ctx);
    c->stream = (cudaStream_t)tr_cuda_ctx_stream(c->ctx);
    size_t cap[TR_ARENA_KIND_COUNT];
    TR_TRY(arena_sizes(local_size, cap));
    tr_status st = tr_arenas_create(&c->arenas, cap);
    if (st != TR_OK) {
        tr_diag_add(d, TR_SEV_ERROR, "device.memory", NULL, "TRESTLE_CUDA_MEMORY_MB",
                    "set TRESTLE_CUDA_MEMORY_MB to what this rank may use, or run fewer ranks "
                    "per GPU",
                    "could not reserve device memory on GPU %d (the log has the sizes)", c->device);
        return st;
    }
    TR_INFO("device: cuda, GPU %d (local rank %d), %.0f MiB reserved", c->device, local_rank,
            (double)(cap[0] + cap[1] + cap[2] + cap[3] + cap[4]) / (1024.0 * 1024.0));
    return TR_OK;
}

#else

tr_status tr_device_cuda_open(tr_device *dev, int local_rank, int local_size, tr_diags *d) {
    (void)dev;
    (void)local_rank;
    (void)local_size;
    tr_diag_add(d, TR_SEV_ERROR, "device.unavailable", NULL, "TRESTLE_DEVICE",
                "rebuild where nvcc is found (CMake enables CUDA then), or set TRESTLE_DEVICE=cpu",
                "TRESTLE_DEVICE=cuda, but this build has no CUDA backend");
    return TR_ERR_CONFIG;
}

#endif
