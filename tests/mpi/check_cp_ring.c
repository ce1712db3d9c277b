/* Ring attention on real ranks (runtime/context_parallel/cp.h), in isolation from the model: the
 * whole world is the CP group, B sequences of S = 2 c N tokens (N ranks), GQA heads.
 *
 *   mpirun -np N check_cp_ring B c [P [allgather|a2a]]
 *
 * P > 0: with attention dropout of probability P (each ring block draws the whole sequence's
 * mask at its tokens' coordinates, so the oracle is the whole-sequence op with the same mask).
 * a2a: the Ulysses exchange (heads and groups divisible by N).
 * allgather: the all_gather exchange instead of the ring (its bytes: one all-gather of K and V
 * forward; backward that again and the reduce-scatter of every rank's dK/dV slots).
 *
 * Every rank draws the same whole-sequence q, k, v and output weights w. Checks:
 *   - forward: this rank's rows of out and lse equal the causal attention op on the whole
 *     sequence (one process, no ring), fp32 relative 1e-5;
 *   - backward (dout = w's rows): dq, dk, dv equal that op's backward on the whole sequence;
 *   - the ring's gradients match central differences of the global sum(out * w) (all ranks
 *     perturb the same global element, its owner in its copy; the loss is summed over ranks),
 *     so the check does not rest on the single-rank op either;
 *   - the bytes the comm layer booked on the CP group equal tr_cp_ring_bytes_fwd + _bwd, and
 *     those the theory gives: forward N-1 KV blocks, backward N-1 KV blocks and N dK/dV blocks.
 * Exits 0 on every rank when all hold. */
#include <math.h>
#include <stdbool.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/comm.h"
#include "runtime/context_parallel/cp.h"
#include "runtime/device/device.h"
#include "runtime/parallel/state.h"

enum { H = 4, G = 2, D = 8 };

static uint64_t rng = 0x243F6A8885A308D3ull;
static float uniform(float lo, float hi) {
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * (float)((z >> 40) * (1.0 / 16777216.0));
}
static float *draw(int64_t n, float lo, float hi) {
    float *p = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = uniform(lo, hi);
    return p;
}

typedef struct ring_case {
    tr_cp *cp;
    int B, S, T;                   /* whole and local rows */
    float *q, *k, *v, *w;          /* whole sequence */
    float *lq, *lk, *lv, *lw, *lo; /* this rank's rows */
    float *llse;
    tr_attn_desc d;
} ring_case;

/* Rows of this rank from a whole [B, S, width] tensor. */
static void take(const ring_case *r, const float *full, float *local, int width) {
    for (int b = 0; b < r->B; b++)
        for (int t = 0; t < r->T; t++) {
            int64_t g = tr_cp_global_pos(r->cp->size, r->cp->rank, r->T, t);
            memcpy(local + ((int64_t)b * r->T + t) * width, full + ((int64_t)b * r->S + g) * width,
                   sizeof(float) * (size_t)width);
        }
}

static double err(const float *a, const float *b, int64_t n) {
    double e = 0.0, m = 1e-3;
    for (int64_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (!(x <= e)) e = x;
        if (fabs((double)b[i]) > m) m = fabs((double)b[i]);
    }
    return e / m;
}

static double global_loss(ring_case *r) {
    double mine = 0.0, all = 0.0;
    if (tr_cp_attn_fwd(r->cp, r->lo, r->llse, r->lq, r->lk, r->lv, &r->d) != TR_OK) return NAN;
    for (int64_t i = 0; i < (int64_t)r->B * r->T * H * D; i++) mine += (double)r->lo[i] * r->lw[i];
    MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return all;
}

/* Central differences on `samples` global elements of one input (width channels a row). */
static int fd_check(ring_case *r, const char *what, float *local, const float *grad, int width,
                    int samples) {
    const double h = 1e-2, rtol = 1e-2, atol = 2e-3;
    int bad = 0;
    for (int s = 0; s < samples; s++) {
        int b = (int)(uniform(0, 1) * r->B) % r->B, pos = (int)(uniform(0, 1) * r->S) % r->S;
        int e = (int)(uniform(0, 1) * width) % width, t = -1;
        for (int i = 0; i < r->T; i++)
            if (tr_cp_global_pos(r->cp->size, r->cp->rank, r->T, i) == pos) t = i;
        float *x = t >= 0 ? local + ((int64_t)b * r->T + t) * width + e : NULL;
        float orig = x ? *x : 0.0f, xp = (float)(orig + h), xm = (float)(orig - h);
        if (x) *x = xp;
        double lp = global_loss(r);
        if (x) *x = xm;
        double lm = global_loss(r);
        if (x) *x = orig;
        double fd = (lp - lm) / ((double)xp - (double)xm), an = x ? grad[x - local] : 0.0, got;
        MPI_Allreduce(&an, &got, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (!(fabs(fd - got) <= rtol * fabs(fd) + atol)) {
            if (bad < 5) fprintf(stderr, "  %s: analytic %.7g vs numeric %.7g\n", what, got, fd);
            bad++;
        }
    }
    return bad;
}

static int run(tr_cp *cp, tr_comm *comm, int B, int c, float p, int rank) {
    int N = cp->size, T = 2 * c, S = T * N, bad = 0;
    int64_t nq = (int64_t)B * S * H * D, nk = (int64_t)B * S * G * D;
    int64_t lq_n = nq / N, lk_n = nk / N;
    ring_case r = {.cp = cp, .B = B, .S = S, .T = T};
    r.q = draw(nq, -1.5f, 1.5f), r.k = draw(nk, -1.5f, 1.5f), r.v = draw(nk, -1, 1);
    r.w = draw(nq, -1, 1);
    tr_attn_desc full = {.batch = B, .seq = S, .heads = H, .groups = G, .head_dim = D, .causal = 1};
    full.scale = 1.0f / sqrtf((float)D);
    if (p > 0.0f) {
        full.dropout = p, full.dropout_seed = 0x5EEDull, full.dropout_round = 3;
        full.dropout_layer = 1, full.heads_total = H;
    }
    r.d = full;
    r.d.seq = T;
    /* The oracle: the op on the whole sequence. */
    float *o = malloc(sizeof(float) * nq), *lse = malloc(sizeof(float) * B * H * S);
    float *dq = malloc(sizeof(float) * nq), *dk = malloc(sizeof(float) * nk);
    float *dv = malloc(sizeof(float) * nk);
    const tr_ops *ops = tr_ops_cpu();
    bad += ops->attention_fwd(o, lse, r.q, r.k, r.v, &full) != TR_OK;
    bad += ops->attention_bwd(dq, dk, dv, r.w, r.q, r.k, r.v, o, lse, &full) != TR_OK;
    r.lq = malloc(sizeof(float) * lq_n), r.lk = malloc(sizeof(float) * lk_n);
    r.lv = malloc(sizeof(float) * lk_n), r.lw = malloc(sizeof(float) * lq_n);
    r.lo = malloc(sizeof(float) * lq_n), r.llse = malloc(sizeof(float) * B * H * T);
    float *ref = malloc(sizeof(float) * lq_n), *refk = malloc(sizeof(float) * lk_n);
    float *ldq = malloc(sizeof(float) * lq_n), *ldk = malloc(sizeof(float) * lk_n);
    float *ldv = malloc(sizeof(float) * lk_n), *rlse = malloc(sizeof(float) * B * H * T);
    take(&r, r.q, r.lq, H * D), take(&r, r.k, r.lk, G * D), take(&r, r.v, r.lv, G * D);
    take(&r, r.w, r.lw, H * D);

    tr_comm_counters_reset(&comm->counters);
    bad += tr_cp_attn_fwd(cp, r.lo, r.llse, r.lq, r.lk, r.lv, &r.d) != TR_OK;
    bool ag = cp->type == TR_CP_ALL_GATHER;
    int fwd_kind = ag ? TR_COMM_ALL_GATHER : TR_COMM_SEND;
    uint64_t fwd_bytes = tr_comm_counters_bytes(&comm->counters, TR_GROUP_CP, fwd_kind);
    bad += tr_cp_attn_bwd(cp, ldq, ldk, ldv, r.lw, r.lq, r.lk, r.lv, r.lo, r.llse, &r.d) != TR_OK;
    uint64_t sent = tr_comm_counters_bytes(&comm->counters, TR_GROUP_CP, TR_COMM_SEND);
    uint64_t got = tr_comm_counters_bytes(&comm->counters, TR_GROUP_CP, TR_COMM_RECV);
    /* The theory: a KV block is K and V of this rank's rows. */
    uint64_t kv = (uint64_t)(2 * lk_n) * sizeof(float);
    uint64_t want_fwd = (uint64_t)(N - 1) * kv, want = want_fwd + (uint64_t)(2 * N - 1) * kv;
    bool bytes_ok = fwd_bytes == want_fwd && sent == want && got == want &&
                    want_fwd == (uint64_t)tr_cp_ring_bytes_fwd(cp) &&
                    want - want_fwd == (uint64_t)tr_cp_ring_bytes_bwd(cp);
    if (cp->type == TR_CP_A2A) {
        /* q, k, v in and out back forward (2 q + 2 kv); q, k, v, out, dout in and dq, dk, dv
         * back backward (4 q + 4 kv): every all-to-all books its whole send buffer. */
        uint64_t a2a = tr_comm_counters_bytes(&comm->counters, TR_GROUP_CP, TR_COMM_ALL_TO_ALL);
        uint64_t qb = (uint64_t)lq_n * sizeof(float), kb = (uint64_t)lk_n * sizeof(float);
        want = 6 * qb + 6 * kb;
        got = a2a;
        bytes_ok = sent == 0 && fwd_bytes == 0 && a2a == want;
    } else if (ag) {
        uint64_t gathered =
            tr_comm_counters_bytes(&comm->counters, TR_GROUP_CP, TR_COMM_ALL_GATHER);
        uint64_t scattered =
            tr_comm_counters_bytes(&comm->counters, TR_GROUP_CP, TR_COMM_REDUCE_SCATTER);
        want_fwd = kv;
        want = 2 * kv + (uint64_t)N * kv; /* gathers counted by payload, the scatter by input */
        got = gathered + scattered;
        bytes_ok =
            fwd_bytes == kv && gathered == 2 * kv && scattered == (uint64_t)N * kv && sent == 0;
    }
    if (!bytes_ok) {
        fprintf(stderr, "rank %d: ring bytes fwd %llu sent %llu received %llu, theory %llu %llu\n",
                rank, (unsigned long long)fwd_bytes, (unsigned long long)sent,
                (unsigned long long)got, (unsigned long long)want_fwd, (unsigned long long)want);
        bad++;
    }

    take(&r, o, ref, H * D);
    double e_o = err(r.lo, ref, lq_n);
    for (int b = 0; b < B; b++) /* lse [B, H, rows]: the local rows of each head */
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++)
                rlse[((int64_t)b * H + h) * T + t] =
                    lse[((int64_t)b * H + h) * S + tr_cp_global_pos(N, cp->rank, T, t)];
    /* a2a keeps the lse in its whole-sequence layout of this rank's heads (its own business). */
    double e_l = cp->type == TR_CP_A2A ? 0.0 : err(r.llse, rlse, (int64_t)B * H * T);
    take(&r, dq, ref, H * D);
    double e_dq = err(ldq, ref, lq_n);
    take(&r, dk, refk, G * D);
    double e_dk = err(ldk, refk, lk_n);
    take(&r, dv, refk, G * D);
    double e_dv = err(ldv, refk, lk_n);
    double worst = fmax(fmax(e_o, e_l), fmax(e_dq, fmax(e_dk, e_dv)));
    if (rank == 0 || !(worst <= 1e-5))
        printf("rank %d: vs the whole-sequence op: out %.2g lse %.2g dq %.2g dk %.2g dv %.2g\n",
               rank, e_o, e_l, e_dq, e_dk, e_dv);
    bad += !(worst <= 1e-5);

    int fd_bad = fd_check(&r, "dq", r.lq, ldq, H * D, 40);
    fd_bad += fd_check(&r, "dk", r.lk, ldk, G * D, 40);
    fd_bad += fd_check(&r, "dv", r.lv, ldv, G * D, 40);
    if (rank == 0) printf("finite differences: %d of 120 samples off\n", fd_bad);
    bad += fd_bad;

    free(r.q), free(r.k), free(r.v), free(r.w), free(o), free(lse), free(dq), free(dk), free(dv);
    free(r.lq), free(r.lk), free(r.lv), free(r.lw), free(r.lo), free(r.llse), free(ref);
    free(refk), free(ldq), free(ldk), free(ldv), free(rlse);
    return bad;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int B = argc > 1 ? atoi(argv[1]) : 2, c = argc > 2 ? atoi(argv[2]) : 3;
    float p = argc > 3 ? (float)atof(argv[3]) : 0.0f;
    bool ag = argc > 4 && strcmp(argv[4], "allgather") == 0;
    bool a2a = argc > 4 && strcmp(argv[4], "a2a") == 0;
    tr_diags d;
    tr_diags_init(&d);
    tr_parallel_dims dims;
    tr_parallel_dims_init(&dims, world);
    dims.cp = world;
    tr_parallel_dims_derive(&dims);
    tr_parallel_state ps;
    memset(&ps, 0, sizeof ps);
    tr_comm *comm = NULL;
    int bad = 1;
    tr_comm_options co = {.reduce_mode = TR_COMM_REDUCE_NATIVE};
    if (world > 1 && tr_parallel_state_init(&ps, &dims, MPI_COMM_WORLD, &d) == TR_OK) {
        if (tr_comm_mpi_create(&ps, &co, &d, &comm) == TR_OK) {
            tr_cp cp;
            if (tr_cp_create(&cp, tr_device_host(), comm, TR_GROUP_CP, B, 2 * c, H, G, D) ==
                    TR_OK &&
                (!ag || tr_cp_use_all_gather(&cp) == TR_OK) &&
                (!a2a || tr_cp_use_a2a(&cp) == TR_OK)) {
                bad = run(&cp, comm, B, c, p, rank);
                tr_cp_free(&cp);
            }
            tr_comm_destroy(comm);
        }
        tr_parallel_state_free(&ps);
    }
    if (d.n > 0) tr_diags_print_text(&d, stderr, false);
    tr_diags_free(&d);
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) printf("%s\n", any ? "FAIL" : "OK");
    MPI_Finalize();
    return any ? 1 : 0;
}
