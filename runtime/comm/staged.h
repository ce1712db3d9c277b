/* The host-staged MPI backend of runtime/comm/comm.h for device memory
 * (dist.distributed_backend=mpi on a device; the same tr_comm interface and counters): buffers
 * are copied to host memory, the MPI backend runs the operation, results are copied back. Slow,
 * but any number of ranks can share one GPU, which is how TP/PP/DP are tested on a one-GPU
 * machine.
 *
 * Pointers may be device or host memory (unified addressing). A build without CUDA returns
 * TR_ERR_INVALID with a "comm.no_cuda" diagnostic. */
#ifndef TR_COMM_STAGED_H
#define TR_COMM_STAGED_H

#include <stdbool.h>

#include "runtime/comm/comm.h"

/* compute_stream: the cudaStream_t the model's kernels run on (NULL: the legacy default stream).
 * Collective over ps->world. */
tr_status tr_comm_staged_create(const struct tr_parallel_state *ps, const tr_comm_options *opt,
                                void *compute_stream, tr_diags *diags, tr_comm **out);

/* Whether this build has the backend. */
bool tr_comm_staged_built(void);

#endif
