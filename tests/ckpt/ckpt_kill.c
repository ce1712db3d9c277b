/* Crash safety: a child process saves a checkpoint (all ranks of an 8-rank layout, fsync on) and
 * is killed with SIGKILL after a random delay. Whatever the moment, the tracker must name a
 * checkpoint that verifies and loads bitwise (under another layout), and any committed
 * iteration directory must be complete. Usage: ckpt_kill [rounds] [seed] */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "runtime/checkpoint/ckpt.h"
#include "runtime/checkpoint/reader.h"
#include "tests/ckpt/ckpt_util.h"

static const ck_layout SAVE = {2, 2, 1, 2, 1};
static const ck_layout LOAD = {1, 4, 1, 1, 0};

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static bool verifies(const char *dir) {
    tr_diags d;
    tr_diags_init(&d);
    tr_ckpt_reader *r;
    bool ok = tr_ckpt_open(dir, &r, &d) == TR_OK;
    if (ok) {
        ok = tr_ckpt_verify(r, NULL, &d) == TR_OK;
        tr_ckpt_close(r);
    }
    if (!ok) tr_diags_print_text(&d, stderr, false);
    tr_diags_free(&d);
    return ok;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 24;
    unsigned seed = argc > 2 ? (unsigned)atoi(argv[2]) : 20261129u;
    srand(seed);
    char *root = ck_tmpdir();
    tr_diags d;
    tr_diags_init(&d);
    int failures = 0;
    double t0 = now_us();
    if (ck_save_layout_sync(root, &SAVE, 1, true, &d) != TR_OK) {
        tr_diags_print_text(&d, stderr, false);
        return 1;
    }
    double save_us = now_us() - t0;
    int64_t good = 1;
    int interrupted = 0, completed = 0;
    for (int k = 0; k < rounds; k++) {
        int64_t it = 2 + k;
        /* Delays span the whole save, a little past its end so that completion is also seen. */
        useconds_t delay = (useconds_t)((double)rand() / RAND_MAX * save_us * 1.1);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            tr_diags cd;
            tr_diags_init(&cd);
            _exit(ck_save_layout_sync(root, &SAVE, it, true, &cd) == TR_OK ? 0 : 3);
        }
        usleep(delay);
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
            fprintf(stderr, "round %d: the save itself failed (%d)\n", k, WEXITSTATUS(status));
            failures++;
        }
        char *dir;
        int64_t latest;
        if (tr_ckpt_find(root, -1, &dir, &latest, &d) != TR_OK) {
            tr_diags_print_text(&d, stderr, false);
            failures++;
            continue;
        }
        free(dir);
        if (latest != good && latest != it) {
            fprintf(stderr, "round %d: tracker names %lld, expected %lld or %lld\n", k,
                    (long long)latest, (long long)good, (long long)it);
            failures++;
        }
        long bad = ck_load_and_compare(root, &LOAD, latest, &d);
        if (bad != 0) {
            fprintf(stderr, "round %d: iteration %lld loads wrongly (%ld)\n", k, (long long)latest,
                    bad);
            tr_diags_print_text(&d, stderr, false);
            failures++;
        }
        /* A directory under the final name exists only once it is complete. */
        char path[700];
        snprintf(path, sizeof path, "%s/iter_%07lld", root, (long long)it);
        struct stat st;
        if (stat(path, &st) == 0 && !verifies(path)) {
            fprintf(stderr, "round %d: %s exists but does not verify\n", k, path);
            failures++;
        }
        if (latest == it)
            completed++;
        else
            interrupted++;
        good = latest;
        tr_ckpt_retain(root, 2, 0, &d);
        tr_diags_clear(&d);
    }
    printf("ckpt_kill: %d rounds (seed %u, save %.0f us): %d interrupted, %d completed, %d "
           "failures\n",
           rounds, seed, save_us, interrupted, completed, failures);
    if (interrupted == 0) {
        fprintf(stderr, "no save was interrupted: the test proved nothing\n");
        failures++;
    }
    tr_diags_free(&d);
    ck_rm_rf(root);
    free(root);
    return failures ? 1 : 0;
}
