/* The device-memory comm backends on real ranks: comm_gpu_check staged|nccl [tp=N].
 * Every rank fills device buffers with values that depend on its rank, runs each operation on
 * the tensor-parallel group and the world, and compares with the result computed on the host.
 * "staged" (host-staged MPI) lets any number of ranks share one GPU. "nccl" needs a GPU per rank
 * of a group: with fewer, every rank must get the comm.nccl_shared_gpu diagnostic instead (also
 * checked). Exits 77 on every rank when no GPU is visible, so ctest reports a skip. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_ops.h"
#include "runtime/comm/nccl.h"
#include "runtime/comm/staged.h"
#include "runtime/parallel/state.h"

static int g_rank, g_fail;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: ", g_rank, __FILE__, __LINE__);                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            g_fail++;                                                                              \
        }                                                                                          \
    } while (0)

static float value(int rank, size_t i) {
    return (float)(rank * 1000) + (float)(i % 97) * 0.5f;
}

/* Uploads go through the legacy stream, which neither the compute stream nor NCCL's streams
 * wait for (a pageable cudaMemcpy may return before its DMA lands), hence the device-wide wait. */
static void upload(float *d, const float *h, size_t n) {
    if (cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
        MPI_Abort(MPI_COMM_WORLD, 3);
}

static float *dev_from(const float *h, size_t n) {
    float *d = NULL;
    if (cudaMalloc((void **)&d, n * sizeof(float) + 4) != cudaSuccess) MPI_Abort(MPI_COMM_WORLD, 3);
    if (h) upload(d, h, n);
    return d;
}

static void download(float *h, const float *d, size_t n) {
    if (tr_cuda_sync() != TR_OK) MPI_Abort(MPI_COMM_WORLD, 3);
    cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
}

static void check_group(tr_comm *c, int g, const char *label) {
    const size_t n = 1000;
    int p = tr_comm_group_size(c, g), me = tr_comm_group_rank(c, g);
    if (p <= 0) return;
    int *world_of = malloc(sizeof(int) * (size_t)p);
    for (int r = 0; r < p; r++) world_of[r] = tr_comm_world_rank_of(c, g, r);
    float *h = malloc(sizeof(float) * n * (size_t)p), *want = malloc(sizeof(float) * n * (size_t)p);
    for (size_t i = 0; i < n * (size_t)p; i++) h[i] = value(g_rank, i);
    float *d = dev_from(h, n * (size_t)p), *out = dev_from(NULL, n * (size_t)p);

    /* all-reduce SUM into another buffer, then MAX in place */
    EXPECT(tr_comm_all_reduce(c, g, d, out, n, TR_COMM_F32, TR_COMM_SUM) == TR_OK, "all_reduce");
    download(h, out, n);
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int r = 0; r < p; r++) s += value(world_of[r], i);
        EXPECT(fabs(h[i] - s) <= 1e-6 * fabs(s), "%s all_reduce[%zu] %g != %g", label, i, h[i], s);
        if (fabs(h[i] - s) > 1e-6 * fabs(s)) break;
    }
    EXPECT(tr_comm_all_reduce_inplace(c, g, d, n, TR_COMM_F32, TR_COMM_MAX) == TR_OK, "max");
    download(h, d, n);
    int maxw = 0;
    for (int r = 0; r < p; r++) maxw = world_of[r] > maxw ? world_of[r] : maxw;
    EXPECT(h[5] == value(maxw, 5), "%s all_reduce max %g", label, h[5]);

    /* reduce-scatter in place: block `me` of the sum */
    for (size_t i = 0; i < n * (size_t)p; i++) h[i] = value(g_rank, i);
    upload(d, h, n * (size_t)p);
    EXPECT(tr_comm_reduce_scatter_inplace(c, g, d, n, TR_COMM_F32, TR_COMM_SUM) == TR_OK, "rs");
    download(h, d + (size_t)me * n, n);
    double s = 0;
    for (int r = 0; r < p; r++) s += value(world_of[r], (size_t)me * n + 3);
    EXPECT(fabs(h[3] - s) <= 1e-6 * fabs(s), "%s reduce_scatter %g != %g", label, h[3], s);

    /* all-gather: block r holds rank r's values */
    for (size_t i = 0; i < n; i++) h[i] = value(g_rank, i);
    upload(d, h, n);
    EXPECT(tr_comm_all_gather(c, g, d, out, n, TR_COMM_F32) == TR_OK, "all_gather");
    download(want, out, n * (size_t)p);
    for (int r = 0; r < p; r++)
        EXPECT(want[(size_t)r * n + 11] == value(world_of[r], 11), "%s all_gather block %d", label,
               r);

    /* broadcast from the last rank */
    for (size_t i = 0; i < n; i++) h[i] = value(g_rank, i);
    upload(d, h, n);
    EXPECT(tr_comm_broadcast(c, g, d, n, TR_COMM_F32, p - 1) == TR_OK, "broadcast");
    download(h, d, n);
    EXPECT(h[42] == value(world_of[p - 1], 42), "%s broadcast %g", label, h[42]);

    /* ring exchange as one p2p batch, and all-to-all */
    if (p > 1) {
        for (size_t i = 0; i < n; i++) h[i] = value(g_rank, i);
        upload(d, h, n);
        tr_comm_p2p ops[2] = {{true, (me + 1) % p, d, n, TR_COMM_F32},
                              {false, (me + p - 1) % p, out, n, TR_COMM_F32}};
        EXPECT(tr_comm_p2p_batch(c, g, ops, 2) == TR_OK, "p2p_batch");
        download(h, out, n);
        EXPECT(h[9] == value(world_of[(me + p - 1) % p], 9), "%s ring recv %g", label, h[9]);
    }
    for (size_t i = 0; i < n * (size_t)p; i++) h[i] = value(g_rank, i);
    upload(d, h, n * (size_t)p);
    EXPECT(tr_comm_all_to_all(c, g, d, out, n, TR_COMM_F32) == TR_OK, "all_to_all");
    download(want, out, n * (size_t)p);
    for (int r = 0; r < p; r++) /* block r came from rank r's block `me` */
        EXPECT(want[(size_t)r * n + 2] == value(world_of[r], (size_t)me * n + 2),
               "%s all_to_all block %d", label, r);

    /* nonblocking: compute queued after the start runs while the transfer is in flight */
    for (size_t i = 0; i < n; i++) h[i] = value(g_rank, i);
    upload(d, h, n);
    tr_comm_request *req = NULL;
    EXPECT(tr_comm_iall_reduce(c, g, d, out, n, TR_COMM_F32, TR_COMM_SUM, &req) == TR_OK, "iall");
    EXPECT(tr_ops_cuda()->fill(d + n, (int64_t)n, 2.0f) == TR_OK, "fill during transfer");
    EXPECT(tr_comm_wait(c, &req) == TR_OK && req == NULL, "wait");
    download(h, out, n);
    s = 0;
    for (int r = 0; r < p; r++) s += value(world_of[r], 77);
    EXPECT(fabs(h[77] - s) <= 1e-6 * fabs(s), "%s iall_reduce %g != %g", label, h[77], s);
    EXPECT(tr_comm_barrier(c, g) == TR_OK, "barrier");
    cudaFree(d), cudaFree(out);
    free(h), free(want), free(world_of);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size, ndev = tr_cuda_device_count(), min_dev = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&ndev, &min_dev, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (min_dev == 0) { /* every rank takes the same exit */
        if (g_rank == 0) printf("SKIPPED: no CUDA device visible\n");
        MPI_Finalize();
        return 77;
    }
    const char *mode = argc > 1 ? argv[1] : "staged";
    int tp = argc > 2 && !strncmp(argv[2], "tp=", 3) ? atoi(argv[2] + 3) : size;
    tr_parallel_dims dims;
    tr_parallel_dims_init(&dims, size);
    dims.tp = dims.etp = tp;
    tr_parallel_dims_derive(&dims);
    tr_diags diags;
    tr_diags_init(&diags);
    tr_parallel_state ps;
    if (tr_parallel_state_init(&ps, &dims, MPI_COMM_WORLD, &diags) != TR_OK) {
        tr_diags_print_text(&diags, stderr, false);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    tr_cuda_ctx *ctx = NULL;
    if (tr_cuda_select_device(ps.local_rank, NULL) != TR_OK ||
        tr_cuda_ctx_create(NULL, &ctx) != TR_OK)
        MPI_Abort(MPI_COMM_WORLD, 3);
    tr_cuda_bind(ctx);
    tr_comm_options opt = {30, TR_COMM_REDUCE_NATIVE};
    tr_comm *c = NULL;
    tr_status st;
    int shared_gpu = ps.local_size > ndev;
    if (!strcmp(mode, "nccl")) {
        st = tr_comm_nccl_create(&ps, &opt, tr_cuda_ctx_stream(ctx), &diags, &c);
        if (shared_gpu && size > 1) {
            /* the failing path: refused up front on every rank, nobody hangs in NCCL init */
            EXPECT(st != TR_OK && tr_diags_find(&diags, "comm.nccl_shared_gpu"),
                   "nccl with %d ranks on %d GPUs was not refused", ps.local_size, ndev);
            tr_diags_clear(&diags);
        } else {
            EXPECT(st == TR_OK, "nccl create");
        }
    } else {
        st = tr_comm_staged_create(&ps, &opt, tr_cuda_ctx_stream(ctx), &diags, &c);
        EXPECT(st == TR_OK, "staged create");
    }
    if (c) {
        check_group(c, TR_GROUP_TP, "tp");
        check_group(c, TR_COMM_WORLD, "world");
    }
    if (diags.n) tr_diags_print_text(&diags, stderr, false);
    int total = 0;
    MPI_Allreduce(&g_fail, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("%s: %s comm on %d ranks, %d GPU(s), tp=%d: %d failures\n", total ? "FAIL" : "OK",
               mode, size, ndev, dims.tp, total);
    tr_comm_destroy(c);
    tr_cuda_ctx_destroy(ctx);
    tr_parallel_state_free(&ps);
    tr_diags_free(&diags);
    MPI_Finalize();
    return total ? 1 : 0;
}
