/* Tokens/s of the CPU training loop on one rank (TP 1), on two ranks as TP 2 (without and with
 * sequence parallelism), and on two ranks as DP 2, with the share of each run's time spent waiting
 * on communication (inside the comm backend's wait/test, measured by wrapping the backend table).
 * Not a ctest; run it as
 *
 *   mpirun -np 2 B/bench_parallel_cpu [--iters N] [KEY=VALUE...]
 *
 * KEY=VALUE overrides apply to every run (default: a GPT of hidden 256, 4 layers, 128 tokens).
 * Rank 0 runs the single-rank case while rank 1 waits, so every case has the machine's cores
 * to itself. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "recipes/resolve.h"
#include "runtime/comm/comm.h"
#include "runtime/parallel/config.h"
#include "runtime/parallel/state.h"
#include "runtime/train/train.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The MPI backend with its wait and test timed. */
static const tr_comm_backend *inner;
static double waited_s;

static tr_status timed_wait(tr_comm *c, tr_comm_request *req) {
    double t0 = now_s();
    tr_status s = inner->wait(c, req);
    waited_s += now_s() - t0;
    return s;
}

static tr_status timed_test(tr_comm *c, tr_comm_request *req, bool *done) {
    double t0 = now_s();
    tr_status s = inner->test(c, req, done);
    waited_s += now_s() - t0;
    return s;
}

enum { MAX_KEYS = 48 };

typedef struct bench_run {
    const char *name;
    int world;
    const char *layout[4];
} bench_run;

static int run_case(const bench_run *b, const char **keys, int n_keys, int rank) {
    const char *all[MAX_KEYS + 4];
    int n = 0;
    for (int i = 0; i < n_keys; i++) all[n++] = keys[i];
    for (int i = 0; i < 4 && b->layout[i]; i++) all[n++] = b->layout[i];
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    memset(&c, 0, sizeof c);
    tr_resolve_opts ro = {.recipe = "gpt_tiny_pretrain",
                          .overrides = all,
                          .n_overrides = n,
                          .world = {b->world, b->world}};
    tr_status s = tr_resolve(&ro, &c, &d);
    tr_parallel_state ps;
    memset(&ps, 0, sizeof ps);
    tr_comm *comm = NULL;
    tr_comm_backend timed;
    bool have_ps = false;
    if (s == TR_OK && b->world > 1) {
        tr_parallel_dims dims;
        s = tr_parallel_dims_from_config(&c, b->world, &dims);
        if (s == TR_OK) s = tr_parallel_state_init(&ps, &dims, MPI_COMM_WORLD, &d);
        have_ps = s == TR_OK;
        if (s == TR_OK) s = tr_comm_mpi_create(&ps, &(tr_comm_options){0}, &d, &comm);
        if (s == TR_OK) {
            inner = comm->backend;
            timed = *inner;
            timed.wait = timed_wait;
            timed.test = timed_test;
            comm->backend = &timed;
        }
    }
    waited_s = 0.0;
    tr_train_opts o = {.comm = comm};
    tr_train_result r;
    if (s == TR_OK) s = tr_train_run(&c, &o, &r, &d);
    if (comm) comm->backend = inner;
    double wait_max = waited_s;
    if (b->world > 1) MPI_Allreduce(&waited_s, &wait_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (s == TR_OK && rank == 0) {
        double tokens =
            (double)r.iterations * (double)c.train.global_batch_size * (double)c.model.seq_length;
        printf("%-7s %d rank(s): %9.0f tokens/s  %6.2f s  waiting on communication %5.1f%%\n",
               b->name, b->world, tokens / r.seconds, r.seconds, 100.0 * wait_max / r.seconds);
    } else if (s != TR_OK) {
        tr_diags_print_text(&d, stderr, false);
    }
    tr_comm_destroy(comm);
    if (have_ps) tr_parallel_state_free(&ps);
    tr_config_free(&c);
    tr_diags_free(&d);
    return s == TR_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const char *keys[MAX_KEYS] = {
        "model.hidden_size=256",      "model.num_attention_heads=8", "model.ffn_hidden_size=1024",
        "model.num_layers=4",         "model.seq_length=128",        "dataset.seq_length=128",
        "train.global_batch_size=16", "train.micro_batch_size=2",    "validation.eval_iters=0",
        "logger.log_interval=1000",   "train.train_iters=5"};
    int n = 11;
    static char iters[64];
    for (int a = 1; a < argc && n < MAX_KEYS; a++) {
        if (strcmp(argv[a], "--iters") == 0 && a + 1 < argc) {
            snprintf(iters, sizeof iters, "train.train_iters=%s", argv[++a]);
            keys[n++] = iters;
        } else {
            keys[n++] = argv[a];
        }
    }
    if (world != 2) {
        if (rank == 0) fprintf(stderr, "run under mpirun -np 2\n");
        MPI_Finalize();
        return 2;
    }
    bench_run runs[] = {
        {"TP=1", 1, {NULL}},
        {"TP=2", 2, {"model.tensor_model_parallel_size=2", NULL}},
        {"TP=2+SP",
         2,
         {"model.tensor_model_parallel_size=2", "model.sequence_parallel=true", NULL}},
        {"DP=2", 2, {NULL}}};
    int bad = 0;
    if (rank == 0) bad |= run_case(&runs[0], keys, n, rank);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 1; i < 4; i++) bad |= run_case(&runs[i], keys, n, rank);
    MPI_Finalize();
    return bad;
}
