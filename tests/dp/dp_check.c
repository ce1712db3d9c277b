/* Data parallelism on real ranks: a synthetic "model" of a few parameter ranges whose per-sample
 * gradient is a deterministic function of (parameters, sample id). Each DP rank processes its
 * share of a global batch of N samples (one sample per microbatch, in order), synchronises
 * gradients through tr_ddp, optionally clips, and steps through tr_dist_opt. Every rank also
 * computes, without communication, two references on the whole batch:
 *   serial:  one process summing all N per-sample gradients in order, then AdamW/SGD on a plain
 *            contiguous buffer (what a single-rank run does);
 *   grouped: the same sums associated as DP does (per-rank partial sums, folded in rank order).
 * Required: every parameter tensor within 1e-6 of serial after 3 steps (max|a-b| / max|b|), and
 * bitwise equal to grouped when the comm reduces in rank order. Also checked: byte counters equal
 * the analytic volume, overlap really starts buckets during backward and leaves gathers in flight,
 * and the error paths (a gradient reported twice, NaN gradients).
 *
 *   mpirun -np N dp_check      (N must divide 12) */
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "runtime/comm/comm.h"
#include "runtime/distributed/ddp.h"
#include "runtime/distributed/dist_optimizer.h"
#include "runtime/distributed/grad_clip.h"
#include "runtime/parallel/state.h"

#define N_SAMPLES   12
#define N_ITERS     3
#define N_PARAMS    7
#define SERIAL_RTOL 1e-6

static int g_rank, g_fail;
static double g_worst_serial;

static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "rank %d: FAIL: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    g_fail++;
}

#define OK(expr)                                                                                   \
    do {                                                                                           \
        if ((expr) != TR_OK) fail("%s failed (line %d)", #expr, __LINE__);                         \
    } while (0)

static const struct {
    const char *name;
    int64_t numel;
    bool no_decay;
} k_model[N_PARAMS] = {{"embedding.word_embeddings.weight", 300, false},
                       {"layers.0.input_layernorm.weight", 17, true},
                       {"layers.0.linear_qkv.weight", 513, false},
                       {"layers.0.linear_qkv.bias", 31, true},
                       {"layers.1.linear_fc1.weight", 1200, false},
                       {"layers.1.linear_fc1.bias", 7, true},
                       {"output_layer.weight", 450, false}};

typedef enum { SCALE_BEFORE, SCALE_IN_COLLECTIVE, SCALE_AFTER_FINISH } scale_mode;
/* Adam is nearly invariant to the gradient's scale and clipping normalises it, so plain SGD is
 * the mode in which a wrong gradient scale shows against the serial reference. */
typedef enum { ADAMW, ADAMW_CLIP, SGD_CLIP, SGD } opt_mode;

typedef struct run_cfg {
    bool sharded, overlap;
    int64_t bucket_size;
    bool minimal_align, tied_bucket;
    scale_mode scale;
    opt_mode optim;
} run_cfg;

static float init_value(int p, int64_t i) {
    return 0.5f * sinf(0.37f * (float)i + (float)p);
}

/* d(loss of sample s)/d(element i of parameter p) at value x. */
static float sample_grad(float x, int s, int p, int64_t i) {
    return cosf(x * (1.0f + 0.1f * (float)s) + 0.013f * (float)i + (float)p) +
           0.2f * x * sinf((float)(s + 1));
}

static const float k_lr_adam = 1e-2f, k_lr_sgd = 5e-2f, k_wd = 0.1f, k_max_norm = 1.0f;

static tr_dist_opt_options opt_options(const run_cfg *r, int group) {
    tr_dist_opt_options o = {.kind = r->optim >= SGD_CLIP ? TR_DIST_OPT_SGD : TR_DIST_OPT_ADAMW,
                             .beta1 = 0.9f,
                             .beta2 = 0.95f,
                             .eps = 1e-8f,
                             .momentum = 0.9f,
                             .group = group,
                             .overlap_param_gather = r->sharded && r->overlap};
    return o;
}

static float lr_of(const run_cfg *r) {
    return r->optim >= SGD_CLIP ? k_lr_sgd : k_lr_adam;
}

/* Adds sample s's gradient of every parameter (last first, as backward does) to grads laid out
 * at offsets off[], reading parameters x at the same offsets; reports each to ddp if given. */
static void backward(const float *x, float *grads, const int64_t *off, int s, tr_ddp *ddp) {
    for (int p = N_PARAMS - 1; p >= 0; p--) {
        for (int64_t i = 0; i < k_model[p].numel; i++)
            grads[off[p] + i] += sample_grad(x[off[p] + i], s, p, i);
        if (ddp) OK(tr_ddp_grad_ready(ddp, p));
    }
}

static void step_ranges(const tr_ops *ops, const run_cfg *r, float *x, const float *g, float *m,
                        float *v, const int64_t *off, int64_t step) {
    for (int p = 0; p < N_PARAMS; p++) {
        float wd = k_model[p].no_decay ? 0.0f : k_wd;
        int64_t o = off[p], n = k_model[p].numel;
        if (r->optim >= SGD_CLIP) {
            tr_sgd_params sp = {.lr = k_lr_sgd, .momentum = 0.9f, .weight_decay = wd};
            OK(ops->sgd(x + o, g + o, m + o, n, &sp));
        } else {
            tr_adamw_params ap = {.lr = k_lr_adam,
                                  .beta1 = 0.9f,
                                  .beta2 = 0.95f,
                                  .eps = 1e-8f,
                                  .weight_decay = wd,
                                  .step = step};
            OK(ops->adamw(x + o, g + o, m + o, v + o, n, &ap));
        }
    }
}

/* The single-rank run: contiguous buffer in model order, all samples summed in order. */
static void serial_reference(const tr_ops *ops, const run_cfg *r, float *x, int64_t total) {
    int64_t off[N_PARAMS], pos = 0;
    for (int p = 0; p < N_PARAMS; p++) {
        off[p] = pos;
        for (int64_t i = 0; i < k_model[p].numel; i++) x[pos + i] = init_value(p, i);
        pos += k_model[p].numel;
    }
    float *g = calloc((size_t)total, 4), *m = calloc((size_t)total, 4),
          *v = calloc((size_t)total, 4);
    for (int it = 0; it < N_ITERS; it++) {
        memset(g, 0, (size_t)total * 4);
        for (int s = 0; s < N_SAMPLES; s++) backward(x, g, off, s, NULL);
        for (int64_t e = 0; e < total; e++) g[e] *= 1.0f / N_SAMPLES;
        if (r->optim == ADAMW_CLIP || r->optim == SGD_CLIP) {
            double sq = 0;
            for (int64_t e = 0; e < total; e++) sq += (double)g[e] * g[e];
            double norm = sqrt(sq), coeff = k_max_norm / (norm + 1e-6);
            if (coeff < 1.0)
                for (int64_t e = 0; e < total; e++) g[e] *= (float)coeff;
        }
        step_ranges(ops, r, x, g, m, v, off, it + 1);
    }
    free(g);
    free(m);
    free(v);
}

/* The same sums associated as the DP run does, in the layout's buffer: per-rank partial sums,
 * scaled before or after the rank-ordered fold as the run scales them, and the grad norm summed
 * per rank's owned ranges in rank order. */
static void grouped_reference(const tr_ops *ops, const run_cfg *r, const tr_grad_layout *L,
                              float *x) {
    int dp = L->opt.dp_size;
    int64_t n = L->numel, off[N_PARAMS];
    for (int p = 0; p < N_PARAMS; p++) off[p] = L->params[p].offset;
    memset(x, 0, (size_t)n * 4);
    for (int p = 0; p < N_PARAMS; p++)
        for (int64_t i = 0; i < k_model[p].numel; i++) x[off[p] + i] = init_value(p, i);
    float *g = calloc((size_t)n, 4), *part = calloc((size_t)n, 4), *m = calloc((size_t)n, 4),
          *v = calloc((size_t)n, 4);
    float scale = 1.0f / N_SAMPLES;
    for (int it = 0; it < N_ITERS; it++) {
        memset(g, 0, (size_t)n * 4);
        for (int rank = 0; rank < dp; rank++) {
            memset(part, 0, (size_t)n * 4);
            for (int s = rank * N_SAMPLES / dp; s < (rank + 1) * N_SAMPLES / dp; s++)
                backward(x, part, off, s, NULL);
            for (int64_t e = 0; e < n; e++)
                g[e] += r->scale == SCALE_BEFORE ? part[e] * scale : part[e];
        }
        if (r->scale != SCALE_BEFORE)
            for (int64_t e = 0; e < n; e++) g[e] *= scale;
        if (r->optim == ADAMW_CLIP || r->optim == SGD_CLIP) {
            double sq = 0;
            for (int rank = 0; rank < (L->opt.sharded ? dp : 1); rank++) {
                tr_grad_owned w;
                double local = 0;
                OK(tr_grad_owned_build(&w, L, rank));
                OK(tr_grad_local_sum_squares(L, &w, g, NULL, ops, &local));
                sq += local;
                tr_grad_owned_free(&w);
            }
            double norm = sqrt(sq), coeff = k_max_norm / (norm + 1e-6);
            if (coeff < 1.0)
                for (int p = 0; p < N_PARAMS; p++)
                    for (int64_t i = 0; i < k_model[p].numel; i++) g[off[p] + i] *= (float)coeff;
        }
        step_ranges(ops, r, x, g, m, v, off, it + 1);
    }
    free(g);
    free(part);
    free(m);
    free(v);
}

static tr_grad_layout_options layout_options(const run_cfg *r, int dp) {
    tr_grad_layout_options o = tr_grad_layout_defaults(dp, r->bucket_size, r->sharded);
    if (r->minimal_align) o.param_align = o.bucket_align = 1;
    return o;
}

static void build_layout(const run_cfg *r, int dp, tr_grad_layout *L) {
    tr_grad_param params[N_PARAMS];
    memset(params, 0, sizeof params);
    for (int p = 0; p < N_PARAMS; p++) {
        snprintf(params[p].name, sizeof params[p].name, "%s", k_model[p].name);
        params[p].numel = k_model[p].numel;
        params[p].no_weight_decay = k_model[p].no_decay;
    }
    params[0].own_bucket = r->tied_bucket;
    tr_grad_layout_options o = layout_options(r, dp);
    OK(tr_grad_layout_build(L, params, N_PARAMS, &o, NULL));
}

typedef struct run_result {
    /* Per parameter tensor max|a-b| / max|b|, the worst tensor: element-wise ratios are
     * meaningless for elements near zero, whose absolute error is that of their neighbours. */
    double serial_rel;
    double serial_abs; /* max |a-b| over all elements */
    bool grouped_bitwise;
} run_result;

static void compare(const tr_grad_layout *L, const float *x, const float *serial,
                    const float *grouped, run_result *res) {
    int64_t pos = 0;
    res->serial_rel = res->serial_abs = 0;
    res->grouped_bitwise = true;
    for (int p = 0; p < N_PARAMS; p++) {
        double diff = 0, mag = 0;
        for (int64_t i = 0; i < k_model[p].numel; i++) {
            float a = x[L->params[p].offset + i], b = serial[pos + i];
            double d = fabs((double)a - b);
            if (!(d <= diff)) diff = d; /* NaN sticks */
            mag = fmax(mag, fabs((double)b));
            if (memcmp(&a, &grouped[L->params[p].offset + i], 4) != 0) res->grouped_bitwise = false;
        }
        double rel = diff / mag;
        if (!(rel <= res->serial_rel)) res->serial_rel = rel;
        if (!(diff <= res->serial_abs)) res->serial_abs = diff;
        pos += k_model[p].numel;
    }
}

/* Bytes the DP group must have booked for one iteration's gradient sync and param gather. */
static void check_volume(tr_comm *c, const run_cfg *r, const tr_grad_layout *L, int group,
                         bool after_step) {
    uint64_t full = 4 * (uint64_t)L->numel, dp = (uint64_t)L->opt.dp_size;
    uint64_t ar = tr_comm_counters_bytes(&c->counters, group, TR_COMM_ALL_REDUCE);
    uint64_t rs = tr_comm_counters_bytes(&c->counters, group, TR_COMM_REDUCE_SCATTER);
    uint64_t ag = tr_comm_counters_bytes(&c->counters, group, TR_COMM_ALL_GATHER);
    uint64_t calls = tr_comm_counters_calls(&c->counters, group, -1);
    uint64_t nb = (uint64_t)L->n_buckets;
    if (!r->sharded) {
        if (ar != full || rs || ag || calls != nb)
            fail("DDP volume: all-reduce %llu bytes (expected %llu), rs %llu, ag %llu, %llu calls",
                 (unsigned long long)ar, (unsigned long long)full, (unsigned long long)rs,
                 (unsigned long long)ag, (unsigned long long)calls);
        return;
    }
    uint64_t want_ag = after_step ? full / dp : 0;
    if (ar || rs != full || ag != want_ag || calls != (after_step ? 2 * nb : nb))
        fail("dist-opt volume: reduce-scatter %llu (expected %llu), all-gather %llu (expected "
             "%llu), all-reduce %llu, %llu calls",
             (unsigned long long)rs, (unsigned long long)full, (unsigned long long)ag,
             (unsigned long long)want_ag, (unsigned long long)ar, (unsigned long long)calls);
}

static void run_dp(tr_comm *c, const tr_ops *ops, const run_cfg *r, const tr_grad_layout *L,
                   float *x) {
    int group = TR_GROUP_DP_CP, dp = tr_comm_group_size(c, group),
        rank = tr_comm_group_rank(c, group);
    tr_diags diags;
    tr_diags_init(&diags);
    memset(x, 0, (size_t)L->numel * 4);
    for (int p = 0; p < N_PARAMS; p++)
        for (int64_t i = 0; i < k_model[p].numel; i++)
            x[L->params[p].offset + i] = init_value(p, i);
    float *g = calloc((size_t)L->numel, 4);
    int64_t off[N_PARAMS];
    for (int p = 0; p < N_PARAMS; p++) off[p] = L->params[p].offset;
    tr_ddp_options dopt = {.group = group,
                           .overlap_grad_reduce = r->overlap,
                           .average_in_collective = r->scale == SCALE_IN_COLLECTIVE};
    tr_dist_opt_options oopt = opt_options(r, group);
    tr_ddp ddp;
    tr_dist_opt opt;
    OK(tr_ddp_create(&ddp, L, g, c, ops, &dopt, &diags));
    OK(tr_dist_opt_create(&opt, L, x, g, c, ops, &oopt, &diags));
    for (int it = 0; it < N_ITERS; it++) {
        tr_comm_counters_reset(&c->counters);
        OK(tr_ddp_start_iteration(&ddp, r->scale == SCALE_AFTER_FINISH ? 1.0f : 1.0f / N_SAMPLES));
        /* Forward: each bucket's gathered parameters are awaited right before first use. */
        for (int p = 0; p < N_PARAMS; p++) OK(tr_dist_opt_wait_param(&opt, L->params[p].bucket));
        int lo = rank * N_SAMPLES / dp, hi = (rank + 1) * N_SAMPLES / dp;
        for (int s = lo; s < hi; s++) {
            tr_ddp_set_last_microbatch(&ddp, s == hi - 1);
            backward(x, g, off, s, &ddp);
        }
        if (ddp.started_early != (r->overlap ? L->n_buckets : 0))
            fail("%d buckets started during backward (overlap %d, %d buckets)", ddp.started_early,
                 r->overlap, L->n_buckets);
        OK(tr_ddp_finish_grad_sync(&ddp));
        if (r->scale == SCALE_AFTER_FINISH) OK(tr_ddp_scale_grads(&ddp, 1.0f / N_SAMPLES));
        check_volume(c, r, L, group, false);
        if (r->optim == ADAMW_CLIP || r->optim == SGD_CLIP) {
            double norm = 0;
            bool clipped = false;
            OK(tr_grad_clip(c, tr_grad_norm_group(r->sharded), L, &opt.owned, g, NULL, ops,
                            k_max_norm, &norm, &clipped));
            if (!clipped) fail("clipping inactive (norm %g)", norm);
        }
        OK(tr_dist_opt_step(&opt, lr_of(r), k_wd));
        if (r->sharded && r->overlap && dp > 1) {
            int in_flight = 0;
            for (int b = 0; b < L->n_buckets; b++) in_flight += opt.gathers[b] != NULL;
            if (in_flight != L->n_buckets) fail("only %d gathers left in flight", in_flight);
        }
        OK(tr_dist_opt_wait_all_params(&opt));
        check_volume(c, r, L, group, true);
    }
    if (diags.n) tr_diags_print_text(&diags, stderr, false);
    tr_dist_opt_free(&opt);
    tr_ddp_free(&ddp);
    free(g);
    tr_diags_free(&diags);
}

static void run_one(tr_comm *native, tr_comm *ordered, const tr_ops *ops, const run_cfg *r) {
    int dp = tr_comm_group_size(native, TR_GROUP_DP_CP);
    tr_grad_layout L;
    build_layout(r, dp, &L);
    int64_t total = L.param_numel;
    float *serial = malloc((size_t)total * 4), *grouped = malloc((size_t)L.numel * 4),
          *x = malloc((size_t)L.numel * 4);
    serial_reference(ops, r, serial, total);
    grouped_reference(ops, r, &L, grouped);
    run_result res[2];
    tr_comm *comms[2] = {native, ordered};
    for (int k = 0; k < 2; k++) {
        run_dp(comms[k], ops, r, &L, x);
        compare(&L, x, serial, grouped, &res[k]);
        if (!(res[k].serial_rel <= SERIAL_RTOL))
            fail("relative error vs serial %.3g > %.0e", res[k].serial_rel, SERIAL_RTOL);
        if (res[k].serial_rel > g_worst_serial) g_worst_serial = res[k].serial_rel;
    }
    if (!res[1].grouped_bitwise) fail("rank-ordered reduction not bitwise equal to grouped sums");
    static const char *scale_names[] = {"before", "in-collective", "after-finish"};
    static const char *opt_names[] = {"adamw", "adamw+clip", "sgd+clip", "sgd"};
    if (g_rank == 0)
        printf("dp=%d %-8s overlap=%d bucket=%-5lld align=%-8s %-13s %-10s buckets=%d numel=%lld: "
               "[native | rank-order] vs serial rel %.2e | %.2e, abs %.1e | %.1e; bitwise vs "
               "grouped %s | %s\n",
               dp, r->sharded ? "dist-opt" : "ddp", r->overlap, (long long)r->bucket_size,
               r->minimal_align ? "minimal" : "megatron", scale_names[r->scale],
               opt_names[r->optim], L.n_buckets, (long long)L.numel, res[0].serial_rel,
               res[1].serial_rel, res[0].serial_abs, res[1].serial_abs,
               res[0].grouped_bitwise ? "yes" : "no", res[1].grouped_bitwise ? "yes" : "no");
    free(serial);
    free(grouped);
    free(x);
    tr_grad_layout_free(&L);
}

/* A gradient reported twice and a NaN gradient on the last rank: clear diagnostics, no hang. */
static void check_errors(tr_comm *c, const tr_ops *ops) {
    run_cfg r = {.sharded = true, .overlap = true, .bucket_size = 500};
    int dp = tr_comm_group_size(c, TR_GROUP_DP_CP), rank = tr_comm_group_rank(c, TR_GROUP_DP_CP);
    tr_grad_layout L;
    build_layout(&r, dp, &L);
    float *g = calloc((size_t)L.numel, 4);
    tr_diags diags;
    tr_diags_init(&diags);
    tr_ddp_options o = {
        .group = TR_GROUP_DP_CP, .overlap_grad_reduce = true, .check_for_nan_in_grad = true};
    tr_ddp ddp;
    OK(tr_ddp_create(&ddp, &L, g, c, ops, &o, &diags));
    OK(tr_ddp_grad_ready(&ddp, 6));
    if (tr_ddp_grad_ready(&ddp, 6) != TR_ERR_INVALID || !tr_diags_find(&diags, "ddp.grad_ready"))
        fail("a gradient reported twice was accepted");
    if (tr_ddp_grad_ready(&ddp, N_PARAMS) != TR_ERR_INVALID) fail("parameter index out of range");
    if (tr_ddp_scale_grads(&ddp, 2.0f) != TR_ERR_INVALID) fail("scaling before finish accepted");
    if (rank == dp - 1) g[L.params[3].offset + 2] = NAN;
    tr_status st = tr_ddp_finish_grad_sync(&ddp);
    bool want_err = rank == dp - 1;
    if ((st != TR_OK) != want_err || (tr_diags_find(&diags, "ddp.nan_in_grad") != NULL) != want_err)
        fail("NaN check: status %d on rank %d", (int)st, rank);
    if (want_err && !strstr(tr_diags_find(&diags, "ddp.nan_in_grad")->message, "linear_qkv.bias"))
        fail("NaN diagnostic does not name the bucket's parameters");
    if (tr_ddp_grad_ready(&ddp, 0) != TR_ERR_INVALID) fail("grad_ready after finish accepted");
    tr_ddp_free(&ddp);
    /* A layout for another DP size is refused by name. */
    tr_grad_layout bad;
    build_layout(&r, dp + 1, &bad);
    if (tr_ddp_create(&ddp, &bad, g, c, ops, &o, &diags) != TR_ERR_INVALID ||
        !tr_diags_find(&diags, "ddp.group"))
        fail("a layout for the wrong DP size was accepted");
    tr_grad_layout_free(&bad);
    tr_grad_layout_free(&L);
    free(g);
    tr_diags_free(&diags);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    tr_parallel_dims dims;
    tr_parallel_dims_init(&dims, size);
    tr_parallel_dims_derive(&dims);
    tr_diags diags;
    tr_diags_init(&diags);
    tr_parallel_state ps;
    if (N_SAMPLES % size || tr_parallel_state_init(&ps, &dims, MPI_COMM_WORLD, &diags) != TR_OK) {
        tr_diags_print_text(&diags, stderr, false);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    tr_comm *native, *ordered;
    tr_comm_options on = {20, TR_COMM_REDUCE_NATIVE}, oo = {20, TR_COMM_REDUCE_RANK_ORDER};
    if (tr_comm_mpi_create(&ps, &on, &diags, &native) != TR_OK ||
        tr_comm_mpi_create(&ps, &oo, &diags, &ordered) != TR_OK)
        MPI_Abort(MPI_COMM_WORLD, 1);
    const tr_ops *ops = tr_ops_cpu();
    const int64_t buckets[] = {0, 400, 1000};
    int runs = 0;
    for (int sharded = 0; sharded < 2; sharded++)
        for (int overlap = 0; overlap < 2; overlap++)
            for (int b = 0; b < 3; b++)
                for (int sc = 0; sc < 3; sc++)
                    for (int om = 0; om < 4; om++) {
                        /* Every (sharding, overlap, bucket) triple meets every scaling and every
                         * optimizer, without the full product. */
                        if ((sc + om + b) % 2 != 0) continue;
                        run_cfg r = {.sharded = sharded,
                                     .overlap = overlap,
                                     .bucket_size = buckets[b],
                                     .minimal_align = b == 1,
                                     .tied_bucket = b == 2,
                                     .scale = (scale_mode)sc,
                                     .optim = (opt_mode)om};
                        run_one(native, ordered, ops, &r);
                        runs++;
                    }
    check_errors(native, ops);
    int total = 0;
    double worst = 0;
    MPI_Allreduce(&g_fail, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&g_worst_serial, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("%s: %d data-parallel layouts on %d ranks, worst relative error vs serial %.3g, "
               "%d failures\n",
               total ? "FAIL" : "OK", runs, size, worst, total);
    tr_comm_destroy(ordered);
    tr_comm_destroy(native);
    tr_parallel_state_free(&ps);
    tr_diags_free(&diags);
    MPI_Finalize();
    return total ? 1 : 0;
}
