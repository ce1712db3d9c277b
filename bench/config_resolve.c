/* Config resolution speed: recipe + finalize + validate + YAML dump, per recipe, against the
 * cost of merely starting a process (run_recipe --version), measured in the same run.
 *   bench_config_resolve [ITERATIONS] [RECIPE...]     target: < 1 ms per resolve
 * Exit code 1 when a recipe misses the target. */
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "recipes/resolve.h"

#ifndef TR_RUN_RECIPE_PATH
#define TR_RUN_RECIPE_PATH "run_recipe"
#endif

extern char **environ;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(double *v, int n, double p) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

/* One resolve as run_recipe --dry-run does it: everything but the printing. */
static tr_status resolve_once(const tr_recipe *r, uint64_t *fingerprint, bool report) {
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = r->name;
    o.world.world_size = r->min_world_size > 0 ? r->min_world_size : 1;
    o.world.gpus_per_node = o.world.world_size < 8 ? o.world.world_size : 8;
    o.validate.catalog_mode = true;
    tr_config c;
    memset(&c, 0, sizeof c);
    tr_diags d;
    tr_diags_init(&d);
    tr_status s = tr_resolve(&o, &c, &d);
    if (s != TR_OK && report) tr_diags_print_text(&d, stdout, false);
    char *yaml = s == TR_OK ? tr_config_dump_yaml_string(&c) : NULL;
    if (s == TR_OK && !yaml) s = TR_ERR_NOMEM;
    *fingerprint ^= yaml ? (uint64_t)strlen(yaml) : 0; /* keeps the dump from being optimised out */
    free(yaml);
    tr_config_free(&c);
    tr_diags_free(&d);
    return s;
}

static double bench_recipe(const tr_recipe *r, int iters, uint64_t *sink, double *p90) {
    double *t = malloc((size_t)iters * sizeof *t);
    if (!t) return -1;
    if (resolve_once(r, sink, true) != TR_OK) {
        free(t);
        return -1;
    }
    for (int i = 0; i < iters / 10; i++) resolve_once(r, sink, false); /* warm caches */
    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        if (resolve_once(r, sink, false) != TR_OK) {
            free(t);
            return -1;
        }
        t[i] = now_us() - t0;
    }
    double med = percentile(t, iters, 0.5);
    *p90 = percentile(t, iters, 0.9);
    free(t);
    return med;
}

/* Median wall time of starting and finishing `run_recipe --version`. */
static double process_start_us(int runs) {
    double *t = malloc((size_t)runs * sizeof *t);
    if (!t) return -1;
    char *argv[] = {(char *)TR_RUN_RECIPE_PATH, (char *)"--version", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", 1 /* O_WRONLY */, 0);
    int ok = 0;
    for (int i = 0; i < runs; i++) {
        double t0 = now_us();
        pid_t pid;
        int status = 0;
        if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) != 0) break;
        waitpid(pid, &status, 0);
        t[ok++] = now_us() - t0;
    }
    posix_spawn_file_actions_destroy(&fa);
    double med = ok ? percentile(t, ok, 0.5) : -1;
    free(t);
    return med;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 300;
    if (iters < 10) iters = 10;
    const char *names[16];
    int n = 0;
    for (int i = 2; i < argc && n < 16; i++) names[n++] = argv[i];
    if (n == 0) {
        /* Small dense, large dense with PP/VPP/CP, MoE with EP. */
        names[n++] = "llama32_1b_pretrain";
        names[n++] = "llama3_70b_pretrain";
        names[n++] = "qwen3_30b_a3b_pretrain";
    }
    uint64_t sink = 0;
    int missed = 0;
    double spawn = process_start_us(30);
    printf("%-36s %12s %12s %14s\n", "recipe", "median us", "p90 us", "resolves/s");
    for (int i = 0; i < n; i++) {
        const tr_recipe *r = tr_recipe_find(names[i]);
        double p90 = 0, med = r ? bench_recipe(r, iters, &sink, &p90) : -1;
        if (med < 0) {
            printf("%-36s failed to resolve\n", names[i]);
            missed = 1;
            continue;
        }
        printf("%-36s %12.1f %12.1f %14.0f%s\n", names[i], med, p90, 1e6 / med,
               med < 1000 ? "" : "  (over the 1 ms target)");
        if (med >= 1000) missed = 1;
        if (spawn > 0 && i == 0)
            printf(
                "  peer: starting run_recipe --version takes %.0f us (median of 30): one resolve "
                "costs %.1f%% of a process start (%.0fx cheaper)\n",
                spawn, 100 * med / spawn, spawn / med);
    }
    printf("iterations per recipe: %d; resolve = recipe + finalize + validate + YAML dump "
           "(checksum %" PRIu64 ")\n",
           iters, sink);
    return missed;
}
