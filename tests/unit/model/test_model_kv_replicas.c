/* TP larger than the query groups: 4 TP ranks (threads over a shared-memory comm backend, so no
 * MPI and leak-checked under ASan) run a Llama with 4 heads in 2 query groups, each rank holding
 * one query head and a copy of its group's key and value heads. Oracles: the one-rank model's
 * gradient (every element of every shard, at its logical index) and finite differences of the
 * TP model's own loss along a direction on the key and value rows of the logical QKV weight. The
 * key-value rows must differ from the oracle before tr_model_reduce_kv_grad (each copy holds its
 * own query head's part) and after a sum over the whole TP group (the wrong ranks), and equal it
 * after the reduction; the gradient norm with the key-value copies left out on all but a group's
 * first rank equals the one-rank norm. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "runtime/distributed/grad_clip.h"
#include "runtime/model/tensor_parallel.h"
#include "tests/unit/model/tiny_models.h"

enum { TP = 4, BATCH = 2, SEQ = 8 };

/* Every collective of the TP group is an all-reduce of f32 or f64 (sum or max): each rank
 * publishes a copy of its input, waits for all, reduces in rank order, waits again. */
typedef struct shared_tp {
    pthread_barrier_t bar;
    const void *in[TP];
} shared_tp;

typedef struct rank_comm {
    tr_comm c;
    shared_tp *sh;
    int rank;
} rank_comm;

static int sh_size(const tr_comm *c, int g) {
    (void)c;
    return g == TR_GROUP_TP || g == TR_COMM_WORLD ? TP : 1;
}
static int sh_rank(const tr_comm *c, int g) {
    const rank_comm *r = (const rank_comm *)c;
    return g == TR_GROUP_TP || g == TR_COMM_WORLD ? r->rank : 0;
}
static int sh_world(const tr_comm *c, int g, int r) {
    (void)c, (void)g;
    return r;
}
static tr_status sh_start(tr_comm *c, const tr_comm_call *call, tr_comm_request *req) {
    (void)req;
    rank_comm *r = (rank_comm *)c;
    if (call->kind != TR_COMM_ALL_REDUCE || call->group != TR_GROUP_TP ||
        (call->dtype != TR_COMM_F32 && call->dtype != TR_COMM_F64))
        return TR_ERR_INTERNAL;
    size_t es = tr_comm_dtype_size(call->dtype), n = call->count;
    void *mine = malloc(n * es + 1);
    if (!mine) return TR_ERR_NOMEM;
    memcpy(mine, call->send ? call->send : call->recv, n * es);
    r->sh->in[r->rank] = mine;
    pthread_barrier_wait(&r->sh->bar);
    /* Sums and maxima in rank order, in the element type. */
    for (size_t i = 0; i < n; i++) {
        if (call->dtype == TR_COMM_F32) {
            float f = ((const float *)r->sh->in[0])[i];
            for (int k = 1; k < TP; k++) {
                float v = ((const float *)r->sh->in[k])[i];
                f = call->op == TR_COMM_MAX ? (v > f ? v : f) : f + v;
            }
            ((float *)call->recv)[i] = f;
        } else {
            double f = ((const double *)r->sh->in[0])[i];
            for (int k = 1; k < TP; k++) {
                double v = ((const double *)r->sh->in[k])[i];
                f = call->op == TR_COMM_MAX ? (v > f ? v : f) : f + v;
            }
            ((double *)call->recv)[i] = f;
        }
    }
    pthread_barrier_wait(&r->sh->bar);
    free(mine);
    return TR_OK;
}
static tr_status sh_test(tr_comm *c, tr_comm_request *req, bool *done) {
    (void)c, (void)req;
    *done = true;
    return TR_OK;
}
static tr_status sh_wait(tr_comm *c, tr_comm_request *req) {
    (void)c, (void)req;
    return TR_OK;
}
static void sh_release(tr_comm *c, tr_comm_request *req) {
    (void)c, (void)req;
}
static void sh_abort(tr_comm *c, int code) {
    (void)c;
    exit(code);
}
static void sh_destroy(tr_comm *c) {
    (void)c;
}
static const tr_comm_backend k_shared = {"shared", sh_size, sh_rank,    sh_world, sh_start,
                                         sh_test,  sh_wait, sh_release, sh_abort, sh_destroy};

static tr_model_spec spec(void) {
    tr_model_spec s = tr_test_llama_spec(SEQ);
    s.num_layers = 1;
    s.vocab = 32; /* splits over 4 ranks */
    s.bias_qkv = 1;
    return s;
}

static void make_batch(int32_t *ids, int32_t *tg, int n, int vocab) {
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)((i * 7 + 3) % vocab);
        tg[i] = (int32_t)((i * 5 + 1) % vocab);
    }
}

/* +-1 on the key and value rows of the logical QKV weight (rows grouped per query group: its
 * query heads, then K, then V), 0 on the query rows; from the logical index, so the same on
 * every rank. */
static float dir_at(const tr_model *m, int64_t logical) {
    const tr_model_spec *f = &m->full;
    int64_t per_group = (f->heads / f->groups + 2) * f->head_dim;
    int64_t row = logical / f->hidden;
    if (row % per_group < (int64_t)(f->heads / f->groups) * f->head_dim) return 0.0f;
    return ((logical * 2654435761u) >> 7) & 1 ? 1.0f : -1.0f;
}

typedef struct rank_run {
    int rank;
    shared_tp *sh;
    tr_model_spec s;
    const float *ref; /* the one-rank gradient, flat (its own layout) */
    const tr_model *ref_model;
    /* Results: the worst relative error of the shard's gradient against the oracle, per
     * parameter class, before the reduction, after a whole-TP sum (wrong ranks) and after
     * tr_model_reduce_kv_grad; the counted sum of squares; the gradient and the loss change
     * along the QKV direction. */
    double kv_partial, kv_all_tp, err_reduced;
    double sum_sq, proj, loss_plus, loss_minus;
    int64_t kv_numel;
    tr_status st;
} rank_run;

static const float EPS = 3e-3f;

/* Relative error (to the oracle tensor's largest value) of this rank's elements of tensor p,
 * only those inside its key-value copy when kv_only. */
static double shard_err(const tr_model *m, const tr_param_info *p, const float *g,
                        const tr_model *ref_model, const float *ref, bool kv_only) {
    const tr_param_info *q = tr_model_find_param(ref_model, p->name);
    if (!q) return INFINITY;
    double scale = 0.0, worst = 0.0;
    for (int64_t e = 0; e < q->numel; e++)
        if (fabs((double)ref[q->offset + e]) > scale) scale = fabs((double)ref[q->offset + e]);
    int64_t off = 0, n = 0;
    tr_param_kv_range(p, &off, &n);
    for (int64_t e = 0; e < p->numel; e++) {
        if (kv_only && (e < off || e >= off + n)) continue;
        double d = fabs((double)g[e] - (double)ref[q->offset + tr_model_logical_index(m, p, e)]);
        if (!(d <= worst)) worst = d;
    }
    return scale > 0.0 ? worst / scale : worst;
}

static void shift_qkv(tr_model *m, const tr_param_info *p, float by) {
    for (int64_t e = 0; e < p->numel; e++)
        m->params[p->offset + e] += by * dir_at(m, tr_model_logical_index(m, p, e));
    tr_model_params_changed(m);
}

static tr_status run_rank(rank_run *r) {
    tr_diags d;
    tr_diags_init(&d);
    rank_comm rc = {.sh = r->sh, .rank = r->rank};
    rc.c.backend = &k_shared;
    rc.c.timeout_s = 10;
    rc.c.diags = &d;
    tr_model m;
    TR_TRY(tr_model_create(&m, &r->s, (tr_tp_shard){r->rank, TP}, tr_ops_cpu(), BATCH));
    m.comm = &rc.c;
    tr_status st = tr_model_init_weights(&m, 7);
    int n = BATCH * SEQ;
    int32_t ids[BATCH * SEQ], tg[BATCH * SEQ];
    make_batch(ids, tg, n, r->s.vocab);
    float loss = 0.0f;
    if (st == TR_OK) st = tr_model_forward(&m, ids, tg, &loss);
    if (st == TR_OK) st = tr_model_backward(&m, 1.0f);
    float *saved = malloc((size_t)m.n_params * sizeof *saved);
    if (!saved) st = TR_ERR_NOMEM;
    if (st == TR_OK) memcpy(saved, m.grads, (size_t)m.n_params * sizeof *saved);
    r->kv_partial = r->kv_all_tp = INFINITY;
    r->err_reduced = 0.0;
    const tr_param_info *qkv_w =
        tr_model_find_param(&m, "decoder.layers.0.self_attention.linear_qkv.weight");
    for (int i = 0; st == TR_OK && i < m.n_info; i++) {
        const tr_param_info *p = &m.info[i];
        int64_t off = 0, kn = 0;
        tr_param_kv_range(p, &off, &kn);
        float *g = m.grads + p->offset;
        if (kn > 0) {
            r->kv_numel += kn;
            double e = shard_err(&m, p, g, r->ref_model, r->ref, true);
            if (e < r->kv_partial) r->kv_partial = e;
            /* The wrong ranks: the copies summed over the whole TP group. */
            st = tr_tp_all_reduce(&m, g + off, kn);
            e = shard_err(&m, p, g, r->ref_model, r->ref, true);
            if (e < r->kv_all_tp) r->kv_all_tp = e;
            memcpy(g, saved + p->offset, (size_t)p->numel * sizeof *g);
        }
        if (st == TR_OK) st = tr_model_reduce_kv_grad(&m, i);
        double e = shard_err(&m, p, g, r->ref_model, r->ref, false);
        if (!(e <= r->err_reduced)) r->err_reduced = e;
    }
    /* The gradient norm as the trainer counts it: TP-replicated tensors on rank 0, key-value
     * copies on each group's first rank. */
    tr_grad_param *gp = calloc((size_t)m.n_info, sizeof *gp);
    tr_grad_layout L;
    memset(&L, 0, sizeof L);
    if (!gp && st == TR_OK) st = TR_ERR_NOMEM;
    for (int i = 0; st == TR_OK && i < m.n_info; i++) {
        snprintf(gp[i].name, sizeof gp[i].name, "%s", m.info[i].name);
        gp[i].numel = m.info[i].numel;
        gp[i].tp_replicated = m.info[i].split_dim < 0;
        if (m.info[i].kv_rep > 1 && r->rank % m.info[i].kv_rep != 0)
            tr_param_kv_range(&m.info[i], &gp[i].uncounted_off, &gp[i].uncounted_numel);
    }
    tr_grad_layout_options lo = tr_grad_layout_defaults(1, 0, false);
    if (st == TR_OK) st = tr_grad_layout_build(&L, gp, m.n_info, &lo, NULL);
    /* The layout packs the parameters in reverse order; copy the gradients into it. */
    float *packed = st == TR_OK ? calloc((size_t)L.numel, sizeof *packed) : NULL;
    uint8_t counted[64];
    tr_grad_owned owned;
    memset(&owned, 0, sizeof owned);
    if (st == TR_OK && (!packed || m.n_info > 64)) st = TR_ERR_NOMEM;
    for (int i = 0; st == TR_OK && i < m.n_info; i++)
        memcpy(packed + L.params[i].offset, m.grads + m.info[i].offset,
               (size_t)m.info[i].numel * sizeof *packed);
    if (st == TR_OK) st = tr_grad_owned_build(&owned, &L, 0);
    if (st == TR_OK) {
        tr_grad_counted_mask(&L, r->rank, counted);
        st = tr_grad_local_sum_squares(&L, &owned, packed, counted, tr_ops_cpu(), &r->sum_sq);
    }
    /* Finite differences of the TP model's loss along the QKV direction; the gradient along
     * it counts each logical element once (copies on a group's first rank). */
    r->proj = 0.0;
    if (st == TR_OK && qkv_w) {
        int64_t off = 0, kn = 0;
        tr_param_kv_range(qkv_w, &off, &kn);
        bool copy = r->rank % qkv_w->kv_rep != 0;
        for (int64_t e = 0; e < qkv_w->numel; e++)
            if (!copy || e < off || e >= off + kn)
                r->proj += (double)m.grads[qkv_w->offset + e] *
                           dir_at(&m, tr_model_logical_index(&m, qkv_w, e));
        shift_qkv(&m, qkv_w, EPS);
        st = tr_model_forward(&m, ids, tg, &loss);
        r->loss_plus = loss;
        shift_qkv(&m, qkv_w, -2.0f * EPS);
        if (st == TR_OK) st = tr_model_forward(&m, ids, tg, &loss);
        r->loss_minus = loss;
    } else if (st == TR_OK) {
        st = TR_ERR_INTERNAL;
    }
    tr_grad_owned_free(&owned);
    free(packed);
    if (L.params) tr_grad_layout_free(&L);
    free(gp);
    free(saved);
    tr_model_free(&m);
    if (d.n) tr_diags_print_text(&d, stderr, false);
    tr_diags_free(&d);
    return st;
}

static void *rank_main(void *arg) {
    rank_run *r = arg;
    r->st = run_rank(r);
    return NULL;
}

static void test_kv_replicas_match_one_rank(void) {
    tr_model_spec s = spec();
    tr_model ref;
    CHECK_INT_EQ(tr_model_create(&ref, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), BATCH), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&ref, 7), TR_OK);
    int32_t ids[BATCH * SEQ], tg[BATCH * SEQ];
    make_batch(ids, tg, BATCH * SEQ, s.vocab);
    float loss = 0.0f;
    CHECK_INT_EQ(tr_model_forward(&ref, ids, tg, &loss), TR_OK);
    CHECK_INT_EQ(tr_model_backward(&ref, 1.0f), TR_OK);
    double ref_sq = 0.0;
    for (int i = 0; i < ref.n_info; i++)
        for (int64_t e = 0; e < ref.info[i].numel; e++) {
            double g = ref.grads[ref.info[i].offset + e];
            ref_sq += g * g;
        }
    shared_tp sh;
    memset(&sh, 0, sizeof sh);
    pthread_barrier_init(&sh.bar, NULL, TP);
    rank_run runs[TP];
    pthread_t th[TP];
    for (int k = 0; k < TP; k++) {
        runs[k] = (rank_run){.rank = k, .sh = &sh, .s = s, .ref = ref.grads, .ref_model = &ref};
        CHECK_INT_EQ(pthread_create(&th[k], NULL, rank_main, &runs[k]), 0);
    }
    for (int k = 0; k < TP; k++) pthread_join(th[k], NULL);
    pthread_barrier_destroy(&sh.bar);
    double sum_sq = 0.0, proj = 0.0;
    for (int k = 0; k < TP; k++) {
        const rank_run *r = &runs[k];
        CHECK_INT_EQ(r->st, TR_OK);
        printf("  rank %d: %lld key-value elements; their gradient against the one-rank "
               "run: unreduced %.3g, summed over all TP %.3g; every element after the "
               "reduction %.3g\n",
               k, (long long)r->kv_numel, r->kv_partial, r->kv_all_tp, r->err_reduced);
        CHECK(r->kv_numel > 0);
        CHECK(r->kv_partial > 1e-2);
        CHECK(r->kv_all_tp > 1e-2);
        CHECK(r->err_reduced <= 1e-5);
        CHECK(r->loss_plus == runs[0].loss_plus && r->loss_minus == runs[0].loss_minus);
        sum_sq += r->sum_sq;
        proj += r->proj;
    }
    double fd = ((double)runs[0].loss_plus - (double)runs[0].loss_minus) / (2.0 * EPS);
    printf("  gradient norm^2: TP %.9g, one rank %.9g; along the QKV direction: %.6g, finite "
           "differences %.6g\n",
           sum_sq, ref_sq, proj, fd);
    CHECK_CLOSE(sum_sq, ref_sq, 1e-5, 0.0);
    CHECK_CLOSE(proj, fd, 5e-3, 1e-4);
    tr_model_free(&ref);
}

/* Spec and layout: TP 4 on 2 groups gives each rank one query head and one group, the logical
 * QKV tensor its unsharded shape, and refuses a TP that is neither a divisor nor a multiple of
 * the groups dividing the heads. */
static void test_kv_layout(void) {
    tr_model_spec s = spec();
    tr_model_part whole = {0, s.num_layers, true, true, 1};
    tr_param_info *info = NULL;
    int n = 0;
    int64_t numel = 0;
    CHECK_INT_EQ(tr_model_param_list(&s, (tr_tp_shard){3, TP}, &whole, 1, &info, &n, &numel),
                 TR_OK);
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (!strstr(info[i].name, "linear_qkv")) {
            CHECK_INT_EQ(info[i].kv_rep, 0);
            continue;
        }
        found++;
        CHECK_INT_EQ(info[i].kv_rep, 2);
        CHECK_INT_EQ(info[i].kv_q, s.head_dim);
        CHECK_INT_EQ(info[i].kv_len, 2 * s.head_dim);
        int full = (s.heads + 2 * s.groups) * s.head_dim;
        CHECK_INT_EQ(info[i].split_dim == 0 ? info[i].full_rows : info[i].full_cols, full);
    }
    CHECK_INT_EQ(found, 2);
    free(info);
    CHECK_INT_EQ(tr_model_kv_replicas(&s, (tr_tp_shard){0, 4}), 2);
    CHECK_INT_EQ(tr_model_kv_replicas(&s, (tr_tp_shard){0, 2}), 1);
    s.heads = 6;
    s.groups = 3;
    CHECK_INT_EQ(tr_model_param_list(&s, (tr_tp_shard){0, 2}, &whole, 1, &info, &n, &numel),
                 TR_ERR_INVALID);
    CHECK(info == NULL);
}

TR_TEST_MAIN(TR_TEST(test_kv_replicas_match_one_rank), TR_TEST(test_kv_layout))
