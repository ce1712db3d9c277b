/* Resume and reshard through real training runs (mpirun, in-process tr_train_run):
 *
 *   ckpt_resume [--exact] [--expect-spread] [--tol X] --stop S --np-save A --np-load B
 *               RECIPE COMMON_KEY=VALUE... -- SAVE_LAYOUT_KEY=VALUE... -- LOAD_LAYOUT_KEY=VALUE...
 *
 * 1. The first A ranks train under the save layout with train.exit_interval=S and
 *    checkpoint.save in a fresh directory: the run stops after iteration S and saves.
 * 2. The first B ranks load it under the load layout and train to train.train_iters.
 * 3. The losses of both halves and the final state are compared with an uninterrupted run:
 *    --exact: the same layout as the save (A ranks), and everything must be BITWISE equal
 *    (parameters, optimizer state, counters); otherwise: the single-rank run (rank 0), relative
 *    error <= tol (1e-5) on the losses and parameters, which also equals the uninterrupted run
 *    under the load layout (tests/equiv), and the counters equal.
 * The final state is read back from the checkpoints both runs save at their end: logical tensors,
 * whatever layout wrote them, so the comparison never depends on which rank holds what.
 * --expect-spread: every rank of the save wrote data (fully_parallel_save at work).
 * A different load world means a different DP size (or TP/PP) than the save; the losses can
 * only match the uninterrupted run if the resumed run reads the same global samples. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipes/resolve.h"
#include "runtime/checkpoint/ckpt.h"
#include "runtime/checkpoint/reader.h"
#include "runtime/comm/comm.h"
#include "runtime/parallel/config.h"
#include "runtime/parallel/state.h"
#include "runtime/train/train.h"

enum { MAX_KEYS = 64, MAX_ITERS = 64 };

typedef struct run_out {
    float losses[MAX_ITERS];
    int64_t iters;
} run_out;

/* Trains recipe + keys on the first `np` ranks of the world (the others skip it). Returns
 * whether every rank of the run succeeded; diagnostics are printed. */
static bool train_on(int np, const char *recipe, const char **keys, int n, run_out *out) {
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, rank < np ? 0 : MPI_UNDEFINED, rank, &sub);
    int ok = 1;
    if (sub != MPI_COMM_NULL) {
        tr_diags d;
        tr_diags_init(&d);
        tr_config c;
        memset(&c, 0, sizeof c);
        tr_resolve_opts ro = {.recipe = recipe,
                              .overrides = keys,
                              .n_overrides = n,
                              .world = {np, np},
                              .validate = {.check_files = true}};
        tr_parallel_dims dims;
        tr_parallel_state ps;
        memset(&ps, 0, sizeof ps);
        tr_comm *comm = NULL;
        tr_status s = tr_resolve(&ro, &c, &d);
        bool have_ps = false;
        if (s == TR_OK && np > 1) {
            s = tr_parallel_dims_from_config(&c, np, &dims);
            if (s == TR_OK) s = tr_parallel_state_init(&ps, &dims, sub, &d);
            have_ps = s == TR_OK;
            tr_comm_options co = {.reduce_mode = TR_COMM_REDUCE_NATIVE};
            if (s == TR_OK) s = tr_comm_mpi_create(&ps, &co, &d, &comm);
        }
        tr_train_opts o = {.losses = out->losses, .losses_cap = MAX_ITERS, .comm = comm};
        tr_train_result r;
        if (s == TR_OK) s = tr_train_run(&c, &o, &r, &d);
        if (s == TR_OK) out->iters = r.iterations;
        if (d.n_errors) tr_diags_print_text(&d, stderr, false);
        ok = s == TR_OK;
        MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, sub);
        tr_comm_destroy(comm);
        if (have_ps) tr_parallel_state_free(&ps);
        tr_config_free(&c);
        tr_diags_free(&d);
        MPI_Comm_free(&sub);
    }
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return ok;
}

/* The key rows of a fused QKV bias have a gradient that is zero in exact arithmetic, so their
 * values are Adam's normalisation of rounding noise (see tests/equiv/equiv_check.c): left out
 * of the tolerance comparison. Rows per query group: q heads, then K, then V. */
typedef struct qkv_shape {
    int64_t per_group, q_rows, head_dim;
} qkv_shape;

static qkv_shape qkv_of(const char *recipe, const char **keys, int n) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    memset(&c, 0, sizeof c);
    tr_resolve_opts ro = {.recipe = recipe, .overrides = keys, .n_overrides = n, .world = {1, 1}};
    qkv_shape q = {1, 1, 0};
    if (tr_resolve(&ro, &c, &d) == TR_OK) {
        const tr_model_config *m = &c.model;
        int64_t heads = m->num_attention_heads;
        int64_t groups = m->num_query_groups != TR_NULL_INT ? m->num_query_groups : heads;
        int64_t D = m->kv_channels != TR_NULL_INT ? m->kv_channels : m->hidden_size / heads;
        q = (qkv_shape){(heads / groups + 2) * D, heads / groups * D, D};
    }
    tr_config_free(&c);
    tr_diags_free(&d);
    return q;
}

static bool is_key_row(const qkv_shape *q, int64_t i) {
    int64_t in_group = i % q->per_group;
    return in_group >= q->q_rows && in_group < q->q_rows + q->head_dim;
}

/* The latest checkpoint under root, opened; NULL (diagnostics printed) when it cannot be. */
static tr_ckpt_reader *open_latest(const char *root) {
    tr_diags d;
    tr_diags_init(&d);
    char *dir = NULL;
    int64_t it;
    tr_ckpt_reader *r = NULL;
    if (tr_ckpt_find(root, -1, &dir, &it, &d) == TR_OK) tr_ckpt_open(dir, &r, &d);
    if (d.n_errors) tr_diags_print_text(&d, stdout, false);
    free(dir);
    tr_diags_free(&d);
    return r;
}

/* Reads tensor e whole as doubles into *out (malloc'd); returns its element count or -1. */
static int64_t read_whole(tr_ckpt_reader *r, const tr_ckpt_entry *e, double **out) {
    tr_ckpt_slice all = {.ndim = e->ndim};
    int64_t n = 1;
    for (int i = 0; i < e->ndim; i++) {
        all.shape[i] = e->shape[i];
        n *= e->shape[i];
    }
    size_t width = tr_ckpt_dtype_size(e->dtype);
    void *raw = malloc((size_t)n * width);
    *out = malloc((size_t)n * sizeof **out);
    tr_diags d;
    tr_diags_init(&d);
    bool ok = raw && *out &&
              (e->dtype == TR_CKPT_F32 || e->dtype == TR_CKPT_I64 || e->dtype == TR_CKPT_F64) &&
              tr_ckpt_read(r, e->name, e->dtype, &all, raw, &d) == TR_OK;
    if (d.n_errors) tr_diags_print_text(&d, stdout, false);
    tr_diags_free(&d);
    for (int64_t i = 0; ok && i < n; i++)
        (*out)[i] = e->dtype == TR_CKPT_F32   ? (double)((float *)raw)[i]
                    : e->dtype == TR_CKPT_F64 ? ((double *)raw)[i]
                                              : (double)((int64_t *)raw)[i];
    free(raw);
    return ok ? n : -1;
}

/* Every tensor of the reference's final checkpoint against the run's. exact: bitwise (as
 * doubles converted from the stored values, which is exact), all tensors; otherwise the model
 * tensors within relative tolerance and the integer state equal (optimizer moments are compared
 * by the continued training they drive). Returns the largest relative error. */
static double compare_state(const char *run_root, const char *ref_root, bool exact,
                            const qkv_shape *qkv) {
    tr_ckpt_reader *run = open_latest(run_root), *ref = open_latest(ref_root);
    double worst = run && ref ? 0.0 : INFINITY;
    const char *worst_name = "";
    const tr_ckpt_manifest *mr = ref ? tr_ckpt_reader_manifest(ref) : NULL;
    int compared = 0;
    for (int t = 0; mr && t < mr->n_tensors; t++) {
        const tr_ckpt_entry *e = &mr->tensors[t];
        const tr_ckpt_entry *f = tr_ckpt_manifest_find(tr_ckpt_reader_manifest(run), e->name);
        bool model = strcmp(tr_ckpt_tensor_kind(e->name), "model") == 0;
        bool counter = e->dtype == TR_CKPT_I64;
        if (!exact && !model && !counter) continue;
        double *a = NULL, *b = NULL, err = INFINITY;
        int64_t n = f ? read_whole(ref, e, &a) : -1, m = f ? read_whole(run, f, &b) : -1;
        if (n >= 0 && n == m) {
            bool qkv_bias = !exact && strstr(e->name, "linear_qkv.bias") != NULL;
            double diff = 0.0, scale = 0.0;
            for (int64_t i = 0; i < n; i++) {
                if (qkv_bias && is_key_row(qkv, i)) continue;
                double d = fabs(a[i] - b[i]);
                if (!(d <= diff)) diff = isnan(d) ? INFINITY : d;
                if (fabs(a[i]) > scale) scale = fabs(a[i]);
            }
            err = exact || counter ? (diff == 0.0 ? 0.0 : INFINITY)
                                   : (scale > 0.0 ? diff / scale : diff);
        }
        compared++;
        if (getenv("CKPT_VERBOSE")) printf("  %-60s %.3g\n", e->name, err);
        if (!(err <= worst)) {
            worst = err;
            worst_name = e->name;
        }
        free(a);
        free(b);
    }
    printf("final state: %d tensors compared, max rel err %.3g (%s)\n", compared, worst,
           worst_name);
    if (run) tr_ckpt_close(run);
    if (ref) tr_ckpt_close(ref);
    return compared > 0 ? worst : INFINITY;
}

/* fully_parallel_save: every rank's shard file holds some of the data. */
static bool spread(const char *root) {
    tr_ckpt_reader *r = open_latest(root);
    if (!r) return false;
    const tr_ckpt_manifest *m = tr_ckpt_reader_manifest(r);
    bool all = m->n_files == m->world;
    for (int i = 0; i < m->n_files; i++) {
        printf("%s: %llu bytes\n", m->files[i].name, (unsigned long long)m->files[i].bytes);
        all = all && m->files[i].bytes > 0;
    }
    tr_ckpt_close(r);
    return all;
}

/* losses: the interrupted run's (first `stop`) then the resumed run's. Returns the largest
 * relative error (exact: 0 when bitwise equal, else infinity). */
static double compare_losses(const float *losses, int64_t iters, const run_out *ref, bool exact) {
    if (iters != ref->iters) {
        printf("%lld iterations, the uninterrupted run %lld\n", (long long)iters,
               (long long)ref->iters);
        return INFINITY;
    }
    double worst = 0.0;
    for (int64_t i = 0; i < iters; i++) {
        double e = fabs((double)losses[i] - ref->losses[i]) / fabs((double)ref->losses[i]);
        printf("iteration %lld: loss %.9g (uninterrupted %.9g), rel err %.3g\n", (long long)i + 1,
               losses[i], ref->losses[i], e);
        if (exact) e = memcmp(&losses[i], &ref->losses[i], sizeof(float)) ? INFINITY : 0.0;
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    printf("losses: max rel err %.3g\n", worst);
    return worst;
}

static int usage(void) {
    fprintf(
        stderr,
        "usage: ckpt_resume [--exact] [--expect-spread] [--tol X] --stop S --np-save A --np-load B "
        "RECIPE KEY=VALUE... -- SAVE_LAYOUT... -- LOAD_LAYOUT...\n");
    MPI_Finalize();
    return 2;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    double tol = 1e-5;
    bool exact = false, expect_spread = false;
    int stop = 0, np_save = world, np_load = world;
    int a = 1;
    for (; a < argc && strncmp(argv[a], "--", 2) == 0 && argv[a][2]; a++) {
        if (strcmp(argv[a], "--exact") == 0)
            exact = true;
        else if (strcmp(argv[a], "--expect-spread") == 0)
            expect_spread = true;
        else if (strcmp(argv[a], "--tol") == 0 && a + 1 < argc)
            tol = atof(argv[++a]);
        else if (strcmp(argv[a], "--stop") == 0 && a + 1 < argc)
            stop = atoi(argv[++a]);
        else if (strcmp(argv[a], "--np-save") == 0 && a + 1 < argc)
            np_save = atoi(argv[++a]);
        else if (strcmp(argv[a], "--np-load") == 0 && a + 1 < argc)
            np_load = atoi(argv[++a]);
        else
            return usage();
    }
    if (a >= argc || stop < 1 || np_save > world || np_load > world) return usage();
    const char *recipe = argv[a++];
    /* keys: COMMON, then the extra keys of each run */
    const char *common[MAX_KEYS], *save_keys[MAX_KEYS], *load_keys[MAX_KEYS];
    int n_common = 0, n_save = 0, n_load = 0, group = 0;
    for (; a < argc; a++) {
        if (strcmp(argv[a], "--") == 0) {
            group++;
            continue;
        }
        if (group == 0 && n_common < MAX_KEYS / 2) common[n_common++] = argv[a];
        if (group == 1 && n_save < MAX_KEYS / 2) save_keys[n_save++] = argv[a];
        if (group == 2 && n_load < MAX_KEYS / 2) load_keys[n_load++] = argv[a];
    }
    char dir[256] = "";
    if (rank == 0) {
        char tmpl[] = "/tmp/trestle_ckpt_resume.XXXXXX";
        if (mkdtemp(tmpl)) snprintf(dir, sizeof dir, "%s", tmpl);
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (!dir[0]) return usage();
    char save_kv[320], load_kv[320], ref_kv[320], exit_kv[64], run_root[300], ref_root[300];
    snprintf(run_root, sizeof run_root, "%s/run", dir);
    snprintf(ref_root, sizeof ref_root, "%s/ref", dir);
    snprintf(save_kv, sizeof save_kv, "checkpoint.save=%s", run_root);
    snprintf(load_kv, sizeof load_kv, "checkpoint.load=%s", run_root);
    snprintf(ref_kv, sizeof ref_kv, "checkpoint.save=%s", ref_root);
    snprintf(exit_kv, sizeof exit_kv, "train.exit_interval=%d", stop);

    const char *keys[MAX_KEYS + 4];
    int n = 0;
    run_out ref = {0}, first = {0}, second = {0};
    /* The uninterrupted reference (it saves its final state to compare with). */
    for (int i = 0; i < n_common; i++) keys[n++] = common[i];
    if (exact) /* the save layout without its checkpoint settings */
        for (int i = 0; i < n_save; i++)
            if (strncmp(save_keys[i], "checkpoint.", 11) != 0) keys[n++] = save_keys[i];
    keys[n++] = ref_kv;
    bool ok = train_on(exact ? np_save : 1, recipe, keys, n, &ref);
    /* Interrupted under the save layout. */
    n = 0;
    for (int i = 0; i < n_common; i++) keys[n++] = common[i];
    for (int i = 0; i < n_save; i++) keys[n++] = save_keys[i];
    keys[n++] = save_kv;
    keys[n++] = exit_kv;
    if (ok) ok = train_on(np_save, recipe, keys, n, &first);
    int spread_ok = !expect_spread || (rank == 0 && ok && spread(run_root));
    MPI_Bcast(&spread_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    /* Resumed under the load layout; it saves its final state too. */
    n = 0;
    for (int i = 0; i < n_common; i++) keys[n++] = common[i];
    for (int i = 0; i < n_load; i++) keys[n++] = load_keys[i];
    keys[n++] = load_kv;
    keys[n++] = save_kv;
    if (ok) ok = train_on(np_load, recipe, keys, n, &second);

    int code = 1;
    if (ok && rank == 0) {
        float losses[MAX_ITERS];
        int64_t iters = second.iters < MAX_ITERS ? second.iters : MAX_ITERS;
        for (int64_t i = 0; i < iters; i++)
            losses[i] = i < stop ? first.losses[i] : second.losses[i];
        printf("interrupted after %lld iterations (%d ranks), resumed to %lld (%d ranks)\n",
               (long long)first.iters, np_save, (long long)second.iters, np_load);
        qkv_shape qkv = qkv_of(recipe, common, n_common);
        double el = first.iters == stop ? compare_losses(losses, iters, &ref, exact) : INFINITY;
        double es = compare_state(run_root, ref_root, exact, &qkv);
        double err = el > es ? el : es;
        if (!spread_ok) printf("fully_parallel_save: some rank wrote nothing\n");
        code = err <= (exact ? 0.0 : tol) && spread_ok ? 0 : 1;
        printf("%s: resumed run %s the uninterrupted one (%s)\n", code ? "FAIL" : "OK",
               code ? "differs from" : "equals", exact ? "bitwise" : "tolerance");
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) printf("could not remove %s\n", dir);
    }
    MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return code;
}
