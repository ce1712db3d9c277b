/* One training step (zero the gradients, forward, backward) of a Llama-style MoE model, 8
 * experts top-2 of width F, hidden 256, 4 layers, next to the dense model with the same active
 * parameters (MLP width 2F), same batch and machine, in the same run: tokens/s of both, their
 * ratio, and the share of the MoE step spent routing (router GEMMs, scores, top-k, balancing
 * losses) and permuting tokens (gather by expert, weighted combine, and their backwards), from
 * the layer's own timers (tr_moe_timing). Each round times the dense model then the MoE model
 * and prints both; the best round of each is summarised.
 *
 *   bench_moe_cpu [--rounds R] [--steps N] [--ffn F] [--batch B] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/blas_env.h"
#include "runtime/model/model.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static tr_model_spec spec(int ffn, int experts) {
    tr_model_spec s = {.num_layers = 4,
                       .hidden = 256,
                       .heads = 4,
                       .groups = 4,
                       .head_dim = 64,
                       .ffn = ffn,
                       .vocab = 256,
                       .seq = 128,
                       .swiglu = 1,
                       .rope = 1,
                       .eps = 1e-6f,
                       .init_std = 0.02,
                       .embed_init_std = 0.02};
    s.rope_p = (tr_rope_params){.rot_dim = 64, .base = 10000.0};
    if (experts) {
        s.moe = (tr_moe_spec){.experts = experts,
                              .topk = 2,
                              .ffn = ffn,
                              .topk_scale = 1.0f,
                              .balance = TR_MOE_LB_AUX,
                              .aux_coeff = 1e-2f,
                              .z_coeff = 1e-3f};
        s.moe.layers[0] = 0xF;
    }
    return s;
}

static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) snprintf(out, n, "%s", c + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    fclose(f);
}

/* Seconds per step over `steps` steps. */
static double time_steps(tr_model *m, const int32_t *ids, const int32_t *tg, int steps) {
    double t0 = now();
    for (int i = 0; i < steps; i++) {
        memset(m->grads, 0, (size_t)m->n_params * sizeof(float));
        float loss;
        if (tr_model_forward(m, ids, tg, &loss) != TR_OK || tr_model_backward(m, 1.0f) != TR_OK) {
            fprintf(stderr, "step failed\n");
            exit(1);
        }
    }
    return (now() - t0) / steps;
}

static void moe_times(const tr_model *m, double *route, double *perm) {
    *route = *perm = 0.0;
    for (int i = 0; i < m->spec.num_layers; i++) {
        if (!m->moe || !m->moe[i]) continue;
        double r, p, e, s;
        tr_moe_timing(m->moe[i], &r, &p, &e, &s);
        *route += r;
        *perm += p;
    }
}

int main(int argc, char **argv) {
    tr_cpu_blas_reexec_if_slow(argv);
    int rounds = 5, steps = 3, F = 512, batch = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--ffn")) F = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
    }
    char cpu[160];
    cpu_model(cpu, sizeof cpu);
    printf("cpu: %s\n", cpu);
    tr_model_spec ds = spec(2 * F, 0), ms = spec(F, 8);
    tr_model dense, moe;
    if (tr_model_create(&dense, &ds, (tr_tp_shard){0, 1}, tr_ops_cpu(), batch) != TR_OK ||
        tr_model_create(&moe, &ms, (tr_tp_shard){0, 1}, tr_ops_cpu(), batch) != TR_OK ||
        tr_model_init_weights(&dense, 1) != TR_OK || tr_model_init_weights(&moe, 1) != TR_OK)
        return fprintf(stderr, "model creation failed\n"), 1;
    int n = batch * ds.seq;
    int32_t *ids = malloc((size_t)n * sizeof *ids), *tg = malloc((size_t)n * sizeof *tg);
    if (!ids || !tg) return 1;
    for (int i = 0; i < n; i++) ids[i] = (i * 37 + 11) % 256, tg[i] = (i * 53 + 7) % 256;
    printf("dense: %d layers, hidden 256, MLP width %d, %lld parameters\n", ds.num_layers, 2 * F,
           (long long)dense.n_params);
    printf("moe:   %d layers, hidden 256, 8 experts top-2 of width %d (the same active MLP), "
           "%lld parameters\n",
           ms.num_layers, F, (long long)moe.n_params);
    printf("step: zero grads, forward, backward; %d tokens; %d steps per round\n", n, steps);
    time_steps(&dense, ids, tg, 1); /* warm-up */
    time_steps(&moe, ids, tg, 1);
    double best_d = 1e30, best_m = 1e30, best_share = 0.0;
    for (int r = 0; r < rounds; r++) {
        double td = time_steps(&dense, ids, tg, steps);
        double r0, p0, r1, p1;
        moe_times(&moe, &r0, &p0);
        double tm = time_steps(&moe, ids, tg, steps);
        moe_times(&moe, &r1, &p1);
        double route = (r1 - r0) / steps, perm = (p1 - p0) / steps;
        printf("round %d: dense %.1f ms (%.0f tokens/s) | moe %.1f ms (%.0f tokens/s) | moe/dense "
               "time %.2f | routing %.1f%%, permutation %.1f%% of the MoE step\n",
               r + 1, 1e3 * td, n / td, 1e3 * tm, n / tm, tm / td, 100 * route / tm,
               100 * perm / tm);
        if (td < best_d) best_d = td;
        if (tm < best_m) best_m = tm, best_share = (route + perm) / tm;
    }
    printf("best: dense %.0f tokens/s, moe %.0f tokens/s (%.2fx the dense time); routing + "
           "permutation %.1f%% of the MoE step\n",
           n / best_d, n / best_m, best_m / best_d, 100 * best_share);
    tr_model_free(&dense);
    tr_model_free(&moe);
    free(ids);
    free(tg);
    return 0;
}
