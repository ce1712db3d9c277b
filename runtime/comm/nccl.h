/* The NCCL backend of runtime/comm/comm.h for device memory (dist.distributed_backend=nccl; the
 * same tr_comm interface and counters): one NCCL communicator per process group, bootstrapped
 * from an ncclGetUniqueId broadcast over that group's MPI communicator. Each group has its own
 * CUDA stream; a start makes that stream wait for the work already queued on the compute stream
 * (an event), queues the NCCL call and records a completion event, so compute queued after the
 * start overlaps the transfer. test/wait poll the event against c->timeout_s, and a timeout is a
 * "comm.timeout" diagnostic, as on the MPI backend. NCCL needs one GPU per rank inside a
 * communicator; a duplicate is refused up front with "comm.nccl_shared_gpu".
 *
 * Pointers may be device or host memory (unified addressing). A build without NCCL returns
 * TR_ERR_INVALID with a "comm.no_cuda" diagnostic. */
#ifndef TR_COMM_NCCL_H
#define TR_COMM_NCCL_H

#include <stdbool.h>

#include "runtime/comm/comm.h"

/* compute_stream: the cudaStream_t the model's kernels run on (NULL: the legacy default stream).
 * Collective over ps->world; the device must already be selected (tr_cuda_select_device). */
tr_status tr_comm_nccl_create(const struct tr_parallel_state *ps, const tr_comm_options *opt,
                              void *compute_stream, tr_diags *diags, tr_comm **out);

/* Whether this build has the backend. */
bool tr_comm_nccl_built(void);

#endif
