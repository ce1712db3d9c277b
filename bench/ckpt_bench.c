/* Checkpoint throughput against the disk: the same bytes are written with a plain write + fsync
 * (the disk's sequential speed, measured in this run), saved as a sharded checkpoint by R ranks
 * in parallel (threads standing in for processes; fsync and commit included), loaded back cold
 * (page cache dropped with posix_fadvise) under the same layout and resharded to one rank, and
 * verified; `dd` (conv=fsync for the write, a cold read back) runs on the same bytes' size as the
 * peer everyone knows. Each step runs --repeat times, interleaved; every round is printed and the
 * median is compared, because shared disks drift between runs.
 *   bench_ckpt [--mb N] [--ranks R] [--repeat K] [--dir D] */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/checkpoint/ckpt.h"
#include "runtime/checkpoint/reader.h"

enum { N_TENSORS = 16, COLS = 4096, MAX_REPEAT = 15, STEPS = 8 };

typedef struct bench {
    int ranks;
    int64_t rows;
    size_t tensor_bytes, total;
    char *data, *back;
    char root[4096];
    char names[N_TENSORS][64];
    float **local; /* [rank][tensor]: rank-local copies, as a runtime holds them */
} bench;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void drop_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static double raw_write(bench *b) {
    char raw[4200];
    snprintf(raw, sizeof raw, "%s/raw.bin", b->root);
    double t0 = now_s();
    int fd = open(raw, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (size_t off = 0; fd >= 0 && off < b->total;) {
        size_t chunk = b->total - off > (64u << 20) ? 64u << 20 : b->total - off;
        ssize_t w = write(fd, b->data + off, chunk);
        if (w <= 0) break;
        off += (size_t)w;
    }
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    return now_s() - t0;
}

static double raw_read(bench *b) {
    char raw[4200];
    snprintf(raw, sizeof raw, "%s/raw.bin", b->root);
    drop_cache(raw);
    double t0 = now_s();
    int fd = open(raw, O_RDONLY);
    for (size_t off = 0; fd >= 0 && off < b->total;) {
        ssize_t r = pread(fd, b->back + off, b->total - off, (off_t)off);
        if (r <= 0) break;
        off += (size_t)r;
    }
    if (fd >= 0) close(fd);
    double t = now_s() - t0;
    unlink(raw);
    return t;
}

/* The same number of bytes through dd: written with conv=fsync, then read back cold. */
static double dd_step(bench *b, bool write) {
    char path[4200], cmd[8600];
    snprintf(path, sizeof path, "%s/dd.bin", b->root);
    size_t mib = (b->total + (1u << 20) - 1) >> 20;
    if (write)
        snprintf(cmd, sizeof cmd, "dd if=/dev/zero of='%s' bs=1M count=%zu conv=fsync status=none",
                 path, mib);
    else
        snprintf(cmd, sizeof cmd, "dd if='%s' of=/dev/null bs=1M status=none", path);
    if (!write) drop_cache(path);
    double t0 = now_s();
    int rc = system(cmd);
    double t = now_s() - t0;
    if (!write) unlink(path);
    return rc == 0 ? t : -1;
}

static void register_rank(const bench *b, int r, tr_ckpt_tensor *t) {
    int64_t g[2] = {b->rows, COLS};
    for (int k = 0; k < N_TENSORS; k++) {
        t[k] = tr_ckpt_tensor_full(b->names[k], TR_CKPT_F32, 2, g, b->local[r * N_TENSORS + k]);
        t[k].tp_axis = 0;
        tr_ckpt_tensor_split(&t[k], 0, b->ranks, r);
    }
}

typedef struct rank_job {
    tr_ckpt_save *save;
    tr_ckpt_tensor t[N_TENSORS];
    tr_diags d;
    tr_status status;
} rank_job;

static void *write_rank(void *arg) {
    rank_job *j = arg;
    j->status = tr_ckpt_save_write_shards(j->save, j->t, N_TENSORS, &j->d);
    return NULL;
}

/* Saves iteration `it` with every rank writing in parallel; < 0 on failure. */
static double ckpt_save(bench *b, int64_t it, tr_diags *d) {
    rank_job *jobs = calloc((size_t)b->ranks, sizeof *jobs);
    pthread_t *th = calloc((size_t)b->ranks, sizeof *th);
    tr_ckpt_save_opts o;
    tr_ckpt_save_opts_init(&o, b->root, it);
    o.world = b->ranks;
    o.nonce = tr_ckpt_new_nonce();
    o.layout.tp = b->ranks;
    bool ok = true;
    double t0 = now_s();
    for (int r = 0; r < b->ranks; r++) {
        tr_diags_init(&jobs[r].d);
        register_rank(b, r, jobs[r].t);
        o.rank = r;
        ok = ok && tr_ckpt_save_begin(&o, &jobs[r].save, d) == TR_OK &&
             pthread_create(&th[r], NULL, write_rank, &jobs[r]) == 0;
    }
    for (int r = 0; r < b->ranks; r++) {
        if (jobs[r].save) pthread_join(th[r], NULL);
        ok = ok && jobs[r].status == TR_OK;
    }
    ok = ok && tr_ckpt_save_finalize(jobs[0].save, d) == TR_OK &&
         tr_ckpt_save_commit(jobs[0].save, d) == TR_OK;
    double t = now_s() - t0;
    for (int r = 0; r < b->ranks; r++) {
        if (jobs[r].d.n_errors) tr_diags_print_text(&jobs[r].d, stderr, false);
        tr_diags_free(&jobs[r].d);
        tr_ckpt_save_free(jobs[r].save);
    }
    free(jobs);
    free(th);
    return ok ? t : -1;
}

static tr_ckpt_reader *open_cold(bench *b, int64_t it, tr_diags *d) {
    char iter[4200], p[4300];
    snprintf(iter, sizeof iter, "%s/iter_%07lld", b->root, (long long)it);
    for (int r = 0; r < b->ranks; r++) {
        snprintf(p, sizeof p, "%s/shard_r%05d.bin", iter, r);
        drop_cache(p);
    }
    tr_ckpt_reader *rd = NULL;
    tr_ckpt_open(iter, &rd, d);
    return rd;
}

/* The three read paths on iteration it: same layout, one rank reading everything, verify. */
static bool ckpt_reads(bench *b, int64_t it, double *same, double *full, double *verify,
                       tr_diags *d) {
    double t0 = now_s();
    tr_ckpt_reader *rd = open_cold(b, it, d);
    bool ok = rd != NULL;
    for (int r = 0; ok && r < b->ranks; r++) {
        tr_ckpt_tensor t[N_TENSORS];
        register_rank(b, r, t);
        ok = tr_ckpt_load_tensors(rd, t, N_TENSORS, d) == TR_OK;
    }
    *same = now_s() - t0;
    tr_ckpt_close(rd);
    t0 = now_s();
    rd = open_cold(b, it, d);
    ok = ok && rd != NULL;
    for (int k = 0; ok && k < N_TENSORS; k++) {
        tr_ckpt_slice all = {2, {0, 0}, {b->rows, COLS}};
        ok = tr_ckpt_read(rd, b->names[k], TR_CKPT_F32, &all, b->back + (size_t)k * b->tensor_bytes,
                          d) == TR_OK;
    }
    *full = now_s() - t0;
    ok = ok && memcmp(b->back, b->data, b->total) == 0;
    tr_ckpt_close(rd);
    t0 = now_s();
    rd = open_cold(b, it, d);
    ok = ok && rd && tr_ckpt_verify(rd, NULL, d) == TR_OK;
    *verify = now_s() - t0;
    tr_ckpt_close(rd);
    return ok;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
    long mb = 256;
    int ranks = 4, repeat = 3;
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc)
            mb = atol(argv[++i]);
        else if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc)
            ranks = atoi(argv[++i]);
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            base = argv[++i];
        else {
            fprintf(stderr, "usage: bench_ckpt [--mb N] [--ranks R] [--repeat K] [--dir D]\n");
            return 1;
        }
    }
    if (mb < 1 || ranks < 1 || ranks > 64 || repeat < 1 || repeat > MAX_REPEAT) {
        fprintf(stderr, "bench_ckpt: need --mb >= 1, --ranks in 1..64, --repeat in 1..%d\n",
                MAX_REPEAT);
        return 1;
    }
    bench b;
    memset(&b, 0, sizeof b);
    b.ranks = ranks;
    b.rows = (int64_t)mb * (1 << 20) / N_TENSORS / COLS / 4 / ranks * ranks;
    if (b.rows < ranks) b.rows = ranks;
    b.tensor_bytes = (size_t)b.rows * COLS * 4;
    b.total = b.tensor_bytes * N_TENSORS;
    b.data = malloc(b.total);
    b.back = malloc(b.total);
    b.local = calloc((size_t)ranks * N_TENSORS, sizeof *b.local);
    if (!b.data || !b.back || !b.local) return 1;
    float *f = (float *)b.data;
    for (size_t i = 0; i < b.total / 4; i++) f[i] = (float)(i % 65521) * 0.5f;
    size_t block = b.tensor_bytes / (size_t)ranks;
    for (int k = 0; k < N_TENSORS; k++) {
        snprintf(b.names[k], sizeof b.names[k], "decoder.layers.%d.weight", k);
        for (int r = 0; r < ranks; r++) {
            b.local[r * N_TENSORS + k] = malloc(block);
            memcpy(b.local[r * N_TENSORS + k], b.data + (size_t)k * b.tensor_bytes + r * block,
                   block);
        }
    }
    snprintf(b.root, sizeof b.root, "%s/trestle_ckpt_bench_XXXXXX", base);
    if (!mkdtemp(b.root)) {
        perror("mkdtemp");
        return 1;
    }
    double MB = (double)b.total / 1e6;
    char cpu[256] = "unknown";
    FILE *ci = fopen("/proc/cpuinfo", "r");
    while (ci && fgets(cpu, sizeof cpu, ci) && strncmp(cpu, "model name", 10) != 0) {
    }
    if (ci) fclose(ci);
    cpu[strcspn(cpu, "\n")] = '\0';
    printf("cpu: %s\n", strchr(cpu, ':') ? strchr(cpu, ':') + 2 : cpu);
    printf("bench_ckpt: %.1f MB in %d tensors of [%lld, %d] f32, %d ranks, median of %d, dir %s\n",
           MB, N_TENSORS, (long long)b.rows, COLS, ranks, repeat, b.root);
    double t[STEPS][MAX_REPEAT];
    tr_diags d;
    tr_diags_init(&d);
    bool ok = true;
    for (int k = 0; ok && k < repeat; k++) {
        /* Alternate which goes first: write-back of the previous step must not favour either. */
        if (k % 2) {
            t[1][k] = ckpt_save(&b, k + 1, &d);
            t[0][k] = raw_write(&b);
        } else {
            t[0][k] = raw_write(&b);
            t[1][k] = ckpt_save(&b, k + 1, &d);
        }
        t[2][k] = raw_read(&b);
        ok = t[1][k] > 0 && ckpt_reads(&b, k + 1, &t[3][k], &t[4][k], &t[5][k], &d);
        tr_ckpt_retain(b.root, 1, 0, &d);
        t[6][k] = dd_step(&b, true);
        t[7][k] = dd_step(&b, false);
        ok = ok && t[6][k] > 0 && t[7][k] > 0;
        printf("round %d MB/s: write %.0f, save %.0f, read %.0f, load %.0f, resharded %.0f, verify "
               "%.0f, dd write %.0f, dd read %.0f\n",
               k + 1, MB / t[0][k], MB / t[1][k], MB / t[2][k], MB / t[3][k], MB / t[4][k],
               MB / t[5][k], MB / t[6][k], MB / t[7][k]);
        fflush(stdout);
    }
    if (!ok) tr_diags_print_text(&d, stderr, false);
    double m[STEPS];
    for (int s = 0; s < STEPS; s++) m[s] = ok ? median(t[s], repeat) : 1;
    const char *label[STEPS] = {"disk: write + fsync (1 file)",  "checkpoint save (fsync, commit)",
                                "disk: cold read (1 file)",      "checkpoint load, same layout",
                                "checkpoint load, resharded->1", "verify (all checksums)",
                                "dd bs=1M conv=fsync (write)",   "dd bs=1M (cold read)"};
    int ref[STEPS] = {0, 0, 2, 2, 2, 2, 0, 2}, dd_ref[STEPS] = {6, 6, 7, 7, 7, 7, 6, 7};
    printf("%-34s %10s %8s %8s\n", "step (median)", "MB/s", "vs disk", "vs dd");
    for (int s = 0; ok && s < STEPS; s++)
        printf("%-34s %10.0f %8.2f %8.2f\n", label[s], MB / m[s], m[ref[s]] / m[s],
               m[dd_ref[s]] / m[s]);
    for (int i = 0; i < ranks * N_TENSORS; i++) free(b.local[i]);
    free(b.local);
    free(b.data);
    free(b.back);
    tr_diags_free(&d);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", b.root);
    if (system(cmd) != 0) ok = false;
    return ok ? 0 : 1;
}
