/* The CPU MoE ops (kernels/cpu/moe.c) against independent references written here: top-k by
 * sorting (value descending, then index ascending) over scores computed in double, group-limited
 * routing by sorting the groups, the probabilities in double; the top-k backward against central
 * differences in double of those probabilities with the choice held fixed; the permutations
 * against scatter-form loops (assignment side where the op works on the token side, and the
 * other way round) summed in double. Also the argument checks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"
#include "tests/unit/harness.h"

static const tr_ops *ops;
static uint64_t g_rng = 88172645463325252ull;

static float urand(float lo, float hi) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return lo + (hi - lo) * (float)((g_rng >> 40) * (1.0 / 16777216.0));
}

static double rel_l2(const float *got, const double *want, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = got[i] - want[i];
        num += e * e;
        den += want[i] * want[i];
    }
    return sqrt(num / (den > 0.0 ? den : 1.0));
}

/* ---- reference routing ------------------------------------------------------------------- */

static const double *g_sort_v;
static int by_value_then_index(const void *pa, const void *pb) {
    int a = *(const int *)pa, b = *(const int *)pb;
    if (g_sort_v[a] != g_sort_v[b]) return g_sort_v[a] > g_sort_v[b] ? -1 : 1;
    return a - b;
}

/* The k best of v[0..n) with allowed (NULL: all), by sorting. */
static void ref_topk(const double *v, const int *allowed, int n, int k, int *out) {
    int *order = malloc((size_t)n * sizeof *order), m = 0;
    for (int i = 0; i < n; i++)
        if (!allowed || allowed[i]) order[m++] = i;
    g_sort_v = v;
    qsort(order, (size_t)m, sizeof *order, by_value_then_index);
    for (int j = 0; j < k; j++) out[j] = order[j];
    free(order);
}

static double ref_score(int fn, double x) {
    if (fn == TR_ROUTE_SIGMOID) return 1.0 / (1.0 + exp(-x));
    return sqrt(log1p(exp(x)));
}

static void ref_softmax(const double *l, int n, double *p) {
    double mx = l[0], s = 0.0;
    for (int i = 1; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < n; i++) s += exp(l[i] - mx);
    for (int i = 0; i < n; i++) p[i] = exp(l[i] - mx) / s;
}

static void ref_select(const tr_route_desc *d, const double *r, int *idx) {
    int E = d->experts, k = d->topk;
    if (d->groups <= 0) {
        ref_topk(r, NULL, E, k, idx);
        return;
    }
    int G = d->groups, per = E / G, pick = k / d->group_topk, tmp[TR_ROUTE_MAX_EXPERTS];
    double gs[TR_ROUTE_MAX_EXPERTS];
    for (int g = 0; g < G; g++) {
        ref_topk(r + g * per, NULL, per, pick, tmp);
        gs[g] = 0.0;
        for (int j = 0; j < pick; j++) gs[g] += r[g * per + tmp[j]];
    }
    int gsel[TR_ROUTE_MAX_EXPERTS], allowed[TR_ROUTE_MAX_EXPERTS] = {0};
    ref_topk(gs, NULL, G, d->group_topk, gsel);
    for (int j = 0; j < d->group_topk; j++)
        for (int e = 0; e < per; e++) allowed[gsel[j] * per + e] = 1;
    ref_topk(r, allowed, E, k, idx);
}

/* The probabilities of a token with the choice idx given (double). */
static void ref_prob(const tr_route_desc *d, const double *l, const int *idx, double *p) {
    int E = d->experts, k = d->topk;
    double sc[TR_ROUTE_MAX_EXPERTS] = {0}, sel[TR_ROUTE_MAX_EXPERTS] = {0};
    if (d->score == TR_ROUTE_SOFTMAX && d->pre_softmax) {
        ref_softmax(l, E, sc);
        for (int j = 0; j < k; j++) p[j] = sc[idx[j]];
    } else if (d->score == TR_ROUTE_SOFTMAX) {
        for (int j = 0; j < k; j++) sel[j] = l[idx[j]];
        ref_softmax(sel, k, p);
    } else {
        double sum = 0.0;
        for (int j = 0; j < k; j++) sum += sel[j] = ref_score(d->score, l[idx[j]]);
        for (int j = 0; j < k; j++) p[j] = k > 1 ? sel[j] / (sum + 1e-20) : sel[j];
    }
    for (int j = 0; j < k; j++) p[j] *= d->topk_scale;
}

static void ref_route(const tr_route_desc *d, const double *l, int *idx, double *p) {
    int E = d->experts;
    double r[TR_ROUTE_MAX_EXPERTS];
    for (int e = 0; e < E; e++) {
        if (d->score == TR_ROUTE_SOFTMAX)
            r[e] = l[e];
        else
            r[e] = ref_score(d->score, l[e]) + (d->bias ? d->bias[e] : 0.0);
    }
    if (d->score == TR_ROUTE_SOFTMAX && d->pre_softmax) ref_softmax(l, E, r);
    ref_select(d, r, idx);
    ref_prob(d, l, idx, p);
}

static void check_route(const char *name, tr_route_desc d, int ties) {
    int T = d.tokens, E = d.experts, k = d.topk;
    float *l = malloc((size_t)T * E * sizeof *l), *prob = malloc((size_t)T * k * sizeof *prob);
    float *g = malloc((size_t)T * k * sizeof *g), *dl = malloc((size_t)T * E * sizeof *dl);
    double *pref = calloc((size_t)T * k, sizeof *pref), *dref = calloc((size_t)T * E, sizeof *dref);
    int32_t *idx = malloc((size_t)T * k * sizeof *idx);
    int *iref = malloc((size_t)T * k * sizeof *iref);
    for (int i = 0; i < T * E; i++) l[i] = ties ? roundf(urand(-2.5f, 2.5f)) : urand(-4, 4);
    for (int i = 0; i < T * k; i++) g[i] = urand(-1, 1);
    CHECK(ops->moe_topk(idx, prob, l, &d) == TR_OK);
    CHECK(ops->moe_topk_bwd(dl, g, l, idx, &d) == TR_OK);
    int idx_diff = 0;
    double ld[TR_ROUTE_MAX_EXPERTS], pp[TR_ROUTE_MAX_EXPERTS], pm[TR_ROUTE_MAX_EXPERTS];
    for (int t = 0; t < T; t++) {
        for (int e = 0; e < E; e++) ld[e] = l[t * E + e];
        ref_route(&d, ld, iref + t * k, pref + t * k);
        for (int j = 0; j < k; j++) idx_diff += iref[t * k + j] != idx[t * k + j];
        /* d/dl of sum_j g_j p_j with the op's choice held */
        int held[TR_ROUTE_MAX_EXPERTS];
        for (int j = 0; j < k; j++) held[j] = idx[t * k + j];
        for (int e = 0; e < E; e++) {
            const double h = 1e-5, keep = ld[e];
            ld[e] = keep + h;
            ref_prob(&d, ld, held, pp);
            ld[e] = keep - h;
            ref_prob(&d, ld, held, pm);
            ld[e] = keep;
            double s = 0.0;
            for (int j = 0; j < k; j++) s += g[t * k + j] * (pp[j] - pm[j]) / (2 * h);
            dref[t * E + e] = s;
        }
    }
    double ep = rel_l2(prob, pref, (size_t)T * k), ed = rel_l2(dl, dref, (size_t)T * E);
    printf("  %-36s idx diffs %d, prob rel %.2e, dlogits rel %.2e\n", name, idx_diff, ep, ed);
    CHECK_INT_EQ(idx_diff, 0);
    CHECK(ep < 1e-6);
    CHECK(ed < 1e-5);
    free(l), free(prob), free(g), free(dl), free(pref), free(dref), free(idx), free(iref);
}

static void test_topk(void) {
    float bias[32];
    for (int e = 0; e < 32; e++) bias[e] = urand(-0.3f, 0.3f);
    const int T = 64;
    typedef struct {
        const char *name;
        tr_route_desc d;
        int ties;
    } rc;
    rc cases[] = {
        {"softmax pre", {T, 16, 4, TR_ROUTE_SOFTMAX, 1, 0, 0, 1.0f, NULL}, 0},
        {"softmax post", {T, 16, 2, TR_ROUTE_SOFTMAX, 0, 0, 0, 1.0f, NULL}, 0},
        {"softmax post, ties", {T, 12, 3, TR_ROUTE_SOFTMAX, 0, 0, 0, 1.0f, NULL}, 1},
        {"softmax pre, k=1, scale", {T, 8, 1, TR_ROUTE_SOFTMAX, 1, 0, 0, 2.0f, NULL}, 0},
        {"softmax post, groups", {T, 16, 4, TR_ROUTE_SOFTMAX, 0, 4, 2, 1.0f, NULL}, 0},
        {"sigmoid, bias, groups, scale", {T, 32, 8, TR_ROUTE_SIGMOID, 0, 8, 4, 2.5f, bias}, 0},
        {"sigmoid, ties", {T, 16, 4, TR_ROUTE_SIGMOID, 0, 0, 0, 1.0f, NULL}, 1},
        {"sigmoid, k=1, bias", {T, 16, 1, TR_ROUTE_SIGMOID, 0, 0, 0, 1.0f, bias}, 0},
        {"sqrtsoftplus, groups", {T, 24, 2, TR_ROUTE_SQRTSOFTPLUS, 0, 6, 2, 1.0f, NULL}, 0},
        {"sqrtsoftplus, k=1", {T, 8, 1, TR_ROUTE_SQRTSOFTPLUS, 0, 0, 0, 1.0f, NULL}, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_route(cases[i].name, cases[i].d, cases[i].ties);
}

static void test_topk_checks(void) {
    float l[64] = {0}, p[8], b[8] = {0};
    int32_t idx[8];
    tr_route_desc ok = {1, 8, 2, TR_ROUTE_SOFTMAX, 0, 0, 0, 1.0f, NULL}, d;
    CHECK(ops->moe_topk(idx, p, l, &ok) == TR_OK);
    d = ok, d.bias = b; /* a selection bias with softmax */
    CHECK(ops->moe_topk(idx, p, l, &d) == TR_ERR_INVALID);
    d = ok, d.topk = 9;
    CHECK(ops->moe_topk(idx, p, l, &d) == TR_ERR_INVALID);
    d = ok, d.experts = TR_ROUTE_MAX_EXPERTS + 1;
    CHECK(ops->moe_topk(idx, p, l, &d) == TR_ERR_INVALID);
    d = ok, d.score = 3;
    CHECK(ops->moe_topk(idx, p, l, &d) == TR_ERR_INVALID);
    d = ok, d.groups = 3, d.group_topk = 1; /* 3 does not divide 8 */
    CHECK(ops->moe_topk(idx, p, l, &d) == TR_ERR_INVALID);
    d = ok, d.topk = 4, d.groups = 4, d.group_topk = 1; /* 4 per group from groups of 2 */
    CHECK(ops->moe_topk(idx, p, l, &d) == TR_ERR_INVALID);
    d = ok, d.topk = 3, d.groups = 4, d.group_topk = 2; /* 2 does not divide 3 */
    CHECK(ops->moe_topk(idx, p, l, &d) == TR_ERR_INVALID);
    CHECK(ops->moe_topk(NULL, p, l, &ok) == TR_ERR_INVALID);
    CHECK(ops->moe_topk_bwd(l, p, l, NULL, &ok) == TR_ERR_INVALID);
    CHECK(ops->moe_topk(idx, p, l, NULL) == TR_ERR_INVALID);
    d = ok, d.tokens = 0; /* nothing to do: no pointers needed */
    CHECK(ops->moe_topk(NULL, NULL, NULL, &d) == TR_OK);
}

/* ---- permutation ------------------------------------------------------------------------- */

enum { PT = 19, PK = 2, PE = 4, PD = 13, PMAX = PT * PK + PE };

typedef struct perm_fix {
    int rows;
    int32_t row_a[PMAX], pos[PT * PK];
} perm_fix;

/* Expert-sorted rows of a random routing: expert 1 empty, some assignments dropped, a padding
 * row closing each expert's block. */
static void make_perm(perm_fix *f) {
    int expert[PT * PK];
    for (int a = 0; a < PT * PK; a++) {
        int e = (int)urand(0, PE);
        expert[a] = urand(0, 1) < 0.25f ? -1 : e == 1 ? 2 : e;
        f->pos[a] = -1;
    }
    f->rows = 0;
    for (int e = 0; e < PE; e++) {
        for (int a = 0; a < PT * PK; a++)
            if (expert[a] == e) f->pos[a] = f->rows, f->row_a[f->rows++] = a;
        f->row_a[f->rows++] = -1;
    }
}

static void test_permute(void) {
    perm_fix f;
    make_perm(&f);
    int R = f.rows;
    float x[PT * PD], ye[PMAX * PD], prob[PT * PK], dy[PT * PD];
    for (int i = 0; i < PT * PD; i++) x[i] = urand(-2, 2), dy[i] = urand(-1, 1);
    for (int i = 0; i < R * PD; i++) ye[i] = urand(-2, 2);
    for (int i = 0; i < PT * PK; i++) prob[i] = urand(0, 1);

    /* references: scatter from the assignments / gather from the rows, in double */
    double xp_ref[PMAX * PD] = {0}, dx_ref[PT * PD] = {0}, y_ref[PT * PD] = {0};
    double dye_ref[PMAX * PD] = {0}, dp_ref[PT * PK] = {0};
    for (int a = 0; a < PT * PK; a++) {
        int r = f.pos[a];
        if (r < 0) continue;
        for (int c = 0; c < PD; c++) {
            xp_ref[r * PD + c] = x[a / PK * PD + c];
            dp_ref[a] += (double)dy[a / PK * PD + c] * ye[r * PD + c];
            dye_ref[r * PD + c] = (double)prob[a] * dy[a / PK * PD + c];
        }
    }
    for (int r = 0; r < R; r++) {
        int a = f.row_a[r];
        if (a < 0) continue;
        for (int c = 0; c < PD; c++) {
            dx_ref[a / PK * PD + c] += ye[r * PD + c];
            y_ref[a / PK * PD + c] += (double)prob[a] * ye[r * PD + c];
        }
    }
    float xp[PMAX * PD], dx[PT * PD], y[PT * PD], dye[PMAX * PD], dp[PT * PK];
    memset(xp, 0xff, sizeof xp), memset(dx, 0xff, sizeof dx), memset(y, 0xff, sizeof y);
    memset(dye, 0xff, sizeof dye), memset(dp, 0xff, sizeof dp);
    CHECK(ops->moe_permute(xp, x, f.row_a, R, PT, PK, PD) == TR_OK);
    CHECK(ops->moe_permute_bwd(dx, ye, f.pos, R, PT, PK, PD) == TR_OK);
    CHECK(ops->moe_unpermute(y, ye, prob, f.pos, R, PT, PK, PD) == TR_OK);
    CHECK(ops->moe_unpermute_bwd(dye, dp, dy, ye, prob, f.row_a, f.pos, R, PT, PK, PD) == TR_OK);
    double e1 = rel_l2(xp, xp_ref, (size_t)R * PD), e2 = rel_l2(dx, dx_ref, PT * PD);
    double e3 = rel_l2(y, y_ref, PT * PD), e4 = rel_l2(dye, dye_ref, (size_t)R * PD);
    double e5 = rel_l2(dp, dp_ref, PT * PK);
    printf("  rows %d: permute %.1e, permute_bwd %.1e, unpermute %.1e, dye %.1e, dprob %.1e\n", R,
           e1, e2, e3, e4, e5);
    CHECK(e1 == 0.0 && e4 < 1e-7); /* copies / one product each */
    CHECK(e2 < 1e-6 && e3 < 1e-6 && e5 < 1e-6);

    /* out-of-range indices read as padding / dropped */
    int32_t ra[2] = {PT * PK, -5}, po[PK] = {R, 0};
    float one[2 * PD];
    CHECK(ops->moe_permute(one, x, ra, 2, PT, PK, PD) == TR_OK);
    int zeros = 1;
    for (int i = 0; i < 2 * PD; i++) zeros &= one[i] == 0.0f;
    CHECK(zeros);
    CHECK(ops->moe_unpermute(one, ye, prob, po, 1, 1, PK, PD) == TR_OK);
    double want[PD];
    for (int c = 0; c < PD; c++) want[c] = (double)prob[1] * ye[c];
    CHECK(rel_l2(one, want, PD) < 1e-7);

    CHECK(ops->moe_permute(xp, x, f.row_a, R, PT, 0, PD) == TR_ERR_INVALID);
    CHECK(ops->moe_permute(xp, NULL, f.row_a, R, PT, PK, PD) == TR_ERR_INVALID);
    CHECK(ops->moe_permute_bwd(dx, ye, NULL, R, PT, PK, PD) == TR_ERR_INVALID);
    CHECK(ops->moe_unpermute(y, ye, NULL, f.pos, R, PT, PK, PD) == TR_ERR_INVALID);
    CHECK(ops->moe_unpermute_bwd(dye, NULL, dy, ye, prob, f.row_a, f.pos, R, PT, PK, PD) ==
          TR_ERR_INVALID);
    CHECK(ops->moe_unpermute(NULL, NULL, NULL, NULL, 0, 0, PK, PD) == TR_OK);
}

int main(int argc, char **argv) {
    ops = tr_ops_cpu();
    static const tr_test_case tests[] = {TR_TEST(test_topk), TR_TEST(test_topk_checks),
                                         TR_TEST(test_permute)};
    return tr_test_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
