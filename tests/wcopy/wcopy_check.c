/* The half-precision weight copy under a parallel layout (mpirun -np N): trains a recipe twice
 * on the same ranks, with the copy and with per-GEMM casting (tr_train_opts.no_weight_copy),
 * and requires every iteration's loss and every rank's final fp32 parameters to be BITWISE
 * equal: the copy changes where the rounding happens, never its result. Each run must also have
 * taken the path it was asked for (a copy exists, or none).
 * With --acts the two runs differ instead in how the linear layers' inputs are saved: in half
 * precision, or in fp32 (tr_train_opts.no_half_acts); the same bitwise equality is required.
 *
 *   wcopy_check [--acts] RECIPE KEY=VALUE...
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipes/resolve.h"
#include "runtime/comm/comm.h"
#include "runtime/device/device.h"
#include "runtime/model/model.h"
#include "runtime/parallel/config.h"
#include "runtime/parallel/state.h"
#include "runtime/train/train.h"

enum { MAX_ITERS = 64 };

typedef struct run_out {
    float losses[MAX_ITERS];
    int64_t iters;
    float *params; /* this rank's flat buffer */
    int64_t n;
    bool had_copy;
    bool had_half; /* some input of the first layer (or the head's) was saved in half precision */
} run_out;

static tr_status capture(void *ctx, const tr_model *m) {
    run_out *o = ctx;
    o->n = m->n_params;
    o->had_copy = m->wcopy != NULL;
    const tr_slot_acts *a = &m->slot_acts[0];
    if (m->n_parts > 0 && m->parts[0].num_layers > 0)
        o->had_half = a->layers[0].ln1_h || a->layers[0].ln2_h || a->layers[0].act_h;
    o->had_half |= a->lnf_h != NULL;
    o->params = malloc((size_t)(o->n ? o->n : 1) * sizeof(float));
    if (!o->params) return TR_ERR_NOMEM;
    return tr_device_to_host(m->dev, o->params, m->params, (size_t)o->n * sizeof(float));
}

static tr_status train(const tr_config *c, tr_comm *comm, int no_copy, int no_half, run_out *out,
                       tr_diags *d) {
    tr_train_opts o = {.losses = out->losses,
                       .losses_cap = MAX_ITERS,
                       .comm = comm,
                       .on_finish = capture,
                       .on_finish_ctx = out,
                       .no_weight_copy = no_copy,
                       .no_half_acts = no_half};
    tr_train_result r;
    tr_status s = tr_train_run(c, &o, &r, d);
    out->iters = r.iterations;
    return s;
}

/* 0 when the two runs agree bitwise and each took its path; messages on stderr otherwise. */
static int compare(const run_out *with, const run_out *without, int rank, bool acts) {
    int bad = 0;
    if (acts && (!with->had_half || without->had_half || !with->had_copy || !without->had_copy)) {
        fprintf(stderr, "rank %d: half run had_half=%d, fp32 run had_half=%d\n", rank,
                with->had_half, without->had_half);
        bad = 1;
    }
    if (!acts && (!with->had_copy || without->had_copy)) {
        fprintf(stderr, "rank %d: copy run had_copy=%d, casting run had_copy=%d\n", rank,
                with->had_copy, without->had_copy);
        bad = 1;
    }
    if (with->iters != without->iters || with->iters < 1 || with->iters > MAX_ITERS) {
        fprintf(stderr, "rank %d: iterations %lld vs %lld\n", rank, (long long)with->iters,
                (long long)without->iters);
        return 1;
    }
    if (memcmp(with->losses, without->losses, (size_t)with->iters * sizeof(float)) != 0) {
        fprintf(stderr, "rank %d: losses differ (first %.9g vs %.9g)\n", rank,
                (double)with->losses[0], (double)without->losses[0]);
        bad = 1;
    }
    if (with->n != without->n ||
        memcmp(with->params, without->params, (size_t)with->n * sizeof(float)) != 0) {
        fprintf(stderr, "rank %d: final parameters differ\n", rank);
        bad = 1;
    }
    return bad;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    bool acts = argc > 1 && strcmp(argv[1], "--acts") == 0;
    if (acts) {
        argc--;
        argv++;
    }
    if (argc < 2) {
        if (rank == 0) fprintf(stderr, "usage: wcopy_check [--acts] RECIPE KEY=VALUE...\n");
        MPI_Finalize();
        return 2;
    }
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    memset(&c, 0, sizeof c);
    tr_resolve_opts ro = {.recipe = argv[1],
                          .overrides = (const char **)(argv + 2),
                          .n_overrides = argc - 2,
                          .world = {world, world},
                          .validate = {.check_files = true}};
    tr_parallel_dims dims;
    tr_parallel_state ps;
    memset(&ps, 0, sizeof ps);
    tr_comm *comm = NULL;
    run_out with = {0}, without = {0};
    tr_status s = tr_resolve(&ro, &c, &d);
    if (s == TR_OK) s = tr_parallel_dims_from_config(&c, world, &dims);
    if (s == TR_OK) s = tr_parallel_state_init(&ps, &dims, MPI_COMM_WORLD, &d);
    bool have_ps = s == TR_OK;
    tr_comm_options co = {.reduce_mode = TR_COMM_REDUCE_NATIVE};
    if (s == TR_OK) s = tr_comm_mpi_create(&ps, &co, &d, &comm);
    if (s == TR_OK) s = train(&c, comm, 0, 0, &with, &d);
    if (s == TR_OK) s = train(&c, comm, !acts, acts, &without, &d);
    int bad = s != TR_OK ? 1 : compare(&with, &without, rank, acts), any_bad = 0;
    if (s != TR_OK) tr_diags_print_text(&d, stderr, false);
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("wcopy_check%s %s on %d ranks: %lld iterations, last loss %.6f: %s\n",
               acts ? " --acts" : "", argv[1], world, (long long)with.iters,
               with.iters > 0 ? (double)with.losses[with.iters - 1] : 0.0,
               any_bad ? "DIFFERENT" : "bitwise equal");
    free(with.params);
    free(without.params);
    tr_comm_destroy(comm);
    if (have_ps) tr_parallel_state_free(&ps);
    tr_config_free(&c);
    tr_diags_free(&d);
    MPI_Finalize();
    return any_bad;
}
