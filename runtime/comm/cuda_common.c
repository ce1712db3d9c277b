/* What the CUDA backends of the comm layer share (runtime/comm/cuda_internal.h). */
#include "runtime/comm/cuda_internal.h"

#ifdef TRESTLE_HAVE_CUDA

#include <time.h>

double tr_comm_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void tr_comm_nap(int *spins) {
    if (++*spins < 200) return;
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

tr_status tr_comm_cuda_failed(tr_comm *c, cudaError_t e, const char *what, int group) {
    return tr_diag_add(c->diags, TR_SEV_ERROR, "comm.cuda", NULL, NULL,
                       "check the device with nvidia-smi; an earlier kernel may have faulted",
                       "%s on group %s: CUDA error %s (%s)", what, tr_comm_group_name(group),
                       cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Elements a call reads from send and writes to recv (the extents the staging copies). */
static size_t v_extent(const size_t *counts, const size_t *displs, int p) {
    size_t end = 0, off = 0;
    for (int j = 0; j < p; j++) {
        size_t at = displs ? displs[j] : off;
        if (at + counts[j] > end) end = at + counts[j];
        off += counts[j];
    }
    return end;
}

void tr_comm_call_extents(const tr_comm_call *call, int p, size_t *send_n, size_t *recv_n) {
    size_t n = call->count, pn = (size_t)p * n;
    *send_n = *recv_n = 0;
    switch (call->kind) {
    case TR_COMM_ALL_REDUCE:
        *send_n = n, *recv_n = n;
        break;
    case TR_COMM_REDUCE_SCATTER:
        *send_n = pn, *recv_n = call->send ? n : pn;
        break;
    case TR_COMM_ALL_GATHER:
        *send_n = n, *recv_n = pn;
        break;
    case TR_COMM_ALL_TO_ALL:
        *send_n = pn, *recv_n = pn;
        break;
    case TR_COMM_ALL_TO_ALLV:
        *send_n = v_extent(call->send_counts, call->send_displs, p);
        *recv_n = v_extent(call->recv_counts, call->recv_displs, p);
        break;
    case TR_COMM_BROADCAST:
    case TR_COMM_RECV:
        *recv_n = n;
        break;
    case TR_COMM_SEND:
        *send_n = n;
        break;
    default:
        break;
    }
}

#endif /* TRESTLE_HAVE_CUDA */
