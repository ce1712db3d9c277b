/* Activation memory under recomputation (runtime/model/recompute.c): the activation arena a
 * rank allocates for llama32_1b-shaped layers (hidden 2048, 32 heads, 8 query groups, ffn 8192,
 * SwiGLU, RMSNorm, RoPE) at seq 4096, micro batch 1, for a middle pipeline stage of 4 layers
 * with 1 and 2 microbatches in flight, in fp32 and in bf16 (half-precision saved linear
 * inputs): without recomputation, selective (core_attn; all of core_attn, mlp, layernorm) and
 * full (uniform 1, uniform 4, block 2).
 *
 * measured: the bytes the cpu-strict device mapped for TR_MEM_ACTIVATIONS (whole pages; a fresh
 * device per model, so its peak is this model's arena) and, from the difference between 2 and 1
 * microbatches in flight, what one more microbatch in flight stores. expected: the same numbers
 * counted here from the tensors each mode keeps per layer (written out below, not taken from the
 * runtime), and the shared recompute sets and backward scratch. The peer is the estimate of
 * Korthikanti et al. ("Reducing Activation Recomputation in Large Transformer Models", 2022) that
 * Megatron's recomputation options are built on: s*b*h*(34 + 5*a*s/h) bytes per layer in 16-bit
 * without recomputation, 34*s*b*h selective, 2*s*b*h full (their layer: ffn 4h, no GQA, the
 * attention scores stored; a flash-attention layer never stores those).
 *
 *   bench_recompute_memory [--rounds R] [--smoke]
 *
 * --smoke: tiny shapes (the ctest run); every round prints every case. Exit 1 when a measured
 * number differs from the expected one, or when full recomputation stores more per microbatch
 * in flight than the layers' inputs. Nothing is trained: the arena is laid out when the model is
 * created, and its size does not depend on the data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/device/device.h"
#include "runtime/model/model.h"

typedef struct mode {
    const char *name;
    int recompute, block, layers;
    unsigned mods;
} mode;

#define MOD(x) (1u << TR_RC_MOD_##x)
static const mode modes[] = {
    {"none", TR_RECOMPUTE_NONE, 0, 0, 0},
    {"selective core_attn", TR_RECOMPUTE_SELECTIVE, 0, 0, MOD(CORE_ATTN)},
    {"selective all", TR_RECOMPUTE_SELECTIVE, 0, 0, MOD(CORE_ATTN) | MOD(MLP) | MOD(LAYERNORM)},
    {"full uniform 1", TR_RECOMPUTE_FULL, 0, 1, 0},
    {"full uniform 4", TR_RECOMPUTE_FULL, 0, 4, 0},
    {"full block 2", TR_RECOMPUTE_FULL, 1, 2, 0},
};
enum { N_MODES = sizeof modes / sizeof modes[0], LAYERS = 4 };

static int64_t align16(int64_t n) {
    return (n + 15) / 16 * 16;
}

/* One layer's saved tensors in floats, by group (the groups recomputation drops together). */
typedef struct layer_count {
    int64_t x_in, norms, attn, mlp, rest;
} layer_count;

static layer_count count_layer(const tr_model_spec *s, int batch) {
    int64_t bt = (int64_t)batch * s->seq, C = s->hidden, F = s->ffn;
    int64_t hd = (int64_t)s->heads * s->head_dim, gd = (int64_t)s->groups * s->head_dim;
    /* a norm output feeding a linear: its bf16 bits (two a float) in mixed precision */
    int64_t norm_out = s->lowp ? align16(bt * C / 2) : bt * C;
    layer_count c;
    c.x_in = bt * C;
    c.norms = 2 * (norm_out + 2 * align16(bt)); /* ln1, ln2 with their mean and rstd */
    c.attn = bt * hd + align16((int64_t)batch * s->heads * s->seq); /* output and lse */
    c.mlp = bt * 2 * F + (s->lowp ? align16(bt * F / 2) : bt * F);  /* fc1 [gate; up], act */
    c.rest = bt * hd + 2 * bt * gd + bt * C;                        /* q, k, v, x_mid */
    return c;
}

static int64_t full_layer(const layer_count *c) {
    return c->x_in + c->norms + c->attn + c->mlp + c->rest;
}

/* The backward scratch every model has (dx, dtmp, dbig, dact, dq, dk, dv, RoPE tables, the
 * loss scalar). */
static int64_t scratch(const tr_model_spec *s, int batch) {
    int64_t bt = (int64_t)batch * s->seq, C = s->hidden;
    int64_t hd = (int64_t)s->heads * s->head_dim, gd = (int64_t)s->groups * s->head_dim;
    int64_t qkv = hd + 2 * gd, fc1 = 2 * (int64_t)s->ffn, big = fc1 > qkv ? fc1 : qkv;
    int64_t rope = align16((int64_t)s->seq * (s->head_dim / 2 + 1));
    return 2 * rope + 2 * bt * C + bt * (big > C ? big : C) + bt * s->ffn + bt * hd + 2 * bt * gd +
           16;
}

/* Floats one microbatch in flight keeps, and the shared recompute sets, for mode md. */
static void expected(const tr_model_spec *s, int batch, const mode *md, int64_t *per_slot,
                     int64_t *shared) {
    layer_count c = count_layer(s, batch);
    int64_t full = full_layer(&c);
    *per_slot = LAYERS * full;
    *shared = 0;
    if (md->recompute == TR_RECOMPUTE_SELECTIVE) {
        int64_t d = 0;
        if (md->mods & MOD(CORE_ATTN)) d += c.attn;
        if (md->mods & MOD(MLP)) d += c.mlp;
        if (md->mods & MOD(LAYERNORM)) d += c.norms;
        *per_slot = LAYERS * (full - d);
        *shared = d;
    } else if (md->recompute == TR_RECOMPUTE_FULL && md->block) {
        /* the first `layers` keep their input only, one set (without an input) for them */
        *per_slot = md->layers * c.x_in + (LAYERS - md->layers) * full;
        *shared = full - c.x_in;
    } else if (md->recompute == TR_RECOMPUTE_FULL) {
        /* runs of `layers`: the run's input kept; a set per position in the run, the first
         * without an input */
        int n = md->layers < LAYERS ? md->layers : LAYERS;
        int runs = (LAYERS + md->layers - 1) / md->layers;
        *per_slot = runs * c.x_in;
        *shared = n * full - c.x_in;
    }
}

static int64_t pages(int64_t bytes) {
    int64_t p = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    return (bytes + p - 1) / p * p;
}

/* The activation bytes the device mapped for a fresh model of `slots` microbatches in flight. */
static int measure(const tr_model_spec *s, int batch, int slots, int64_t *bytes,
                   int64_t *act_floats) {
    tr_diags d;
    tr_diags_init(&d);
    tr_device *dev = NULL;
    tr_model m;
    tr_model_part part = {1, LAYERS, false, false, slots};
    int ok = tr_device_open(TR_DEVICE_CPU_STRICT, 0, 1, &d, &dev) == TR_OK &&
             tr_model_create_parts_on(&m, dev, s, (tr_tp_shard){0, 1}, batch, &part, 1) == TR_OK;
    if (ok) {
        *bytes = (int64_t)tr_device_peak(dev, TR_MEM_ACTIVATIONS);
        *act_floats = m.act_numel;
        tr_model_free(&m);
    }
    tr_device_close(dev);
    tr_diags_free(&d);
    return ok;
}

static tr_model_spec llama_layers(bool smoke, int lowp) {
    tr_model_spec s = {.num_layers = LAYERS + 2,
                       .hidden = smoke ? 64 : 2048,
                       .heads = smoke ? 8 : 32,
                       .groups = smoke ? 2 : 8,
                       .ffn = smoke ? 256 : 8192,
                       .vocab = smoke ? 64 : 128256,
                       .seq = smoke ? 32 : 4096,
                       .swiglu = 1,
                       .rope = 1,
                       .eps = 1e-5f,
                       .init_std = 0.02,
                       .embed_init_std = 0.02,
                       .lowp = lowp};
    s.head_dim = s.hidden / s.heads;
    s.rope_p = (tr_rope_params){.rot_dim = s.head_dim, .base = 500000.0};
    return s;
}

static void print_machine(void) {
    char line[256], model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *p = strchr(line, ':');
            snprintf(model, sizeof model, "%s", p ? p + 2 : line);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    printf("machine: %s, %ld cores online; device cpu-strict (bytes mapped per kind, whole pages "
           "of %ld)\n",
           model, sysconf(_SC_NPROCESSORS_ONLN), sysconf(_SC_PAGESIZE));
}

/* MiB (KiB for the smoke shapes, whose arenas are small) */
static double g_unit = 1024.0 * 1024.0;
static const char *g_unit_name = "MiB";

static double mib(int64_t bytes) {
    return (double)bytes / g_unit;
}

/* One round over every case; returns the number of mismatches. */
static int round_of(bool smoke, int r) {
    int bad = 0;
    for (int lp = 0; lp < 2; lp++) {
        tr_model_spec base = llama_layers(smoke, lp ? TR_LOWP_BF16 : 0);
        int64_t s = base.seq, b = 1, h = base.hidden, a = base.heads;
        int64_t bt = b * s;
        printf("round %d, %s, %d layers of hidden %d, %d heads, %d groups, ffn %d, seq %d, micro "
               "batch 1; peer (Korthikanti et al., 16-bit, per layer): none %.1f %s, selective "
               "%.1f %s, full %.1f %s\n",
               r, lp ? "bf16 (half-precision saved linear inputs)" : "fp32", LAYERS, base.hidden,
               base.heads, base.groups, base.ffn, base.seq, mib(s * b * h * (34 + 5 * a * s / h)),
               g_unit_name, mib(34 * s * b * h), g_unit_name, mib(2 * s * b * h), g_unit_name);
        printf("  %-20s %14s %14s %6s | %16s %16s %6s | %12s\n", "mode", "arena 2 in fl.",
               "expected", "", "per mb in flight", "expected", "", "shared sets");
        for (int k = 0; k < N_MODES; k++) {
            tr_model_spec sp = base;
            sp.recompute = modes[k].recompute;
            sp.recompute_block = modes[k].block;
            sp.recompute_layers = modes[k].layers;
            sp.recompute_modules = modes[k].mods;
            int64_t b1 = 0, b2 = 0, f1 = 0, f2 = 0, per_slot, shared;
            if (!measure(&sp, 1, 1, &b1, &f1) || !measure(&sp, 1, 2, &b2, &f2)) {
                printf("  %-20s model creation failed\n", modes[k].name);
                bad++;
                continue;
            }
            expected(&sp, 1, &modes[k], &per_slot, &shared);
            int64_t floats2 = 2 * per_slot + shared + scratch(&sp, 1);
            /* ids, targets, document starts and positions per slot: int32, their own buffer */
            int64_t want2 = pages(4 * floats2) + pages(4 * 2 * 4 * bt);
            int64_t got_slot = 4 * (f2 - f1), want_slot = 4 * per_slot;
            bool ok = b2 == want2 && f2 == floats2 && got_slot == want_slot;
            if (modes[k].recompute == TR_RECOMPUTE_FULL && !modes[k].block) {
                /* full uniform: one microbatch in flight stores the runs' inputs only */
                int runs = (LAYERS + modes[k].layers - 1) / modes[k].layers;
                ok = ok && got_slot == 4 * runs * bt * h;
            }
            printf("  %-20s %10.1f %s %10.1f %s %6s | %12.1f %s %12.1f %s %6s | %8.1f %s\n",
                   modes[k].name, mib(b2), g_unit_name, mib(want2), g_unit_name,
                   b2 == want2 ? "ok" : "DIFFER", mib(got_slot), g_unit_name, mib(want_slot),
                   g_unit_name, got_slot == want_slot ? "ok" : "DIFFER", mib(4 * shared),
                   g_unit_name);
            bad += !ok;
        }
        tr_model_spec sp = base;
        layer_count c = count_layer(&sp, 1);
        printf("  per layer kept without recomputation %.1f %s; its input (all that full keeps) "
               "%.1f %s\n",
               mib(4 * full_layer(&c)), g_unit_name, mib(4 * c.x_in), g_unit_name);
    }
    return bad;
}

int main(int argc, char **argv) {
    int rounds = 1;
    bool smoke = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--smoke") == 0)
            smoke = true;
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else
            return fprintf(stderr, "usage: bench_recompute_memory [--rounds R] [--smoke]\n"), 2;
    }
    if (smoke) g_unit = 1024.0, g_unit_name = "KiB";
    print_machine();
    int bad = 0;
    for (int r = 1; r <= rounds; r++) bad += round_of(smoke, r);
    printf("%s\n",
           bad ? "MISMATCH between measured and expected bytes" : "all measured = expected");
    return bad ? 1 : 0;
}
