/* The comm layer on real ranks. Every rank generates every rank's input from a seed, so each
 * result is checked against a reference computed locally, without communication.
 *
 *   mpirun -np N comm_check ops [tp=K]      every operation on the world, tp and dp groups;
 *                                           overlap; counters; all-reduce determinism
 *   mpirun -np N comm_check stall-collective DIR   the last rank stops itself before a world
 *   mpirun -np N comm_check stall-p2p DIR          all-reduce (or before answering rank 0's
 *                                                  receive); the others must end with
 *                                                  comm.timeout within the 2 s timeout.
 *   mpirun -np N comm_check stall-sigterm DIR      as stall-collective with a 60 s timeout; the
 *                                                  live ranks get SIGTERM 1 s into the wait (the
 *                                                  loop's handler) and must give up 1 s later.
 * DIR receives one <rank>.pid file per rank, so the caller can clean up the stopped one.
 *   mpirun -np N comm_check slow-sigterm           a stop signal already given, a healthy
 *                                                  all-reduce that runs longer than the 1 s
 *                                                  grace must still complete (every member is
 *                                                  in it), with the right sum. */
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "runtime/comm/comm.h"
#include "runtime/parallel/state.h"
#include "runtime/train/signal.h"

static int g_rank, g_fail;

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "rank %d: FAIL: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    g_fail++;
}

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) fail(__VA_ARGS__);                                                            \
    } while (0)

#define OK(expr) EXPECT((expr) == TR_OK, "%s failed (line %d)", #expr, __LINE__)

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t h3(uint64_t a, uint64_t b, uint64_t c) {
    return mix(mix(mix(a) ^ b) ^ c);
}

/* Multiples of 1/8 below 128: sums of up to 8 of them are exact in float, in any order. */
static float exact_f(uint64_t seed, int rank, size_t i) {
    return (float)((int)(h3(seed, (uint64_t)rank, i) % 2001) - 1000) / 8.0f;
}

/* Values spread over many exponents: their sums depend on the order of addition. */
static float wild_f(uint64_t seed, int rank, size_t i) {
    uint64_t h = h3(seed, (uint64_t)rank, i);
    float m = (float)(h >> 40) / (float)(1u << 24) - 0.5f;
    return ldexpf(m, (int)(h & 31) - 10);
}

static size_t esize(tr_comm_dtype t) {
    return tr_comm_dtype_size(t);
}

/* Value i of rank r's input, in dtype t. */
static void put(void *buf, size_t i, tr_comm_dtype t, uint64_t seed, int r, size_t gi) {
    float v = exact_f(seed, r, gi);
    switch (t) {
    case TR_COMM_F32:
        ((float *)buf)[i] = v;
        break;
    case TR_COMM_F64:
        ((double *)buf)[i] = (double)v;
        break;
    case TR_COMM_I32:
        ((int32_t *)buf)[i] = (int32_t)(v * 8);
        break;
    case TR_COMM_I64:
        ((int64_t *)buf)[i] = (int64_t)(v * 8) * 1000003;
        break;
    default:
        ((unsigned char *)buf)[i] = (unsigned char)(h3(seed, (uint64_t)r, gi) & 0xff);
    }
}

static double get(const void *buf, size_t i, tr_comm_dtype t) {
    switch (t) {
    case TR_COMM_F32:
        return ((const float *)buf)[i];
    case TR_COMM_F64:
        return ((const double *)buf)[i];
    case TR_COMM_I32:
        return ((const int32_t *)buf)[i];
    case TR_COMM_I64:
        return (double)((const int64_t *)buf)[i];
    default:
        return ((const unsigned char *)buf)[i];
    }
}

static double combine(double a, double b, tr_comm_op op) {
    return op == TR_COMM_SUM ? a + b : op == TR_COMM_MAX ? (b > a ? b : a) : (b < a ? b : a);
}

/* Reference reduction of element gi over ranks 0..p-1 (exact: see exact_f). */
static double reduced(tr_comm_dtype t, tr_comm_op op, uint64_t seed, int p, size_t gi) {
    unsigned char one[8];
    put(one, 0, t, seed, 0, gi);
    double acc = get(one, 0, t);
    for (int r = 1; r < p; r++) {
        put(one, 0, t, seed, r, gi);
        acc = combine(acc, get(one, 0, t), op);
    }
    return acc;
}

static void check_reductions(tr_comm *c, int g, uint64_t seed) {
    int p = tr_comm_group_size(c, g), me = tr_comm_group_rank(c, g);
    const size_t n = 37;
    const char *gn = tr_comm_group_name(g);
    for (int t = TR_COMM_F32; t <= TR_COMM_I64; t++) {
        for (int op = 0; op < TR_COMM_OP_COUNT; op++) {
            tr_comm_dtype dt = (tr_comm_dtype)t;
            size_t es = esize(dt);
            unsigned char *in = malloc(n * p * es), *out = malloc(n * p * es);
            uint64_t s = seed + (uint64_t)(t * 10 + op);
            for (size_t i = 0; i < n; i++) put(in, i, dt, s, me, i);
            OK(tr_comm_all_reduce(c, g, in, out, n, dt, (tr_comm_op)op));
            for (size_t i = 0; i < n; i++)
                EXPECT(get(out, i, dt) == reduced(dt, op, s, p, i), "all_reduce %s %s %s [%zu]", gn,
                       tr_comm_dtype_name(dt), tr_comm_op_name(op), i);
            OK(tr_comm_all_reduce_inplace(c, g, in, n, dt, (tr_comm_op)op));
            EXPECT(memcmp(in, out, n * es) == 0, "in-place all_reduce %s differs", gn);

            /* Reduce-scatter: rank r's input has p blocks; element gi is block gi / n. */
            for (size_t i = 0; i < n * p; i++) put(in, i, dt, s, me, i);
            OK(tr_comm_reduce_scatter(c, g, in, out, n, dt, (tr_comm_op)op));
            for (size_t i = 0; i < n; i++)
                EXPECT(get(out, i, dt) == reduced(dt, op, s, p, (size_t)me * n + i),
                       "reduce_scatter %s %s [%zu]", gn, tr_comm_dtype_name(dt), i);
            OK(tr_comm_reduce_scatter_inplace(c, g, in, n, dt, (tr_comm_op)op));
            EXPECT(memcmp(in + (size_t)me * n * es, out, n * es) == 0,
                   "in-place reduce_scatter %s: block %d differs", gn, me);
            free(in);
            free(out);
        }
    }
}

static void check_movement(tr_comm *c, int g, uint64_t seed) {
    int p = tr_comm_group_size(c, g), me = tr_comm_group_rank(c, g);
    const char *gn = tr_comm_group_name(g);
    const size_t n = 11;
    const tr_comm_dtype dt = TR_COMM_F64;
    double *in = malloc(sizeof(double) * n * p), *out = malloc(sizeof(double) * n * p);

    /* all-gather: block r holds rank r's n values. */
    for (size_t i = 0; i < n; i++) put(in, i, dt, seed, me, i);
    OK(tr_comm_all_gather(c, g, in, out, n, dt));
    for (int r = 0; r < p; r++)
        for (size_t i = 0; i < n; i++)
            EXPECT(out[r * n + i] == exact_f(seed, r, i), "all_gather %s block %d", gn, r);
    memset(out, 0, sizeof(double) * n * p);
    for (size_t i = 0; i < n; i++) put(out, (size_t)me * n + i, dt, seed, me, i);
    OK(tr_comm_all_gather_inplace(c, g, out, n, dt));
    for (int r = 0; r < p; r++)
        for (size_t i = 0; i < n; i++)
            EXPECT(out[r * n + i] == exact_f(seed, r, i), "in-place all_gather %s", gn);
    /* Passing the own block as the send buffer is the in-place form, not an aliasing error. */
    OK(tr_comm_all_gather(c, g, out + (size_t)me * n, out, n, dt));
    for (size_t i = 0; i < n; i++)
        EXPECT(out[i] == exact_f(seed, 0, i), "all_gather from the own block %s", gn);

    /* all-to-all: block j of rank r is element (j*n + i) of r's stream; it lands in block r of
     * rank j. */
    for (size_t i = 0; i < n * p; i++) put(in, i, dt, seed + 1, me, i);
    OK(tr_comm_all_to_all(c, g, in, out, n, dt));
    for (int r = 0; r < p; r++)
        for (size_t i = 0; i < n; i++)
            EXPECT(out[r * n + i] == exact_f(seed + 1, r, (size_t)me * n + i),
                   "all_to_all %s from %d", gn, r);

    /* broadcast from the last rank. */
    for (size_t i = 0; i < n; i++) put(out, i, dt, seed + 2, me, i);
    OK(tr_comm_broadcast(c, g, out, n, dt, p - 1));
    for (size_t i = 0; i < n; i++)
        EXPECT(out[i] == exact_f(seed + 2, p - 1, i), "broadcast %s [%zu]", gn, i);
    free(in);
    free(out);
}

/* Elements rank s sends rank d: uneven, zero for some pairs. */
static size_t v_count(int s, int d) {
    return (size_t)((s * 3 + d * 5) % 4);
}

static void check_alltoallv(tr_comm *c, int g, uint64_t seed) {
    int p = tr_comm_group_size(c, g), me = tr_comm_group_rank(c, g);
    size_t *sc = calloc((size_t)p, sizeof *sc), *rc = calloc((size_t)p, sizeof *rc);
    size_t *rd = calloc((size_t)p, sizeof *rd);
    size_t ns = 0, nr = 0;
    for (int j = 0; j < p; j++) {
        sc[j] = v_count(me, j);
        rc[j] = v_count(j, me);
        rd[j] = nr + (size_t)j; /* a one-element gap before each block */
        ns += sc[j];
        nr += rc[j];
    }
    int32_t *in = malloc(sizeof(int32_t) * (ns + 1)), *out = malloc(sizeof(int32_t) * (nr + p));
    size_t k = 0;
    for (int j = 0; j < p; j++)
        for (size_t i = 0; i < sc[j]; i++) in[k++] = (int32_t)(me * 1000 + j * 100 + (int)i);
    for (size_t i = 0; i < nr + (size_t)p; i++) out[i] = -1;
    OK(tr_comm_all_to_allv(c, g, in, sc, NULL, out, rc, rd, TR_COMM_I32));
    for (int j = 0; j < p; j++) {
        for (size_t i = 0; i < rc[j]; i++)
            EXPECT(out[rd[j] + i] == (int32_t)(j * 1000 + me * 100 + (int)i),
                   "all_to_allv %s from %d [%zu]", tr_comm_group_name(g), j, i);
        if (j) EXPECT(out[rd[j] - 1] == -1, "all_to_allv wrote into a gap");
    }
    (void)seed;
    free(sc);
    free(rc);
    free(rd);
    free(in);
    free(out);
}

static void check_p2p(tr_comm *c, int g, uint64_t seed) {
    int p = tr_comm_group_size(c, g), me = tr_comm_group_rank(c, g);
    int next = (me + 1) % p, prev = (me + p - 1) % p;
    const size_t n = 9;
    float fwd_out[9], fwd_in[9], bwd_out[9], bwd_in[9];
    for (size_t i = 0; i < n; i++) {
        fwd_out[i] = exact_f(seed, me, i);
        bwd_out[i] = exact_f(seed + 1, me, i);
    }
    /* Pipeline style: activations forward and gradients backward in one batch. */
    tr_comm_p2p ops[4] = {{false, prev, fwd_in, n, TR_COMM_F32},
                          {false, next, bwd_in, n, TR_COMM_F32},
                          {true, next, fwd_out, n, TR_COMM_F32},
                          {true, prev, bwd_out, n, TR_COMM_F32}};
    OK(tr_comm_p2p_batch(c, g, ops, 4));
    for (size_t i = 0; i < n; i++) {
        EXPECT(fwd_in[i] == exact_f(seed, prev, i), "batch ring forward %s", tr_comm_group_name(g));
        EXPECT(bwd_in[i] == exact_f(seed + 1, next, i), "batch ring backward");
    }
    /* Plain send/recv in pairs; an odd last rank sits out. */
    int partner = me ^ 1;
    if (partner < p) {
        int64_t v = (int64_t)me * 7 + 1, got = -1;
        tr_comm_request *r;
        OK(tr_comm_irecv(c, g, &got, 1, TR_COMM_I64, partner, 5, &r));
        OK(tr_comm_send(c, g, &v, 1, TR_COMM_I64, partner, 5));
        OK(tr_comm_wait(c, &r));
        EXPECT(got == (int64_t)partner * 7 + 1, "send/recv with %d", partner);
    }
    OK(tr_comm_barrier(c, g));
}

/* Start several operations, compute while they fly, then complete them out of order. */
static void check_overlap(tr_comm *c, uint64_t seed) {
    int pw = tr_comm_group_size(c, TR_COMM_WORLD), mw = tr_comm_group_rank(c, TR_COMM_WORLD);
    int pt = tr_comm_group_size(c, TR_GROUP_TP), mt = tr_comm_group_rank(c, TR_GROUP_TP);
    enum { N = 256 };
    float a[N], ar[N], *ag = malloc(sizeof(float) * N * pt), *a2a = malloc(sizeof(float) * pw * 4);
    float *a2a_out = malloc(sizeof(float) * pw * 4);
    for (int i = 0; i < N; i++) a[i] = exact_f(seed, mw, (size_t)i);
    for (int i = 0; i < pw * 4; i++) a2a[i] = exact_f(seed + 1, mw, (size_t)i);
    tr_comm_request *req[3];
    OK(tr_comm_iall_reduce(c, TR_COMM_WORLD, a, ar, N, TR_COMM_F32, TR_COMM_SUM, &req[0]));
    OK(tr_comm_iall_gather(c, TR_GROUP_TP, a, ag, N, TR_COMM_F32, &req[1]));
    OK(tr_comm_iall_to_all(c, TR_COMM_WORLD, a2a, a2a_out, 4, TR_COMM_F32, &req[2]));
    volatile double work = 0;
    for (int i = 0; i < 200000; i++) work += (double)i * 1e-9;
    bool done = false;
    int polls = 0;
    while (!done && polls++ < 1000000) OK(tr_comm_test(c, &req[2], &done));
    EXPECT(done && req[2] == NULL, "tr_comm_test never completed the all_to_all");
    tr_comm_request *rest[2] = {req[1], req[0]};
    OK(tr_comm_wait_all(c, rest, 2));
    for (int i = 0; i < N; i++) {
        double want = 0;
        for (int r = 0; r < pw; r++) want += exact_f(seed, r, (size_t)i);
        EXPECT(ar[i] == (float)want, "overlapped all_reduce [%d]", i);
    }
    int *tp_members = malloc(sizeof(int) * pt);
    for (int r = 0; r < pt; r++) tp_members[r] = tr_comm_world_rank_of(c, TR_GROUP_TP, r);
    for (int r = 0; r < pt; r++)
        for (int i = 0; i < N; i++)
            EXPECT(ag[r * N + i] == exact_f(seed, tp_members[r], (size_t)i),
                   "overlapped all_gather");
    for (int r = 0; r < pw; r++)
        for (int i = 0; i < 4; i++)
            EXPECT(a2a_out[r * 4 + i] == exact_f(seed + 1, r, (size_t)(mw * 4 + i)),
                   "overlapped all_to_all");
    (void)mt;
    free(tp_members);
    free(ag);
    free(a2a);
    free(a2a_out);
}

/* One synthetic training iteration; the counters must equal the volumes written out from the
 * layout: bucketed DP gradient reduction, sequence-parallel TP all-gather + reduce-scatter per
 * layer, pipeline activations. */
static void check_counters(tr_comm *c) {
    int tp = tr_comm_group_size(c, TR_GROUP_TP), dp = tr_comm_group_size(c, TR_GROUP_DP);
    const size_t params = 1000, bucket = 256, seq_hidden = 64, layers = 3;
    float *grads = calloc(params, sizeof(float));
    float *full = calloc(seq_hidden * tp, sizeof(float)),
          *shard = calloc(seq_hidden, sizeof(float));
    tr_comm_counters_reset(&c->counters);
    tr_comm_request *reqs[8];
    int nreq = 0;
    for (size_t off = 0; off < params; off += bucket) {
        size_t len = params - off < bucket ? params - off : bucket;
        OK(tr_comm_iall_reduce(c, TR_GROUP_DP, grads + off, grads + off, len, TR_COMM_F32,
                               TR_COMM_SUM, &reqs[nreq++]));
    }
    for (size_t l = 0; l < layers; l++) {
        OK(tr_comm_all_gather(c, TR_GROUP_TP, shard, full, seq_hidden, TR_COMM_F32));
        OK(tr_comm_reduce_scatter(c, TR_GROUP_TP, full, shard, seq_hidden, TR_COMM_F32,
                                  TR_COMM_SUM));
    }
    OK(tr_comm_wait_all(c, reqs, nreq));
    const tr_comm_counters *k = &c->counters;
    EXPECT(tr_comm_counters_bytes(k, TR_GROUP_DP, TR_COMM_ALL_REDUCE) == params * 4,
           "dp all_reduce bytes %llu, expected %zu",
           (unsigned long long)tr_comm_counters_bytes(k, TR_GROUP_DP, TR_COMM_ALL_REDUCE),
           params * 4);
    EXPECT(tr_comm_counters_calls(k, TR_GROUP_DP, TR_COMM_ALL_REDUCE) == 4, "dp bucket calls");
    EXPECT(tr_comm_counters_bytes(k, TR_GROUP_TP, TR_COMM_ALL_GATHER) == layers * seq_hidden * 4,
           "tp all_gather bytes");
    EXPECT(tr_comm_counters_bytes(k, TR_GROUP_TP, TR_COMM_REDUCE_SCATTER) ==
               layers * seq_hidden * (size_t)tp * 4,
           "tp reduce_scatter bytes");
    EXPECT(tr_comm_counters_bytes_sent(k, -1) ==
               params * 4 + layers * seq_hidden * 4 * (1 + (size_t)tp),
           "total bytes");
    EXPECT(tr_comm_counters_bytes(k, TR_GROUP_PP, -1) == 0, "nothing booked on pp");
    (void)dp;
    free(grads);
    free(full);
    free(shard);
}

static uint64_t hash_bits(const float *x, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], 4);
        h = mix(h ^ b);
    }
    return h;
}

/* Native all-reduce of order-sensitive floats: identical bits on every rank (the assumption
 * docs/comm.md states); rank-order mode: identical to a serial fold over ranks. */
static void check_determinism(tr_comm *native, tr_comm *ordered, int verbose) {
    int p = tr_comm_group_size(native, TR_COMM_WORLD),
        me = tr_comm_group_rank(native, TR_COMM_WORLD);
    const size_t sizes[] = {1, 7, 1000, 70000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        float *in = malloc(n * 4), *out = malloc(n * 4), *ref = malloc(n * 4);
        for (size_t i = 0; i < n; i++) {
            in[i] = wild_f(99 + s, me, i);
            float acc = wild_f(99 + s, 0, i);
            for (int r = 1; r < p; r++) acc += wild_f(99 + s, r, i);
            ref[i] = acc;
        }
        OK(tr_comm_all_reduce(native, TR_COMM_WORLD, in, out, n, TR_COMM_F32, TR_COMM_SUM));
        uint64_t h = hash_bits(out, n), hmin = 0, hmax = 0;
        OK(tr_comm_all_reduce(native, TR_COMM_WORLD, &h, &hmin, 1, TR_COMM_I64, TR_COMM_MIN));
        OK(tr_comm_all_reduce(native, TR_COMM_WORLD, &h, &hmax, 1, TR_COMM_I64, TR_COMM_MAX));
        EXPECT(hmin == hmax, "native all_reduce of %zu floats differs across ranks", n);
        if (verbose && me == 0)
            printf("native all_reduce n=%zu: same bits on all %d ranks: %s; equals serial "
                   "rank-order sum: %s\n",
                   n, p, hmin == hmax ? "yes" : "NO", memcmp(out, ref, n * 4) == 0 ? "yes" : "no");
        OK(tr_comm_all_reduce(ordered, TR_COMM_WORLD, in, out, n, TR_COMM_F32, TR_COMM_SUM));
        EXPECT(memcmp(out, ref, n * 4) == 0, "rank-order all_reduce of %zu floats differs", n);
        /* Rank-order reduce-scatter equals the matching slice of the serial fold. */
        size_t blk = n / (size_t)p;
        if (blk) {
            OK(tr_comm_reduce_scatter(ordered, TR_COMM_WORLD, in, out, blk, TR_COMM_F32,
                                      TR_COMM_SUM));
            EXPECT(memcmp(out, ref + (size_t)me * blk, blk * 4) == 0,
                   "rank-order reduce_scatter of %zu floats differs", n);
        }
        free(in);
        free(out);
        free(ref);
    }
}

static int parse_tp(int argc, char **argv) {
    for (int i = 2; i < argc; i++)
        if (!strncmp(argv[i], "tp=", 3)) return atoi(argv[i] + 3);
    return 1;
}

static void write_pid(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/%d.pid", dir, g_rank);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%ld\n", (long)getpid());
        fclose(f);
    }
}

static void *sigterm_later(void *arg) {
    (void)arg;
    sleep(1);
    kill(getpid(), SIGTERM);
    return NULL;
}

static int stall(tr_parallel_state *ps, bool collective, bool sigterm, const char *dir) {
    tr_config *cfg = malloc(sizeof *cfg);
    tr_diags diags;
    tr_diags_init(&diags);
    if (tr_config_init(cfg, &diags) != TR_OK) return 1;
    cfg->dist.distributed_timeout_seconds = sigterm ? 60 : 2;
    tr_comm_options opt = {tr_comm_timeout_from_config(cfg), TR_COMM_REDUCE_NATIVE};
    tr_config_free(cfg);
    free(cfg);
    tr_comm *c;
    if (tr_comm_mpi_create(ps, &opt, &diags, &c) != TR_OK) return 1;
    write_pid(dir);
    tr_comm_abort_on_error(c, tr_comm_barrier(c, TR_COMM_WORLD));
    int last = ps->world_size - 1;
    if (g_rank == last) raise(SIGSTOP); /* a peer that stops answering, mid-run */
    tr_train_signals sigs = {0};
    pthread_t killer;
    if (sigterm) {
        tr_train_signals_install(&sigs);
        pthread_create(&killer, NULL, sigterm_later, NULL);
        pthread_detach(killer);
    }
    float x[4] = {1, 2, 3, 4}, y[4];
    tr_status st;
    if (collective) {
        st = tr_comm_all_reduce(c, TR_COMM_WORLD, x, y, 4, TR_COMM_F32, TR_COMM_SUM);
    } else {
        tr_comm_p2p ops[2] = {{true, last, x, 4, TR_COMM_F32}, {false, last, y, 4, TR_COMM_F32}};
        st = g_rank == 0 ? tr_comm_p2p_batch(c, TR_COMM_WORLD, ops, 2) : TR_OK;
        if (st == TR_OK) st = tr_comm_barrier(c, TR_COMM_WORLD);
    }
    tr_comm_abort_on_error(c, st);
    fprintf(stderr, "rank %d: the stalled operation completed\n", g_rank);
    return 1;
}

/* Sizes double until one all-reduce outlasts the stop grace by half; each must succeed. */
static int slow_sigterm(tr_parallel_state *ps) {
    static volatile sig_atomic_t stop = 1;
    tr_diags diags;
    tr_diags_init(&diags);
    tr_comm_options opt = {60, TR_COMM_REDUCE_NATIVE};
    tr_comm *c;
    if (tr_comm_mpi_create(ps, &opt, &diags, &c) != TR_OK) return 1;
    tr_comm_set_stop_flag(&stop);
    double longest = 0;
    for (size_t n = (size_t)8 << 20; n <= (size_t)64 << 20 && longest < 1.5; n *= 2) {
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        if (!x || !y) return 1;
        for (size_t i = 0; i < n; i++) x[i] = (float)(g_rank + 1);
        tr_comm_abort_on_error(c, tr_comm_barrier(c, TR_COMM_WORLD));
        double t0 = MPI_Wtime();
        tr_status st = tr_comm_all_reduce(c, TR_COMM_WORLD, x, y, n, TR_COMM_F32, TR_COMM_SUM);
        double took = MPI_Wtime() - t0;
        if (st != TR_OK) {
            tr_diags_print_text(&diags, stderr, false);
            fail("a healthy all-reduce of %zu floats after a stop signal failed", n);
            return 1;
        }
        float want = (float)(ps->world_size * (ps->world_size + 1) / 2);
        if (y[0] != want || y[n - 1] != want) fail("sum %g, want %g", y[0], want);
        /* Through the layer: a rank done early waits here, where it can answer the probe. */
        tr_comm_abort_on_error(
            c, tr_comm_all_reduce(c, TR_COMM_WORLD, &took, &longest, 1, TR_COMM_F64, TR_COMM_MAX));
        if (g_rank == 0)
            printf("all-reduce of %zu floats under a stop signal: %.2f s\n", n, longest);
        free(x);
        free(y);
    }
    tr_comm_set_stop_flag(NULL);
    if (g_rank == 0 && longest < 1.5)
        printf("note: no all-reduce here outlasted the grace; the check was not exercised\n");
    tr_comm_destroy(c);
    return g_fail ? 1 : 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "";
    tr_parallel_dims dims;
    tr_parallel_dims_init(&dims, size);
    dims.tp = dims.etp = strcmp(mode, "ops") == 0 ? parse_tp(argc, argv) : 1;
    tr_parallel_dims_derive(&dims);
    tr_diags diags;
    tr_diags_init(&diags);
    tr_parallel_state ps;
    if (tr_parallel_state_init(&ps, &dims, MPI_COMM_WORLD, &diags) != TR_OK) {
        tr_diags_print_text(&diags, stderr, false);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (!strcmp(mode, "stall-collective") || !strcmp(mode, "stall-p2p") ||
        !strcmp(mode, "stall-sigterm")) {
        if (argc < 3) MPI_Abort(MPI_COMM_WORLD, 64);
        int rc =
            stall(&ps, strcmp(mode, "stall-p2p") != 0, !strcmp(mode, "stall-sigterm"), argv[2]);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    if (!strcmp(mode, "slow-sigterm")) {
        int rc = slow_sigterm(&ps);
        if (rc) MPI_Abort(MPI_COMM_WORLD, rc);
        if (g_rank == 0) printf("OK\n");
        tr_parallel_state_free(&ps);
        MPI_Finalize();
        return 0;
    }
    if (strcmp(mode, "ops") != 0) {
        if (g_rank == 0) fprintf(stderr, "usage: comm_check ops|stall-collective|stall-p2p\n");
        MPI_Finalize();
        return 64;
    }
    tr_comm *c, *ordered;
    tr_comm_options opt = {20, TR_COMM_REDUCE_NATIVE}, opt_o = {20, TR_COMM_REDUCE_RANK_ORDER};
    if (tr_comm_mpi_create(&ps, &opt, &diags, &c) != TR_OK ||
        tr_comm_mpi_create(&ps, &opt_o, &diags, &ordered) != TR_OK)
        MPI_Abort(MPI_COMM_WORLD, 1);
    const int groups[] = {TR_COMM_WORLD, TR_GROUP_TP, TR_GROUP_DP};
    for (int i = 0; i < 3; i++) {
        uint64_t seed = 1000 + (uint64_t)i * 100;
        check_reductions(c, groups[i], seed);
        check_reductions(ordered, groups[i], seed + 50);
        check_movement(c, groups[i], seed);
        check_alltoallv(c, groups[i], seed);
        check_p2p(c, groups[i], seed);
    }
    check_overlap(c, 7);
    check_counters(c);
    check_determinism(c, ordered, 1);
    if (diags.n) tr_diags_print_text(&diags, stderr, false);
    int total = 0;
    MPI_Allreduce(&g_fail, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("%s: comm checks on %d ranks (tp=%d), %d failures\n", total ? "FAIL" : "OK", size,
               dims.tp, total);
    tr_comm_destroy(ordered);
    tr_comm_destroy(c);
    tr_parallel_state_free(&ps);
    tr_diags_free(&diags);
    MPI_Finalize();
    return total ? 1 : 0;
}
