/* Activation memory per rank under context parallelism: llama_tiny_pretrain trained at seq 8192
 * (one sequence per step) with CP 1, 2 and 4, on the cpu-strict test device, which counts every
 * buffer it maps; each rank prints the peak of its activation arena (the model's saved tensors
 * and scratch, the RoPE tables, the ring's KV and dK/dV buffers) and the ratio to the CP 1 run
 * measured in the same process group, which is the peer. Exits 1 when CP 4 holds more than 30%
 * of CP 1's activations (the bar; the saved tensors alone fall as 1/CP).
 *
 *   mpirun -np 4 B/bench_cp_memory [--seq N] [KEY=VALUE...]
 *
 * Also prints the machine (CPU model) and each run's step time. Not a ctest (seconds of
 * attention at 8192 tokens); a smoke-sized run is: --seq 256. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "recipes/resolve.h"
#include "runtime/comm/comm.h"
#include "runtime/device/device.h"
#include "runtime/parallel/config.h"
#include "runtime/parallel/state.h"
#include "runtime/train/train.h"

enum { MAX_KEYS = 40 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *v = strchr(line, ':');
            if (v) snprintf(out, n, "%s", v + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    fclose(f);
}

/* Trains on the first `cp` ranks of the world (the others wait); *peak is this rank's activation
 * peak in bytes (0 on a waiting rank). */
static int run_cp(int cp, const char **keys, int n_keys, int rank, double *peak, double *secs) {
    *peak = 0.0;
    *secs = 0.0;
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, rank < cp ? 0 : MPI_UNDEFINED, rank, &sub);
    if (rank >= cp) return 0;
    static char cp_key[64];
    snprintf(cp_key, sizeof cp_key, "model.context_parallel_size=%d", cp);
    const char *all[MAX_KEYS + 1];
    int n = 0;
    for (int i = 0; i < n_keys; i++) all[n++] = keys[i];
    all[n++] = cp_key;
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    memset(&c, 0, sizeof c);
    tr_resolve_opts ro = {
        .recipe = "llama_tiny_pretrain", .overrides = all, .n_overrides = n, .world = {cp, cp}};
    tr_status s = tr_resolve(&ro, &c, &d);
    tr_device *dev = NULL;
    if (s == TR_OK) s = tr_device_open(TR_DEVICE_CPU_STRICT, 0, 1, &d, &dev);
    tr_parallel_state ps;
    memset(&ps, 0, sizeof ps);
    bool have_ps = false;
    tr_comm *comm = NULL;
    if (s == TR_OK && cp > 1) {
        tr_parallel_dims dims;
        s = tr_parallel_dims_from_config(&c, cp, &dims);
        if (s == TR_OK) s = tr_parallel_state_init(&ps, &dims, sub, &d);
        have_ps = s == TR_OK;
        if (s == TR_OK)
            s = tr_device_comm_create(dev, &ps, &(tr_comm_options){0}, false, &d, &comm);
    }
    tr_train_opts o = {.comm = comm, .device = dev};
    tr_train_result r;
    double t0 = now_s();
    if (s == TR_OK) s = tr_train_run(&c, &o, &r, &d);
    *secs = now_s() - t0;
    if (s == TR_OK) *peak = (double)tr_device_peak(dev, TR_MEM_ACTIVATIONS);
    if (s != TR_OK) tr_diags_print_text(&d, stderr, false);
    tr_comm_destroy(comm);
    if (have_ps) tr_parallel_state_free(&ps);
    tr_device_close(dev);
    tr_config_free(&c);
    tr_diags_free(&d);
    MPI_Comm_free(&sub);
    return s == TR_OK ? 0 : 1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    static char seq_m[64], seq_d[64];
    int seq = 8192;
    const char *keys[MAX_KEYS];
    int n = 0;
    for (int a = 1; a < argc && n < MAX_KEYS - 8; a++) {
        if (strcmp(argv[a], "--seq") == 0 && a + 1 < argc)
            seq = atoi(argv[++a]);
        else
            keys[n++] = argv[a];
    }
    snprintf(seq_m, sizeof seq_m, "model.seq_length=%d", seq);
    snprintf(seq_d, sizeof seq_d, "dataset.seq_length=%d", seq);
    const char *fixed[] = {seq_m,
                           seq_d,
                           "train.global_batch_size=1",
                           "train.micro_batch_size=1",
                           "train.train_iters=1",
                           "validation.eval_iters=0",
                           "logger.log_interval=1000"};
    const char *all[MAX_KEYS];
    int m = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) all[m++] = fixed[i];
    for (int i = 0; i < n; i++) all[m++] = keys[i];
    if (world != 4) {
        if (rank == 0) fprintf(stderr, "run under mpirun -np 4\n");
        MPI_Finalize();
        return 2;
    }
    char cpu[200];
    cpu_model(cpu, sizeof cpu);
    if (rank == 0)
        printf("bench_cp_memory: llama_tiny_pretrain, seq %d, one sequence per step; cpu: %s\n",
               seq, cpu);
    static const int sizes[] = {1, 2, 4};
    double base = 0.0;
    int bad = 0;
    double ratio4 = 0.0;
    for (int k = 0; k < 3; k++) {
        double peak, secs;
        bad |= run_cp(sizes[k], all, m, rank, &peak, &secs);
        double peaks[4], times[4];
        MPI_Gather(&peak, 1, MPI_DOUBLE, peaks, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        MPI_Gather(&secs, 1, MPI_DOUBLE, times, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank != 0) continue;
        if (sizes[k] == 1) base = peaks[0];
        for (int r = 0; r < sizes[k]; r++) {
            printf("CP %d rank %d: activation peak %10.2f MiB  (%.3f of CP 1)  step %.2f s\n",
                   sizes[k], r, peaks[r] / 1048576.0, base > 0 ? peaks[r] / base : 0.0, times[r]);
            if (sizes[k] == 4 && base > 0 && peaks[r] / base > ratio4) ratio4 = peaks[r] / base;
        }
    }
    int fail = 0;
    if (rank == 0) {
        fail = bad || !(ratio4 > 0.0 && ratio4 <= 0.30);
        printf("CP 4 holds at most %.3f of CP 1's activations per rank (bar 0.30): %s\n", ratio4,
               fail ? "FAIL" : "ok");
    }
    MPI_Bcast(&fail, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return fail;
}
