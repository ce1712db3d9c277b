/* Internal to the CUDA backends of runtime/comm/ (nccl.c, staged.c): clocks, the CUDA error
 * diagnostic, and the extents of a call's buffers. */
#ifndef TR_COMM_CUDA_INTERNAL_H
#define TR_COMM_CUDA_INTERNAL_H

#include "runtime/comm/comm.h"

#ifdef TRESTLE_HAVE_CUDA
#include <cuda_runtime_api.h>

/* Monotonic seconds. */
double tr_comm_now_s(void);
/* A polling loop's pause: free for the first 200 calls, then 50 us each. */
void tr_comm_nap(int *spins);
/* The "comm.cuda" diagnostic for a failed CUDA call on a group. */
tr_status tr_comm_cuda_failed(tr_comm *c, cudaError_t e, const char *what, int group);
/* Elements a call reads from send and writes to recv (the extents the staging copies). */
void tr_comm_call_extents(const tr_comm_call *call, int p, size_t *send_n, size_t *recv_n);
#endif

#endif
