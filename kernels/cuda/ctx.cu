/* The per-thread context behind tr_ops_cuda(), error translation, device selection. */
#include <stdlib.h>

#include "kernels/cuda/cuda_common.cuh"

/* The op table's signature has no context argument; the bound context is this thread's choice
 * of stream and handles, made explicitly with tr_cuda_bind. */
static thread_local tr_cuda_ctx *g_bound;

tr_status tr_cuda_status_of(cudaError_t e, const char *what, const char *file, int line) {
    tr_log(TR_LOG_ERROR, "CUDA: %s failed at %s:%d: %s (%s)", what, file, line, cudaGetErrorName(e),
           cudaGetErrorString(e));
    if (e == cudaErrorMemoryAllocation) return TR_ERR_NOMEM;
    if (e == cudaErrorInvalidValue || e == cudaErrorInvalidConfiguration) return TR_ERR_INVALID;
    return TR_ERR_INTERNAL;
}

tr_status tr_cublas_status_of(cublasStatus_t s, const char *what, const char *file, int line) {
    tr_log(TR_LOG_ERROR, "cuBLASLt: %s failed at %s:%d: %s", what, file, line,
           cublasLtGetStatusString(s));
    if (s == CUBLAS_STATUS_ALLOC_FAILED) return TR_ERR_NOMEM;
    if (s == CUBLAS_STATUS_INVALID_VALUE || s == CUBLAS_STATUS_NOT_SUPPORTED) return TR_ERR_INVALID;
    return TR_ERR_INTERNAL;
}

extern "C" int tr_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver / no device is an answer, not a sticky error */
        return 0;
    }
    return n;
}

extern "C" tr_status tr_cuda_select_device(int local_rank, int *device) {
    int n = tr_cuda_device_count();
    if (n == 0) {
        tr_log(TR_LOG_ERROR,
               "CUDA: no GPU visible to local rank %d (check CUDA_VISIBLE_DEVICES "
               "and the driver), or run with the CPU backend",
               local_rank);
        return TR_ERR_INVALID;
    }
    if (local_rank < 0) return TR_ERR_INVALID;
    int d = local_rank % n;
    TR_CUDA_TRY(cudaSetDevice(d));
    if (device) *device = d;
    return TR_OK;
}

extern "C" tr_status tr_cuda_ctx_create(void *stream, tr_cuda_ctx **out) {
    if (!out) return TR_ERR_INVALID;
    *out = NULL;
    tr_cuda_ctx *c = (tr_cuda_ctx *)calloc(1, sizeof *c);
    if (!c) return TR_ERR_NOMEM;
    tr_status st = TR_OK;
    cudaError_t e = cudaSuccess;
    if (stream) {
        c->stream = (cudaStream_t)stream;
    } else {
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
        c->owns_stream = e == cudaSuccess;
    }
    if (e == cudaSuccess) e = cudaMalloc(&c->lt_workspace, TR_CUDA_LT_WORKSPACE);
    if (e == cudaSuccess) e = cudaMallocHost((void **)&c->host_flag, sizeof(int));
    if (e != cudaSuccess) {
        st = tr_cuda_status_of(e, "creating the CUDA context", __FILE__, __LINE__);
    } else {
        c->lt_workspace_size = TR_CUDA_LT_WORKSPACE;
        cublasStatus_t s = cublasLtCreate(&c->lt);
        if (s != CUBLAS_STATUS_SUCCESS)
            st = tr_cublas_status_of(s, "cublasLtCreate", __FILE__, __LINE__);
    }
    if (st != TR_OK) {
        tr_cuda_ctx_destroy(c);
        return st;
    }
    *out = c;
    return TR_OK;
}

extern "C" tr_status tr_cuda_ctx_create_check_only(tr_cuda_ctx **out) {
    if (!out) return TR_ERR_INVALID;
    *out = (tr_cuda_ctx *)calloc(1, sizeof **out);
    if (!*out) return TR_ERR_NOMEM;
    (*out)->check_only = 1;
    return TR_OK;
}

extern "C" void tr_cuda_ctx_destroy(tr_cuda_ctx *c) {
    if (!c) return;
    if (g_bound == c) g_bound = NULL;
    if (c->check_only) {
        free(c);
        return;
    }
    if (c->stream) {
        if (c->scratch && c->scratch_pooled && cudaFreeAsync(c->scratch, c->stream) == cudaSuccess)
            c->scratch = NULL;
        cudaStreamSynchronize(c->stream);
    }
    if (c->lt) cublasLtDestroy(c->lt);
    cudaFree(c->lt_workspace);
    cudaFree(c->scratch);
    cudaFreeHost(c->host_flag);
    if (c->owns_stream) cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" void *tr_cuda_ctx_stream(const tr_cuda_ctx *c) {
    return c ? (void *)c->stream : NULL;
}

extern "C" void tr_cuda_bind(tr_cuda_ctx *c) {
    g_bound = c;
}

extern "C" tr_cuda_ctx *tr_cuda_bound(void) {
    return g_bound;
}

tr_cuda_ctx *tr_cuda_need_ctx(const char *op) {
    if (!g_bound)
        tr_log(TR_LOG_ERROR,
               "CUDA op %s called with no context bound to this thread: "
               "tr_cuda_ctx_create + tr_cuda_bind first",
               op);
    return g_bound;
}

extern "C" tr_status tr_cuda_sync(void) {
    TR_CUDA_CTX("sync");
    TR_CUDA_TRY(cudaStreamSynchronize(ctx->stream));
    TR_CUDA_TRY(cudaGetLastError());
    return TR_OK;
}

/* Growth is stream-ordered: the old block is released after the launches queued before it
 * that may still read it, and the host never waits. A plain cudaFree would wait for the whole
 * device, NCCL kernels on the comm streams included, which can deadlock a rank whose NCCL peer
 * waits for a collective this rank has not issued yet. */
tr_status tr_cuda_scratch(tr_cuda_ctx *c, size_t bytes, void **out) {
    if (bytes > c->scratch_size) {
        if (c->scratch && c->scratch_pooled) {
            TR_CUDA_TRY(cudaFreeAsync(c->scratch, c->stream));
        } else if (c->scratch) { /* a GPU without memory pools: the old, waiting way */
            TR_CUDA_TRY(cudaStreamSynchronize(c->stream));
            cudaFree(c->scratch);
        }
        c->scratch = NULL;
        c->scratch_size = 0;
        size_t want = bytes < (1u << 20) ? (1u << 20) : bytes + bytes / 2;
        void *p = NULL;
        cudaError_t e = cudaMallocAsync(&p, want, c->stream);
        c->scratch_pooled = e == cudaSuccess;
        if (e == cudaErrorNotSupported) {
            cudaGetLastError();
            p = NULL;
            e = cudaMalloc(&p, want);
        }
        TR_CUDA_TRY(e);
        c->scratch = p;
        c->scratch_size = want;
    }
    *out = c->scratch;
    return TR_OK;
}
