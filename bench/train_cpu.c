/* Training-step throughput of the CPU runtime next to PyTorch eager on the same model, batch and
 * machine, and next to the sgemm ceiling of the same step (bench/sgemm_ceiling.h): tokens/s and
 * achieved GFLOP/s (6 * params * tokens + causal attention), for GPT-2 124M at B=4 T=64, a ~30M
 * Llama-style model, and llama_tiny. A step is what the training loop does: zero grads,
 * forward, backward, grad norm, clip, AdamW.
 *
 *   bench_train_cpu [--steps N] [--rounds R] [--python PY] [--no-torch] [--only NAME] [--profile]
 *
 * --profile runs Trestle's steps through a timed copy of the op table (bench/op_profile.h) and
 * prints, each round, where the step's time goes against the round's sgemm ceiling.
 *
 * Each round times Trestle, the ceiling and PyTorch back to back and prints all three; the
 * summary gives min / median / max over the rounds and the ratios within each round, which a
 * busy machine (other jobs taking the cores for a while) disturbs far less than the absolutes.
 * The PyTorch side runs bench/train_cpu.py (which installs torch into a cache venv if needed).
 * On VMs whose CPU model OpenBLAS does not recognise the bench re-executes itself with
 * OPENBLAS_CORETYPE set (docs/kernels.md). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/op_profile.h"
#include "bench/sgemm_ceiling.h"
#include "kernels/cpu/blas_env.h"
#include "kernels/cpu/threadpool.h"
#include "runtime/model/model.h"
#include "runtime/optimizer/optimizer.h"

typedef struct bench_case {
    const char *name;
    tr_model_spec spec;
    int batch;
} bench_case;

static tr_model_spec gpt2_124m(void) {
    return (tr_model_spec){.num_layers = 12,
                           .hidden = 768,
                           .heads = 12,
                           .groups = 12,
                           .head_dim = 64,
                           .ffn = 3072,
                           .vocab = 50304,
                           .seq = 64,
                           .layernorm = 1,
                           .gelu_tanh = 1,
                           .learned_pos = 1,
                           .bias_linear = 1,
                           .bias_qkv = 1,
                           .tied = 1,
                           .eps = 1e-5f,
                           .init_std = 0.02,
                           .embed_init_std = 0.02};
}

static tr_model_spec llama(int layers, int hidden, int heads, int groups, int ffn, int vocab) {
    tr_model_spec s = {.num_layers = layers,
                       .hidden = hidden,
                       .heads = heads,
                       .groups = groups,
                       .head_dim = hidden / heads,
                       .ffn = ffn,
                       .vocab = vocab,
                       .seq = 64,
                       .swiglu = 1,
                       .rope = 1,
                       .tied = 1,
                       .eps = 1e-5f,
                       .init_std = 0.02,
                       .embed_init_std = 0.02};
    s.rope_p = (tr_rope_params){.rot_dim = hidden / heads, .base = 10000.0};
    return s;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t count_params(const tr_model *m) {
    int64_t n = 0;
    for (int i = 0; i < m->n_info; i++) n += m->info[i].numel;
    return n;
}

/* 6 N per token for the weights, plus causal attention (QK^T and PV, forward + 2x backward). */
static double train_flops_per_seq(const tr_model_spec *s, int64_t params) {
    double T = s->seq, hd = (double)s->heads * s->head_dim;
    double attn = 3.0 * s->num_layers * 2.0 * 2.0 * hd * T * (T + 1) / 2.0;
    return 6.0 * (double)params * T + attn;
}

typedef struct phases {
    double fwd, bwd, opt; /* seconds per step */
} phases;

static int run_c(const bench_case *bc, const tr_ops *ops, int steps, double *tok_s, double *gflops,
                 int64_t *np, phases *ph) {
    tr_model m;
    if (tr_model_create(&m, &bc->spec, (tr_tp_shard){0, 1}, ops, bc->batch) != TR_OK) return 0;
    tr_model_init_weights(&m, 1);
    tr_optimizer_spec os = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .clip_grad = 1.0};
    tr_optimizer o;
    if (tr_optimizer_create(&o, &os, m.ops, m.info, m.n_info, m.n_params) != TR_OK) return 0;
    int rows = bc->batch * bc->spec.seq;
    int32_t *ids = malloc((size_t)rows * sizeof *ids), *tg = malloc((size_t)rows * sizeof *tg);
    for (int i = 0; i < rows; i++) {
        ids[i] = (int32_t)((i * 7919u) % (unsigned)bc->spec.vocab);
        tg[i] = (int32_t)((i * 104729u + 1) % (unsigned)bc->spec.vocab);
    }
    double t0 = 0.0;
    *ph = (phases){0};
    for (int s = -2; s < steps; s++) { /* two warm-up steps */
        if (s == 0) {
            tr_bench_profile_reset();
            t0 = now_s();
        }
        float loss;
        double norm, a = now_s();
        m.ops->fill(m.grads, m.n_params, 0.0f); /* as train_step_single zeroes them */
        tr_model_forward(&m, ids, tg, &loss);
        double b = now_s();
        tr_model_backward(&m, 1.0f);
        double c = now_s();
        tr_grad_norm(m.ops, m.grads, m.n_params, &norm);
        tr_optimizer_step_clipped(&o, m.params, m.grads, 1e-4, 0.1, tr_clip_coeff(1.0, norm));
        if (s >= 0) {
            ph->fwd += (b - a) / steps;
            ph->bwd += (c - b) / steps;
            ph->opt += (now_s() - c) / steps;
        }
    }
    double dt = (now_s() - t0) / steps;
    *np = count_params(&m);
    *tok_s = rows / dt;
    *gflops = train_flops_per_seq(&bc->spec, *np) * bc->batch / dt / 1e9;
    free(ids);
    free(tg);
    tr_optimizer_free(&o);
    tr_model_free(&m);
    return 1;
}

static int run_torch(const char *py, const bench_case *bc, int steps, int threads, double *ms) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s %s/bench/train_cpu.py --model %s --batch %d --seq %d --steps %d --threads %d", py,
             TRESTLE_SOURCE_DIR, bc->name, bc->batch, bc->spec.seq, steps, threads);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    char line[512];
    int ok = 0;
    double tok_s = 0.0;
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "RESULT tokens_per_s=%lf", &tok_s) == 1 && tok_s > 0) ok = 1;
    *ms = ok ? 1e3 * bc->batch * bc->spec.seq / tok_s : 0.0;
    return pclose(p) == 0 && ok;
}

static double load1(void) {
    double l = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1.0;
        fclose(f);
    }
    return l;
}

static void print_machine(void) {
    char line[256] = "unknown", *model = line;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10)) break;
        fclose(f);
        char *colon = strchr(line, ':');
        model = colon ? colon + 2 : line;
        model[strcspn(model, "\n")] = 0;
    }
    __builtin_cpu_init();
    printf("CPU: %s; ISA:%s%s%s%s; %d CPUs available, %d threads; OpenBLAS core %s\n", model,
           __builtin_cpu_supports("avx512f") ? " avx512f" : "",
           __builtin_cpu_supports("avx2") ? " avx2" : "",
           __builtin_cpu_supports("fma") ? " fma" : "",
           __builtin_cpu_supports("avx512f") || __builtin_cpu_supports("avx2") ? "" : " sse only",
           tr_cpu_available_cpus(), tr_cpu_num_threads(), tr_cpu_blas_core());
    time_t t = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&t));
    printf("date %s, load average %.2f at start\n", when, load1());
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* min / median / max of n values (sorted in place) and the spread (max - min) / median. */
static void stats(const char *what, double *v, int n, const char *unit) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    printf("  %-28s min %9.2f  median %9.2f  max %9.2f %-8s spread %5.1f%%\n", what, v[0], med,
           v[n - 1], unit, med > 0 ? 100.0 * (v[n - 1] - v[0]) / med : 0.0);
}

#define MAX_ROUNDS 64

int main(int argc, char **argv) {
    tr_cpu_blas_reexec_if_slow(argv); /* before any thread: picks OpenBLAS's AVX kernels */
    int steps = 5, torch = 1, rounds = 3, profile = 0;
    const char *py = "python3", *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--python") && i + 1 < argc)
            py = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--no-torch"))
            torch = 0;
        else if (!strcmp(argv[i], "--profile"))
            profile = 1;
        else {
            fprintf(stderr,
                    "usage: %s [--steps N] [--rounds R] [--python PY] [--no-torch] "
                    "[--only gpt2_124m|llama_30m|llama_tiny] [--profile]\n",
                    argv[0]);
            return 2;
        }
    }
    if (steps < 1) steps = 1;
    if (rounds < 1) rounds = 1;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    const bench_case cases[] = {
        {"gpt2_124m", gpt2_124m(), 4},
        {"llama_30m", llama(8, 512, 8, 4, 1408, 16384), 4},
        {"llama_tiny", llama(2, 64, 4, 2, 192, 256), 8},
    };
    print_machine();
    int nt = tr_cpu_num_threads();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bench_case *bc = &cases[i];
        if (only && strcmp(only, bc->name) != 0) continue;
        int rows = bc->batch * bc->spec.seq;
        double ms[MAX_ROUNDS], gf[MAX_ROUNDS], ceil[MAX_ROUNDS], frac[MAX_ROUNDS];
        double tms[MAX_ROUNDS], ratio[MAX_ROUNDS], blas[MAX_ROUNDS];
        int nt_ok = 0;
        int64_t np = 0;
        printf("\n%s  B x T %dx%d  (%d steps a round after 2 warm-up steps)\n", bc->name, bc->batch,
               bc->spec.seq, steps);
        for (int r = 0; r < rounds; r++) {
            double tok_s;
            phases ph;
            const tr_ops *ops = profile ? tr_bench_profiled_ops() : tr_ops_cpu();
            if (!run_c(bc, ops, steps, &tok_s, &gf[r], &np, &ph)) {
                fprintf(stderr, "%s: model setup failed\n", bc->name);
                return 1;
            }
            ms[r] = 1e3 * rows / tok_s;
            tr_bench_ceiling c;
            if (!tr_bench_sgemm_ceiling(&bc->spec, rows, nt, 2, &c)) {
                fprintf(stderr, "%s: ceiling buffers failed\n", bc->name);
                return 1;
            }
            ceil[r] = c.mix_gflops;
            blas[r] = c.blas_gflops;
            frac[r] = 100.0 * gf[r] / c.mix_gflops;
            printf("  round %d: trestle %8.1f ms/step %7.1f GFLOP/s (fwd %.0f + bwd %.0f + "
                   "norm/clip/AdamW %.0f ms) | sgemm ceiling %6.1f GFLOP/s (OpenBLAS threads "
                   "%.1f, best shape %.1f; %.1f GFLOP of GEMMs) -> %5.1f%% of it",
                   r + 1, ms[r], gf[r], 1e3 * ph.fwd, 1e3 * ph.bwd, 1e3 * ph.opt, c.mix_gflops,
                   c.blas_gflops, c.best_gflops, c.gemm_gflop, frac[r]);
            double t_ms;
            if (torch && run_torch(py, bc, steps, nt, &t_ms)) {
                tms[nt_ok] = t_ms;
                ratio[nt_ok] = t_ms / ms[r];
                printf(" | torch %8.1f ms/step, torch/trestle %.2fx", t_ms, ratio[nt_ok]);
                nt_ok++;
            } else if (torch) {
                printf(" | torch failed");
            }
            printf(" | load %.2f\n", load1());
            if (profile) tr_bench_profile_print(steps, ms[r] / 1e3, ceil[r]);
            fflush(stdout);
        }
        printf("  %s: %.1fM params, %d rounds\n", bc->name, np / 1e6, rounds);
        stats("trestle ms/step", ms, rounds, "ms");
        stats("trestle GFLOP/s", gf, rounds, "GFLOP/s");
        stats("sgemm ceiling (step mix)", ceil, rounds, "GFLOP/s");
        stats("sgemm, OpenBLAS threads", blas, rounds, "GFLOP/s");
        stats("trestle % of same-round ceil.", frac, rounds, "%");
        if (nt_ok) {
            stats("torch ms/step", tms, nt_ok, "ms");
            stats("torch/trestle, same round", ratio, nt_ok, "x");
        }
        fflush(stdout);
    }
    return 0;
}
