/* Tensor-parallel communication overlap on real ranks (runtime/model/tensor_parallel.h): the
 * whole world is the TP group, sequence parallel, B sequences of T tokens, rows of width W.
 *
 *   mpirun -np N check_tp_overlap B T
 *
 * Checks, for the pipelined all-gather and reduce-scatter against the blocking ones:
 *   - overlap: when the GEMM of the first piece runs, every piece's all-gather has already been
 *     started (the comm layer's own call counter says so); when the GEMM of piece p > 0 runs, the
 *     reduce-scatters of pieces 0..p-1 have been started and that of piece p not yet;
 *   - the GEMM callbacks cover every whole-sequence row exactly once;
 *   - the results are bitwise those of tr_tp_seq_gather / tr_tp_seq_reduce_scatter (the
 *     "GEMM" here is a per-row function of the gathered rows: row independence by construction);
 *   - the pieces book exactly the bytes of the whole exchange.
 * Exits 0 on every rank when all hold. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model/tensor_parallel.h"
#include "runtime/parallel/state.h"

enum { W = 8 };

typedef struct probe {
    tr_model *m;
    const float *src; /* AG: the gathered rows; RS: the full partial output */
    float *y;         /* AG: the output rows written in place */
    int *seen;        /* per whole-sequence row */
    int calls, bad;
    uint64_t first_started; /* AG: all-gathers started when the first GEMM ran */
    int per_piece;          /* callbacks per piece: tp */
} probe;

static uint64_t started(const tr_model *m, int kind) {
    return tr_comm_counters_calls(&m->comm->counters, TR_GROUP_TP, kind);
}

/* AG: y = 2 x + 1 per element of the rows given. */
static tr_status ag_fn(void *ctx, int64_t row, int n, float *dst) {
    probe *p = ctx;
    if (dst) p->bad++;
    if (p->calls == 0) p->first_started = started(p->m, TR_COMM_ALL_GATHER);
    for (int64_t r = row; r < row + n; r++) {
        p->seen[r]++;
        for (int c = 0; c < W; c++) p->y[r * W + c] = 2.0f * p->src[r * W + c] + 1.0f;
    }
    p->calls++;
    return TR_OK;
}

/* RS: the partial output's rows copied into the piece's packed block. */
static tr_status rs_fn(void *ctx, int64_t row, int n, float *dst) {
    probe *p = ctx;
    int piece = p->calls / p->per_piece;
    /* Pieces 0..piece-1 started, this one not yet (its reduce-scatter follows its GEMMs). */
    if (started(p->m, TR_COMM_REDUCE_SCATTER) != (uint64_t)piece) p->bad++;
    if (!dst) p->bad++;
    for (int64_t r = row; r < row + n; r++) {
        p->seen[r]++;
        if (dst) memcpy(dst + (r - row) * W, p->src + r * W, W * sizeof(float));
    }
    p->calls++;
    return TR_OK;
}

static int check(tr_model *m, int rank) {
    int B = m->batch, T = m->spec.seq, tp = m->tp.size;
    int64_t rows = (int64_t)B * T, lrows = rows / tp;
    float *local = malloc(sizeof(float) * lrows * W), *full = malloc(sizeof(float) * rows * W);
    float *ref = malloc(sizeof(float) * rows * W), *y = malloc(sizeof(float) * rows * W);
    float *out = malloc(sizeof(float) * lrows * W), *out_ref = malloc(sizeof(float) * lrows * W);
    float *partial = malloc(sizeof(float) * rows * W);
    int *seen = calloc((size_t)rows, sizeof(int));
    int bad = 0;
    for (int64_t i = 0; i < lrows * W; i++) local[i] = (float)(rank * 1000 + i) * 0.37f;
    for (int64_t i = 0; i < rows * W; i++) partial[i] = (float)((i * 7 + rank * 13) % 97) * 0.11f;
    int pieces = B * tr_tp_overlap_parts(m);

    /* All-gather. */
    tr_comm_counters_reset(&m->comm->counters);
    if (tr_tp_seq_gather(m, local, ref, W) != TR_OK) bad++;
    uint64_t whole_bytes = tr_comm_counters_bytes(&m->comm->counters, TR_GROUP_TP, -1);
    tr_comm_counters_reset(&m->comm->counters);
    probe p = {.m = m, .src = full, .y = y, .seen = seen, .per_piece = tp};
    if (tr_tp_seq_gather_overlap(m, local, full, W, ag_fn, &p) != TR_OK) bad++;
    if (p.first_started != (uint64_t)pieces) {
        printf("rank %d: %llu of %d all-gathers started before the first GEMM\n", rank,
               (unsigned long long)p.first_started, pieces);
        bad++;
    }
    if (tr_comm_counters_bytes(&m->comm->counters, TR_GROUP_TP, -1) != whole_bytes) bad++;
    if (memcmp(full, ref, sizeof(float) * rows * W)) bad++;
    for (int64_t r = 0; r < rows; r++) {
        if (seen[r] != 1) bad++;
        for (int c = 0; c < W; c++)
            if (y[r * W + c] != 2.0f * ref[r * W + c] + 1.0f) bad++;
    }
    bad += p.bad;

    /* Reduce-scatter. */
    memset(seen, 0, sizeof(int) * (size_t)rows);
    tr_comm_counters_reset(&m->comm->counters);
    if (tr_tp_seq_reduce_scatter(m, partial, out_ref, W) != TR_OK) bad++;
    whole_bytes = tr_comm_counters_bytes(&m->comm->counters, TR_GROUP_TP, -1);
    tr_comm_counters_reset(&m->comm->counters);
    probe q = {.m = m, .src = partial, .seen = seen, .per_piece = tp};
    if (tr_tp_seq_reduce_scatter_overlap(m, out, W, rs_fn, &q) != TR_OK) bad++;
    if (started(m, TR_COMM_REDUCE_SCATTER) != (uint64_t)pieces) bad++;
    if (tr_comm_counters_bytes(&m->comm->counters, TR_GROUP_TP, -1) != whole_bytes) bad++;
    if (memcmp(out, out_ref, sizeof(float) * lrows * W)) bad++;
    for (int64_t r = 0; r < rows; r++)
        if (seen[r] != 1) bad++;
    bad += q.bad;
    printf("rank %d: %d pieces of %d rows per chunk, %d GEMM calls each way, %s\n", rank, pieces,
           T / tp / tr_tp_overlap_parts(m), p.calls, bad ? "FAIL" : "ok");
    free(local), free(full), free(ref), free(y), free(out), free(out_ref), free(partial);
    free(seen);
    return bad;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int B = argc > 1 ? atoi(argv[1]) : 2, T = argc > 2 ? atoi(argv[2]) : 16;
    tr_diags d;
    tr_diags_init(&d);
    tr_parallel_dims dims;
    tr_parallel_dims_init(&dims, world);
    dims.tp = world;
    tr_parallel_dims_derive(&dims);
    tr_parallel_state ps;
    memset(&ps, 0, sizeof ps);
    tr_comm *comm = NULL;
    int bad = 1;
    tr_comm_options co = {.reduce_mode = TR_COMM_REDUCE_NATIVE};
    if (T % world == 0 && tr_parallel_state_init(&ps, &dims, MPI_COMM_WORLD, &d) == TR_OK) {
        if (tr_comm_mpi_create(&ps, &co, &d, &comm) == TR_OK) {
            static tr_model m;
            m.spec.seq = T;
            m.spec.sequence_parallel = 1;
            m.batch = B;
            m.tp = (tr_tp_shard){tr_comm_group_rank(comm, TR_GROUP_TP), world};
            m.comm = comm;
            m.tp_group = TR_GROUP_TP;
            m.ops = tr_ops_cpu();
            m.sp_full = malloc(sizeof(float) * (size_t)(B * T * W));
            m.sp_perm = malloc(sizeof(float) * (size_t)(B * T * W));
            bad = check(&m, rank);
            free(m.sp_full), free(m.sp_perm);
            tr_comm_destroy(comm);
        }
        tr_parallel_state_free(&ps);
    }
    if (d.n > 0) tr_diags_print_text(&d, stderr, false);
    tr_diags_free(&d);
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? 1 : 0;
}
