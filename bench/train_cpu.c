/* Training-step throughput of the CPU runtime next to PyTorch eager on the same model, batch and
 * machine: tokens/s and achieved GFLOP/s (6 * params * tokens + causal attention), for GPT-2
 * 124M at B=4 T=64, a ~30M Llama-style model, and llama_tiny. A step is what the training loop
 * does: zero grads, forward, backward, grad norm, clip, AdamW.
 *
 *   bench_train_cpu [--steps N] [--rounds R] [--peak GFLOPS] [--python PY] [--no-torch]
 *                   [--only NAME]
 *
 * Each round times Trestle then PyTorch; the best round of each is reported, so a busy machine
 * (other jobs stealing the cores for a while) hurts both sides alike.
 * The PyTorch side runs bench/train_cpu.py (which installs torch into a cache venv if needed).
 * On VMs whose CPU model OpenBLAS does not recognise the bench re-executes itself with
 * OPENBLAS_CORETYPE set (docs/kernels.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/blas_env.h"
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

static int run_c(const bench_case *bc, int steps, double *tok_s, double *gflops, int64_t *np,
                 phases *ph) {
    tr_model m;
    if (tr_model_create(&m, &bc->spec, (tr_tp_shard){0, 1}, tr_ops_cpu(), bc->batch) != TR_OK)
        return 0;
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
        if (s == 0) t0 = now_s();
        float loss;
        double norm, a = now_s();
        memset(m.grads, 0, (size_t)m.n_params * sizeof(float));
        tr_model_forward(&m, ids, tg, &loss);
        double b = now_s();
        tr_model_backward(&m, 1.0f);
        double c = now_s();
        tr_grad_norm(m.ops, m.grads, m.n_params, &norm);
        tr_clip_grads(m.ops, m.grads, m.n_params, 1.0, norm);
        tr_optimizer_step(&o, m.params, m.grads, 1e-4, 0.1);
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

static int run_torch(const char *py, const bench_case *bc, int steps, double *tok_s) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s/bench/train_cpu.py --model %s --batch %d --seq %d --steps %d",
             py, TRESTLE_SOURCE_DIR, bc->name, bc->batch, bc->spec.seq, steps);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    char line[512];
    int ok = 0;
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "RESULT tokens_per_s=%lf", tok_s) == 1) ok = 1;
    return pclose(p) == 0 && ok;
}

int main(int argc, char **argv) {
    tr_cpu_blas_reexec_if_slow(argv); /* before any thread: picks OpenBLAS's AVX kernels */
    int steps = 10, torch = 1, rounds = 2;
    double peak = 190.0;
    const char *py = "python3", *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--peak") && i + 1 < argc)
            peak = atof(argv[++i]);
        else if (!strcmp(argv[i], "--python") && i + 1 < argc)
            py = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--no-torch"))
            torch = 0;
        else {
            fprintf(stderr,
                    "usage: %s [--steps N] [--peak GFLOPS] [--python PY] [--no-torch] "
                    "[--only gpt2_124m|llama_30m|llama_tiny]\n",
                    argv[0]);
            return 2;
        }
    }
    if (steps < 1) steps = 1;
    if (rounds < 1) rounds = 1;
    const bench_case cases[] = {
        {"gpt2_124m", gpt2_124m(), 4},
        {"llama_30m", llama(8, 512, 8, 4, 1408, 16384), 4},
        {"llama_tiny", llama(2, 64, 4, 2, 192, 256), 8},
    };
    printf("OpenBLAS core: %s\n", tr_cpu_blas_core());
    printf("%-11s %6s %9s | %11s %9s %7s | %11s %7s\n", "model", "B x T", "params", "trestle tok/s",
           "GFLOP/s", "%peak", "torch tok/s", "ratio");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bench_case *bc = &cases[i];
        if (only && strcmp(only, bc->name) != 0) continue;
        double tps = 0, gf = 0, ttps = 0;
        int64_t np = 0;
        phases ph = {0};
        int have_torch = 0;
        for (int r = 0; r < rounds; r++) {
            double t1, g1, tt1;
            phases p1;
            if (!run_c(bc, steps, &t1, &g1, &np, &p1)) {
                fprintf(stderr, "%s: model setup failed\n", bc->name);
                return 1;
            }
            if (t1 > tps) {
                tps = t1;
                gf = g1;
                ph = p1;
            }
            if (torch && run_torch(py, bc, steps, &tt1)) {
                have_torch = 1;
                if (tt1 > ttps) ttps = tt1;
            }
        }
        char bt[32];
        snprintf(bt, sizeof bt, "%dx%d", bc->batch, bc->spec.seq);
        printf("%-11s %6s %8.1fM | %13.0f %9.1f %6.1f%% | ", bc->name, bt, np / 1e6, tps, gf,
               100.0 * gf / peak);
        if (have_torch)
            printf("%11.0f %6.2fx\n", ttps, tps / ttps);
        else
            printf("%11s %7s\n", "n/a", "");
        printf("%-11s   trestle step %.1f ms = forward %.1f + backward %.1f + norm/clip/AdamW "
               "%.1f\n",
               "", 1e3 * (ph.fwd + ph.bwd + ph.opt), 1e3 * ph.fwd, 1e3 * ph.bwd, 1e3 * ph.opt);
        fflush(stdout);
    }
    return 0;
}
