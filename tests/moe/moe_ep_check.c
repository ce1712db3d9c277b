/* The MoE layer's alltoall and allgather dispatchers on real ranks (mpirun; EP = world, or the
 * argument ep=N with the other ranks data-parallel replicas, each EP group on its own tokens): each
 * rank holds experts / EP experts, and its layer must equal the single-rank layer (every expert
 * local) run on the same rank's tokens: the outputs and input gradients on each rank, the
 * replicated router's and shared expert's gradients on each rank, and each local expert's gradient
 * equal to the sum over its EP group of the single-rank layers' gradients of that expert (the
 * tokens of every rank reach it). Two microbatches are in flight (forward, forward, backward,
 * backward). The EP group's bytes are checked against the theory from the single-rank routing: the
 * counts' all-to-all moves `experts` int32 per forward; the row all-to-all-v moves, per microbatch,
 * the rank's routed rows out and the rows its experts received back, each way, in the forward and
 * the backward. The allgather dispatcher's bytes on TR_GROUP_TP_EP: per forward the tokens [T, h],
 * their probabilities and choices [T, topk] all-gathered (f32, i32) and the outputs [EP T, h]
 * reduce-scattered; per backward the output gradient gathered, the input gradient [EP T, h] and
 * the probabilities' gradient [EP T, topk] reduce-scattered; nothing on the EP group. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/moe/internal.h"
#include "runtime/parallel/state.h"

enum { H = 8, B = 2, S = 5, T = B * S, SLOTS = 2 };

static int g_rank, g_size, g_fail;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: ", g_rank);                                                  \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            g_fail = 1;                                                                            \
        }                                                                                          \
    } while (0)

static uint64_t rng;
static float urand(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

typedef struct layer {
    tr_moe_spec s;
    tr_moe_layer *L;
    tr_moe_param *info;
    int n;
    int64_t *off, numel;
    float *p, *g;
} layer;

static void make(layer *l, const tr_moe_spec *s, bool swiglu, tr_comm *comm) {
    memset(l, 0, sizeof *l);
    l->s = *s;
    l->n = tr_moe_param_count(s);
    l->info = calloc((size_t)l->n, sizeof *l->info);
    l->off = calloc((size_t)l->n, sizeof *l->off);
    if (tr_moe_params(s, 0, H, swiglu, l->info) != TR_OK) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int i = 0; i < l->n; i++) {
        l->off[i] = l->numel;
        l->numel += (int64_t)l->info[i].rows * l->info[i].cols;
    }
    l->p = calloc((size_t)l->numel, sizeof(float));
    l->g = calloc((size_t)l->numel, sizeof(float));
    tr_moe_dims d = {
        .hidden = H, .batch = B, .seq = S, .slots = SLOTS, .swiglu = swiglu, .comm = comm};
    if (tr_moe_create(&l->L, s, &d, tr_ops_cpu()) != TR_OK) MPI_Abort(MPI_COMM_WORLD, 1);
    tr_moe_bind(l->L, l->p, l->g, l->off);
}

static void drop(layer *l) {
    tr_moe_free(l->L);
    free(l->info);
    free(l->off);
    free(l->p);
    free(l->g);
}

static int find(const layer *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->info[i].name, name)) return i;
    return -1;
}

static double rel_err(const float *a, const float *b, int64_t n) {
    double num = 0.0, den = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / den;
}

static void run(layer *l, const float *x, const float *dy, float *y, float *dx) {
    for (int m = 0; m < SLOTS; m++)
        if (tr_moe_forward(l->L, m, x + m * T * H, y + m * T * H, true, 7, (uint64_t)m) != TR_OK)
            MPI_Abort(MPI_COMM_WORLD, 1);
    for (int m = SLOTS - 1; m >= 0; m--)
        if (tr_moe_backward(l->L, m, dy + m * T * H, dx + m * T * H, 1.0f) != TR_OK)
            MPI_Abort(MPI_COMM_WORLD, 1);
}

static void check(tr_comm *c, int ep, int ep_rank, tr_moe_spec s, bool swiglu, const char *what) {
    layer ref, epl;
    s.ep_size = 1;
    s.ep_rank = 0;
    make(&ref, &s, swiglu, NULL);
    s.ep_size = ep;
    s.ep_rank = ep_rank;
    make(&epl, &s, swiglu, c);
    rng = 99; /* the same weights on every rank */
    for (int64_t i = 0; i < ref.numel; i++)
        ref.p[i] = (i < (int64_t)s.experts * H ? 1.5f : 0.4f) * urand();
    for (int i = 0; i < epl.n; i++) {
        int j = find(&ref, epl.info[i].name);
        EXPECT(j >= 0, "%s: %s is not a tensor of the single-rank layer", what, epl.info[i].name);
        if (j < 0) continue;
        memcpy(epl.p + epl.off[i], ref.p + ref.off[j],
               (size_t)epl.info[i].rows * epl.info[i].cols * sizeof(float));
    }
    EXPECT(epl.n == ref.n - 2 * (s.experts - s.experts / ep), "%s: %d tensors on this rank", what,
           epl.n);
    float x[SLOTS * T * H], dy[SLOTS * T * H], y0[SLOTS * T * H], y1[SLOTS * T * H];
    float dx0[SLOTS * T * H], dx1[SLOTS * T * H];
    rng = 1000 + (uint64_t)g_rank; /* each rank its own tokens */
    for (int i = 0; i < SLOTS * T * H; i++) {
        x[i] = urand();
        dy[i] = urand();
    }
    run(&ref, x, dy, y0, dx0);
    /* the theory's row counts: per microbatch, this rank's routed rows and those its experts
     * receive from every rank */
    double rows_out = 0.0, to_expert[2 * 1024] = {0};
    for (int m = 0; m < SLOTS; m++) {
        const int32_t *off = ref.L->st[m].off;
        rows_out += off[s.experts];
        for (int e = 0; e < s.experts; e++) to_expert[e] += off[e + 1] - off[e];
    }
    if (tr_comm_all_reduce_inplace(c, TR_GROUP_EP, to_expert, (size_t)s.experts, TR_COMM_F64,
                                   TR_COMM_SUM) != TR_OK)
        MPI_Abort(MPI_COMM_WORLD, 1);
    double rows_in = 0.0;
    int El = s.experts / ep;
    for (int e = ep_rank * El; e < (ep_rank + 1) * El; e++) rows_in += to_expert[e];

    tr_comm_counters_reset(&c->counters);
    run(&epl, x, dy, y1, dx1);
    double ey = rel_err(y1, y0, SLOTS * T * H), edx = rel_err(dx1, dx0, SLOTS * T * H);
    EXPECT(ey <= 1e-5, "%s: outputs differ by %.3g", what, ey);
    EXPECT(edx <= 1e-5, "%s: input gradients differ by %.3g", what, edx);
    float *gsum = malloc((size_t)ref.numel * sizeof(float));
    if (tr_comm_all_reduce(c, TR_GROUP_EP, ref.g, gsum, (size_t)ref.numel, TR_COMM_F32,
                           TR_COMM_SUM) != TR_OK)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (int i = 0; i < epl.n; i++) {
        int j = find(&ref, epl.info[i].name);
        if (j < 0) continue;
        bool expert = strstr(epl.info[i].name, "local_experts") != NULL;
        const float *want = (expert ? gsum : ref.g) + ref.off[j];
        double e = rel_err(epl.g + epl.off[i], want, (int64_t)epl.info[i].rows * epl.info[i].cols);
        EXPECT(e <= 1e-5, "%s: gradient of %s differs by %.3g", what, epl.info[i].name, e);
    }
    free(gsum);
    uint64_t a2a = tr_comm_counters_bytes(&c->counters, TR_GROUP_EP, TR_COMM_ALL_TO_ALL);
    uint64_t a2av = tr_comm_counters_bytes(&c->counters, TR_GROUP_EP, TR_COMM_ALL_TO_ALLV);
    bool ag = s.dispatcher == TR_MOE_DISPATCH_ALLGATHER;
    uint64_t want_a2a = ag ? 0 : (uint64_t)SLOTS * s.experts * sizeof(int32_t);
    uint64_t want_a2av = ag ? 0 : (uint64_t)(2.0 * (rows_out + rows_in)) * H * sizeof(float);
    uint64_t gat = tr_comm_counters_bytes(&c->counters, TR_GROUP_TP_EP, TR_COMM_ALL_GATHER);
    uint64_t rs = tr_comm_counters_bytes(&c->counters, TR_GROUP_TP_EP, TR_COMM_REDUCE_SCATTER);
    uint64_t want_gat = ag ? (uint64_t)SLOTS * T * (2 * H + 2 * s.topk) * 4 : 0;
    uint64_t want_rs = ag ? (uint64_t)SLOTS * ep * T * (2 * H + s.topk) * 4 : 0;
    EXPECT(gat == want_gat, "%s: all-gather %llu bytes, theory %llu", what, (unsigned long long)gat,
           (unsigned long long)want_gat);
    EXPECT(rs == want_rs, "%s: reduce-scatter %llu bytes, theory %llu", what,
           (unsigned long long)rs, (unsigned long long)want_rs);
    EXPECT(a2a == want_a2a, "%s: counts all-to-all %llu bytes, theory %llu", what,
           (unsigned long long)a2a, (unsigned long long)want_a2a);
    EXPECT(a2av == want_a2av, "%s: rows all-to-all-v %llu bytes, theory %llu", what,
           (unsigned long long)a2av, (unsigned long long)want_a2av);
    if (g_rank == 0)
        printf("%s (%s): EP %d of world %d, y %.2g, dx %.2g, a2a %llu B, a2av %llu B, all-gather "
               "%llu B, reduce-scatter %llu B\n",
               what, ag ? "allgather" : "alltoall", ep, g_size, ey, edx, (unsigned long long)a2a,
               (unsigned long long)a2av, (unsigned long long)gat, (unsigned long long)rs);
    drop(&ref);
    drop(&epl);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    int size = argc > 1 && !strncmp(argv[1], "ep=", 3) ? atoi(argv[1] + 3) : g_size;
    tr_parallel_dims dims;
    tr_parallel_dims_init(&dims, g_size);
    dims.ep = size;
    tr_parallel_dims_derive(&dims);
    tr_diags diags;
    tr_diags_init(&diags);
    tr_parallel_state ps;
    tr_comm *c;
    tr_comm_options opt = {20, TR_COMM_REDUCE_NATIVE};
    if (tr_parallel_state_init(&ps, &dims, MPI_COMM_WORLD, &diags) != TR_OK ||
        tr_comm_mpi_create(&ps, &opt, &diags, &c) != TR_OK) {
        tr_diags_print_text(&diags, stderr, false);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int ep_rank = tr_comm_group_rank(c, TR_GROUP_EP);
    if (tr_comm_group_size(c, TR_GROUP_EP) != size) MPI_Abort(MPI_COMM_WORLD, 1);
    tr_moe_spec s = {.experts = 8, .topk = 2, .ffn = 6, .topk_scale = 1.0f};
    s.layers[0] = 1;
    s.shared_ffn = 4;
    s.shared_gate = true;
    s.balance = TR_MOE_LB_AUX;
    s.aux_coeff = 0.01f;
    s.z_coeff = 0.001f;
    check(c, size, ep_rank, s, true, "softmax top-2, swiglu, gated shared expert, aux + z");
    s.dispatcher = TR_MOE_DISPATCH_ALLGATHER;
    check(c, size, ep_rank, s, true, "softmax top-2, swiglu, gated shared expert, aux + z");
    tr_moe_spec g = {.experts = 8, .topk = 3, .ffn = 5, .topk_scale = 1.0f};
    g.layers[0] = 1;
    g.score = TR_MOE_SIGMOID;
    g.expert_bias = true;
    g.bias_rate = 1e-3f;
    check(c, size, ep_rank, g, false, "sigmoid top-3 with expert bias, gelu");
    g.dispatcher = TR_MOE_DISPATCH_ALLGATHER;
    check(c, size, ep_rank, g, false, "sigmoid top-3 with expert bias, gelu");
    tr_comm_destroy(c);
    tr_parallel_state_free(&ps);
    int fail = g_fail;
    MPI_Allreduce(MPI_IN_PLACE, &fail, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (g_rank == 0 && !fail) printf("OK\n");
    MPI_Finalize();
    return fail;
}
