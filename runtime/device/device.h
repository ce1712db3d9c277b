/* Where the model's buffers live and which op table computes on them: the host (CPU, the
 * reference), an NVIDIA GPU (CUDA), or a test mode of the CPU backend that proves the runtime
 * touches its buffers only through ops and explicit copies (cpu-strict).
 *
 * Everything the runtime reads or writes in a "device buffer" (parameters, gradients, optimizer
 * state, activations, token ids, pipeline transfers) goes through this layer or the op table.
 * Host code never dereferences a device buffer; scalars it needs (the loss, the grad norm) come
 * back through tr_device_to_host, host values go in through tr_device_to_device.
 *
 * Backends (TRESTLE_DEVICE, default cpu):
 *   cpu         host malloc, tr_ops_cpu(), copies are memcpy: the reference, bitwise what the
 *               runtime always computed.
 *   cuda        the GPU of tr_cuda_select_device(local rank), a context with its own stream bound
 *               to the calling thread, tr_ops_cuda(), one arena per memory kind
 *               (kernels/cuda/arena.h) whose peaks are logged at the end of training.
 *   cpu-strict  FOR TESTS ONLY: tr_ops_cpu() behind a guard. Every device buffer is its own
 *               mmap'ed mapping kept PROT_NONE except while an op, a copy or a communication on
 *               it runs, so any host access elsewhere is a segmentation fault; and every pointer
 *               handed to an op or a collective must lie inside a device buffer. Slow (two
 *               mprotect calls per buffer per op); the results are bitwise the cpu backend's.
 *   cpu-count   FOR TESTS ONLY: the cpu backend (host-visible) with cpu-strict's accounting of
 *               peaks per kind in whole pages, to measure what only host-visible devices run
 *               (the MoE layer) against the planner (runtime/device/count.c). */
#ifndef TR_RUNTIME_DEVICE_H
#define TR_RUNTIME_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/diag.h"
#include "kernels/ops.h"
#include "runtime/comm/comm.h"

struct tr_parallel_state;

typedef enum tr_device_kind {
    TR_DEVICE_CPU = 0,
    TR_DEVICE_CUDA,
    TR_DEVICE_CPU_STRICT,
    TR_DEVICE_CPU_COUNT
} tr_device_kind;

/* What a buffer holds: on CUDA each kind has its own arena (and logged peak). */
typedef enum tr_mem_kind {
    TR_MEM_PARAMS = 0,
    TR_MEM_GRADS,
    TR_MEM_OPTIMIZER,
    TR_MEM_ACTIVATIONS,
    TR_MEM_WORKSPACE,
    TR_MEM_KIND_COUNT
} tr_mem_kind;

typedef struct tr_device tr_device;

/* The plain host device (cpu): shared, stateless, never closed. */
tr_device *tr_device_host(void);

/* Parses "cpu", "cuda", "cpu-strict" or "cpu-count"; TR_ERR_INVALID for anything else. */
tr_status tr_device_kind_parse(const char *name, tr_device_kind *out);

/* The backend named by TRESTLE_DEVICE (unset or empty: cpu) for the rank with this local rank
 * and number of ranks on its node. cuda without a CUDA build, or without a visible GPU, is a
 * "device.unavailable" diagnostic (TR_ERR_CONFIG), as is an unknown name ("device.unknown").
 * *out is tr_device_host() for cpu. */
tr_status tr_device_open_from_env(int local_rank, int local_size, tr_diags *d, tr_device **out);
tr_status tr_device_open(tr_device_kind kind, int local_rank, int local_size, tr_diags *d,
                         tr_device **out);
/* Frees what the device still holds (safe on NULL and on the host device). */
void tr_device_close(tr_device *dev);

tr_device_kind tr_device_kind_of(const tr_device *dev);
const char *tr_device_name(const tr_device *dev);
/* Whether host code may read and write this device's buffers directly (cpu, cpu-count). */
bool tr_device_host_visible(const tr_device *dev);
const tr_ops *tr_device_ops(const tr_device *dev);

/* Zeroed device memory of `bytes`; TR_ERR_NOMEM (logged with the kind) when it does not fit. */
tr_status tr_device_alloc(tr_device *dev, tr_mem_kind kind, size_t bytes, void **out);
/* Gives a buffer back (NULL is fine). On CUDA arena memory is released when the device closes,
 * except the most recent allocation of its kind, which is released at once. */
void tr_device_free(tr_device *dev, tr_mem_kind kind, void *p);

/* Copies: host -> device, device -> host (waits for the device), device -> device. */
tr_status tr_device_to_device(tr_device *dev, void *dst, const void *host_src, size_t bytes);
tr_status tr_device_to_host(tr_device *dev, void *host_dst, const void *src, size_t bytes);
tr_status tr_device_copy(tr_device *dev, void *dst, const void *src, size_t bytes);
tr_status tr_device_memset0(tr_device *dev, void *p, size_t bytes);
/* Waits for every op queued on the device. */
tr_status tr_device_sync(tr_device *dev);
/* Device-to-host copies made so far (0 on the host device, where reads are no copies): each is a
 * point where the host waits for the device, so tests count them per step. */
int64_t tr_device_host_reads(const tr_device *dev);

/* *host_out = sum of squares of the device buffer x (ops->sum_squares into a device scalar, then
 * one small copy back). */
tr_status tr_device_sum_squares(tr_device *dev, const float *x, int64_t n, float *host_out);

/* The run's communicator for this device: MPI on cpu; on cuda, dist.distributed_backend nccl
 * -> tr_comm_nccl_create, mpi -> tr_comm_staged_create (on the device's compute stream); on
 * cpu-strict, MPI behind the strict guard. */
tr_status tr_device_comm_create(tr_device *dev, const struct tr_parallel_state *ps,
                                const tr_comm_options *opt, bool nccl, tr_diags *diags,
                                tr_comm **out);

/* All-reduce / all-gather of a few HOST values (loss sums, norms, stop flags) on a
 * communicator made for this device: staged through device scratch where the backend needs
 * device buffers. count is at most 64 elements of 8 bytes. */
tr_status tr_device_all_reduce_host(tr_device *dev, tr_comm *c, int group, void *buf, size_t count,
                                    tr_comm_dtype t, tr_comm_op op);
tr_status tr_device_all_gather_host(tr_device *dev, tr_comm *c, int group, const void *send,
                                    void *recv, size_t count, tr_comm_dtype t);

/* The workspace bytes a non-host device keeps for itself from its opening (scalars staged for
 * the host); for sizing (runtime/plan). */
size_t tr_device_scratch_bytes(void);

/* Peak bytes per memory kind so far (0 where the backend does not count). */
size_t tr_device_peak(const tr_device *dev, tr_mem_kind kind);
/* Logs one line per kind with its peak and the total (CUDA; nothing on cpu). */
void tr_device_log_peaks(const tr_device *dev);
const char *tr_mem_kind_name(tr_mem_kind kind);

#endif
