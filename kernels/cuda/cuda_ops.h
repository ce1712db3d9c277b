/* The CUDA backend of kernels/ops.h. tr_ops_cuda() fills the same table as tr_ops_cpu() with the
 * same semantics (accumulate vs overwrite, ignored targets, planar ce stats, Philox dropout
 * counters, rope table formula, attention lse), on device pointers. Every pointer an op takes,
 * outputs such as sum_squares' *out and ce_loss' loss included, is device memory.
 *
 * The table's functions take no context argument, so they run on the context bound to the
 * calling thread (tr_cuda_bind): its stream, cuBLASLt handle and scratch. Ops are asynchronous
 * on that stream; tr_cuda_sync() waits and surfaces faults from earlier launches. Argument
 * checks happen on the host before any launch and return TR_ERR_INVALID as on the CPU. */
#ifndef TR_CUDA_OPS_H
#define TR_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_cuda_ctx tr_cuda_ctx;

/* Number of usable devices; 0 (and TR_OK) when there is no GPU or no driver. */
int tr_cuda_device_count(void);

/* stream: a cudaStream_t, or NULL for a new non-blocking stream owned by the context.
 * Selects no device: call cudaSetDevice (tr_cuda_select_device) first. */
tr_status tr_cuda_ctx_create(void *stream, tr_cuda_ctx **out);
void tr_cuda_ctx_destroy(tr_cuda_ctx *ctx); /* safe on NULL; unbinds it if bound */
void *tr_cuda_ctx_stream(const tr_cuda_ctx *ctx);
/* A context that launches nothing: bound, every op checks its arguments as always and then
 * returns TR_OK without touching memory or the device. It needs no GPU, so the argument checks
 * can be compared with the CPU table's on any machine (tests/gpu/test_cuda_host.c). */
tr_status tr_cuda_ctx_create_check_only(tr_cuda_ctx **out);

/* Binds ctx to the calling thread for tr_ops_cuda(); NULL unbinds. */
void tr_cuda_bind(tr_cuda_ctx *ctx);
tr_cuda_ctx *tr_cuda_bound(void);

/* Waits for the bound context's stream; TR_ERR_INTERNAL (logged) if a kernel faulted. */
tr_status tr_cuda_sync(void);

/* Device for a rank: local_rank modulo the visible devices, so several ranks may share one GPU
 * (host-staged MPI path). */
tr_status tr_cuda_select_device(int local_rank, int *device);

const tr_ops *tr_ops_cuda(void);

#ifdef __cplusplus
}
#endif

#endif
