/* See scripts/cli_launch.h. */
#include "scripts/cli_launch.h"

#include <errno.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "kernels/cpu/blas_env.h"
#include "runtime/comm/comm.h"
#include "runtime/device/device.h"
#include "runtime/parallel/launch.h"
#include "runtime/parallel/config.h"
#include "runtime/parallel/state.h"
#include "runtime/train/train.h"
#include "scripts/cli_module.h"
#include "scripts/cli_resolve.h"

/* See docs/cli.md: 4 = the loss became NaN/Inf; 128 + N = stopped cleanly by signal N. */
enum { EXIT_NAN_LOSS = 4, EXIT_SIGNAL_BASE = 128 };

void tr_cli_output_dir(const tr_config *c, const char *recipe, char *buf, size_t cap) {
    if (c->logger.output_dir)
        snprintf(buf, cap, "%s", c->logger.output_dir);
    else if (c->checkpoint.save)
        snprintf(buf, cap, "%s", c->checkpoint.save);
    else
        snprintf(buf, cap, "outputs/%s", recipe ? recipe : "run");
}

static tr_status mkdir_p(const char *path, tr_diags *d) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return TR_ERR_INVALID;
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            tr_diag_add(d, TR_SEV_ERROR, "run.output_dir", NULL, "logger.output_dir",
                        "choose a writable directory with logger.output_dir=DIR",
                        "cannot create output directory %s: %s", buf, strerror(errno));
            return TR_ERR_IO;
        }
        *p = saved;
        if (saved == '\0') return TR_OK;
    }
}

/* Written to a temporary name and renamed, so a reader never sees half a file. */
static tr_status write_file(const char *dir, const char *name, const tr_config *c, bool dump,
                            tr_diags *d) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    tr_status s = f ? TR_OK : TR_ERR_IO;
    if (f && dump) s = tr_config_dump_yaml(c, f);
    if (f && !dump && fprintf(f, "%016" PRIx64 "\n", tr_config_fingerprint(c)) < 0) s = TR_ERR_IO;
    if (f && fclose(f) != 0) s = TR_ERR_IO;
    if (s == TR_OK && rename(tmp, path) != 0) s = TR_ERR_IO;
    if (s != TR_OK) {
        tr_diag_add(d, TR_SEV_ERROR, "run.write_failed", NULL, "logger.output_dir",
                    "check free space and permissions, or set logger.output_dir=DIR",
                    "cannot write %s: %s", path, strerror(errno));
        remove(tmp);
    }
    return s;
}

static tr_status write_outputs(const tr_config *c, const char *dir, tr_diags *d) {
    TR_TRY(mkdir_p(dir, d));
    TR_TRY(write_file(dir, "config.yaml", c, true, d));
    return write_file(dir, "fingerprint.txt", c, false, d);
}

static int node_size(MPI_Comm world, int rank) {
    MPI_Comm node;
    int n = 1;
    if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &n);
        MPI_Comm_free(&node);
    }
    return n;
}

/* Every rank reached the same failure: rank 0 reports, everyone exits with code. */
_Noreturn static void fail_all(const tr_cli *cli, int rank, tr_config *c, tr_diags *d, int code) {
    if (rank == 0 && cli->diag_format == TR_CLI_DIAG_JSON) tr_cli_print_diags(cli, d);
    tr_config_free(c);
    tr_parallel_fail_all(MPI_COMM_WORLD, cli->diag_format == TR_CLI_DIAG_JSON ? NULL : d, code);
}

/* Runs the training loop; rank 0 logs and writes the metrics. Returns the exit code. */
static int train(const tr_config *c, const char *dir, int rank, tr_comm *comm, tr_device *dev,
                 FILE *report, tr_diags *d) {
    char metrics[4200];
    if (c->logger.metrics_path)
        snprintf(metrics, sizeof metrics, "%s", c->logger.metrics_path);
    else
        snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
    tr_train_opts o = {.log = rank == 0 ? report : NULL,
                       .metrics_path = rank == 0 ? metrics : NULL,
                       .tensorboard_dir = rank == 0 ? c->logger.tensorboard_dir : NULL,
                       .handle_signals = 1,
                       .comm = comm,
                       .device = dev};
    tr_train_result r;
    tr_status s = tr_train_run(c, &o, &r, d);
    if (s == TR_OK && rank == 0) fprintf(report, "metrics written to %s\n", metrics);
    if (s == TR_OK && rank == 0 && c->logger.tensorboard_dir)
        fprintf(report, "TensorBoard events written to %s\n", c->logger.tensorboard_dir);
    if (s == TR_OK) return r.stop == TR_STOP_SIGNAL ? EXIT_SIGNAL_BASE + r.signal : 0;
    /* A failure without a diagnostic still says what failed and where. */
    if (d->n_errors == 0)
        tr_diag_add(d, TR_SEV_ERROR, "train.failed", NULL, NULL,
                    "the log above shows the last step reached; a failure without its own "
                    "diagnostic is a bug in Trestle: report it with this status",
                    "training stopped with status %s on rank %d", tr_status_name(s), rank);
    if (tr_diags_find(d, "train.nan_loss")) return EXIT_NAN_LOSS;
    return tr_cli_exit_code(s, d);
}

/* Rank 0 prints the run's diagnostics; another rank that failed prints what training added on it
 * (to stderr, under its rank): a failure of one rank alone, a bad shard or a peer's slice, would
 * otherwise end the job with an exit code and no word. No collective here: a failed rank's
 * peers may still be inside one. */
static void print_rank_errors(int rank, int size, const tr_diags *d) {
    if (d->n_errors == 0) return;
    fprintf(stderr, "rank %d of %d failed:\n", rank, size);
    tr_diags_print_text(d, stderr, isatty(fileno(stderr)) != 0);
    fflush(stderr);
}

int tr_cli_launch(const tr_cli *cli, int *argc, char ***argv) {
    MPI_Init(argc, argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) tr_log_set_rank(rank);
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    memset(&c, 0, sizeof c);

    if (cli->world_size && cli->world_size != size) {
        tr_diag_add(&d, TR_SEV_ERROR, "cli.world_size_mismatch", NULL, NULL,
                    "--world-size is for --dry-run on a cluster you are not on; a real run "
                    "takes its world from mpirun",
                    "--world-size %d but this run has %d MPI ranks", cli->world_size, size);
        fail_all(cli, rank, &c, &d, 2);
    }
    tr_cli_check_files(cli, &d);
    if (d.n_errors) fail_all(cli, rank, &c, &d, 2);

    /* Every rank resolves: it is deterministic, and it spares a broadcast of the config. */
    tr_world w = {size, cli->gpus_per_node ? cli->gpus_per_node : node_size(MPI_COMM_WORLD, rank)};
    tr_status s = tr_cli_resolve(cli, w, true, false, &c, &d);
    if (s != TR_OK || d.n_errors) fail_all(cli, rank, &c, &d, tr_cli_exit_code(s, &d));
    if (rank == 0 && d.n > 0 && cli->diag_format == TR_CLI_DIAG_TEXT) tr_cli_print_diags(cli, &d);

    /* The resolved config is on disk before any work, so every run can be reproduced. */
    char dir[4096];
    tr_cli_output_dir(&c, c.recipe_name ? c.recipe_name : cli->recipe, dir, sizeof dir);
    int written = TR_OK;
    if (rank == 0) written = write_outputs(&c, dir, &d);
    MPI_Bcast(&written, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (written != TR_OK) fail_all(cli, rank, &c, &d, 1);
    /* In JSON mode stdout carries only the diagnostics document. */
    bool json = cli->diag_format == TR_CLI_DIAG_JSON;
    FILE *report = json ? stderr : stdout;
    if (rank == 0)
        fprintf(report, "resolved config written to %s/config.yaml (fingerprint %016" PRIx64 ")\n",
                dir, tr_config_fingerprint(&c));

    tr_parallel_dims dims;
    tr_parallel_state ps;
    memset(&ps, 0, sizeof ps);
    s = tr_parallel_dims_from_config(&c, size, &dims);
    if (s == TR_OK) s = tr_parallel_state_init(&ps, &dims, MPI_COMM_WORLD, &d);
    if (s != TR_OK) fail_all(cli, rank, &c, &d, tr_cli_exit_code(s, &d));
    if (rank == 0) {
        tr_parallel_banner(report, &dims, (int)c.derived.num_microbatches);
        fflush(report);
    }
    /* Text mode already printed the resolve diagnostics; print only what training adds. */
    if (!json) tr_diags_clear(&d);
    /* TRESTLE_DEVICE picks where the model runs; the communicator matches its memory. Every
     * rank sees the same environment, so they fail (or not) together. */
    tr_device *dev = NULL;
    s = tr_device_open_from_env(ps.local_rank, ps.local_size, &d, &dev);
    if (s != TR_OK) fail_all(cli, rank, &c, &d, tr_cli_exit_code(s, &d));
    tr_comm *comm = NULL;
    tr_comm_options co = {.timeout_s = tr_comm_timeout_from_config(&c)};
    s = tr_device_comm_create(dev, &ps, &co, c.dist.distributed_backend == TR_COMMBE_NCCL, &d,
                              &comm);
    if (s != TR_OK) fail_all(cli, rank, &c, &d, tr_cli_exit_code(s, &d));
    int code = train(&c, dir, rank, comm, dev, report, &d);
    if (tr_diags_find(&d, "comm.timeout")) {
        /* Each rank saw its own silent peer, so each reports; a finalize would wait for the
         * stuck peer forever, so the job ends here (mpirun then stops the remaining ranks). */
        tr_cli_print_diags(cli, &d);
        fflush(NULL);
        _exit(code ? code : 1);
    }
    tr_comm_destroy(comm);
    tr_device_close(dev);
    if (rank == 0)
        tr_cli_print_diags(cli, &d);
    else if (code != 0)
        print_rank_errors(rank, size, &d);
    tr_parallel_state_free(&ps);
    tr_config_free(&c);
    tr_diags_free(&d);
    MPI_Finalize();
    return code;
}

/* The module's entry (scripts/cli_module.h). Only a run that computes pays for loading OpenBLAS
 * with its best kernels; the re-execution comes back here with the variable set. */
int tr_cli_launch_entry(const tr_cli *cli, int *argc, char ***argv);
int tr_cli_launch_entry(const tr_cli *cli, int *argc, char ***argv) {
    tr_cpu_blas_reexec_if_slow(*argv);
    return tr_cli_launch(cli, argc, argv);
}
