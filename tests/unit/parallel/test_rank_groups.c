/* Group membership: the reference's worked examples group by group, then properties over many
 * random layouts, then the layout rules' diagnostic ids. */
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "runtime/parallel/config.h"
#include "runtime/parallel/rank_groups.h"
#include "tests/unit/harness.h"

static tr_parallel_dims dims(int world, int tp, int pp, int cp, int ep, int etp) {
    tr_parallel_dims d;
    tr_parallel_dims_init(&d, world);
    d.tp = tp, d.pp = pp, d.cp = cp, d.ep = ep, d.etp = etp;
    tr_parallel_dims_derive(&d);
    return d;
}

/* Enumeration rendered as "[0,1] [2,3]" so expectations read like the reference tables. */
static char *render(const tr_parallel_dims *d, tr_group_kind k) {
    int *r, n, s;
    if (tr_rank_groups_enumerate(d, k, &r, &n, &s) != TR_OK) return NULL;
    size_t cap = (size_t)n * (size_t)s * 12 + 16, len = 0;
    char *out = malloc(cap);
    out[0] = '\0';
    for (int g = 0; g < n; g++) {
        len += (size_t)snprintf(out + len, cap - len, g ? " [" : "[");
        for (int i = 0; i < s; i++)
            len += (size_t)snprintf(out + len, cap - len, i ? ",%d" : "%d", r[g * s + i]);
        len += (size_t)snprintf(out + len, cap - len, "]");
    }
    free(r);
    return out;
}

static char *singletons(int world) {
    static char buf[1024];
    size_t len = 0;
    for (int i = 0; i < world; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, i ? " [%d]" : "[%d]", i);
    return buf;
}

#define EXPECT(d, kind, text)                                                                      \
    do {                                                                                           \
        char *got_ = render(&(d), (kind));                                                         \
        if (!got_ || strcmp(got_, (text)) != 0) {                                                  \
            fprintf(stderr, "  %s:%d: %s: got %s\n      expected %s\n", __FILE__, __LINE__,        \
                    tr_group_kind_name(kind), got_ ? got_ : "(error)", (text));                    \
            tr_test_failures++;                                                                    \
        }                                                                                          \
        free(got_);                                                                                \
    } while (0)

/* megatron-core.md 1.3: world 8, TP2 PP2 CP2; EP1, ETP defaults to TP. */
static void test_example_a_tp2_pp2_cp2(void) {
    tr_parallel_dims d = dims(8, 2, 2, 2, 1, 2);
    CHECK_INT_EQ(d.dp, 1);
    CHECK_INT_EQ(d.edp, 2);
    EXPECT(d, TR_GROUP_TP, "[0,1] [2,3] [4,5] [6,7]");
    EXPECT(d, TR_GROUP_CP, "[0,2] [1,3] [4,6] [5,7]");
    EXPECT(d, TR_GROUP_DP, singletons(8));
    EXPECT(d, TR_GROUP_DP_CP, "[0,2] [1,3] [4,6] [5,7]");
    EXPECT(d, TR_GROUP_TP_CP, "[0,1,2,3] [4,5,6,7]");
    EXPECT(d, TR_GROUP_PP, "[0,4] [1,5] [2,6] [3,7]");
    EXPECT(d, TR_GROUP_TP_PP, "[0,1,4,5] [2,3,6,7]");
    EXPECT(d, TR_GROUP_TP_DP, "[0,1] [2,3] [4,5] [6,7]");
    EXPECT(d, TR_GROUP_TP_DP_CP, "[0,1,2,3] [4,5,6,7]");
    EXPECT(d, TR_GROUP_EMBEDDING, "[0,4] [1,5] [2,6] [3,7]");
    EXPECT(d, TR_GROUP_POSITION_EMBEDDING, "[0] [1] [2] [3]");
    EXPECT(d, TR_GROUP_EXPERT_TP, "[0,1] [2,3] [4,5] [6,7]");
    EXPECT(d, TR_GROUP_EP, singletons(8));
    EXPECT(d, TR_GROUP_EXPERT_DP, "[0,2] [1,3] [4,6] [5,7]");
    EXPECT(d, TR_GROUP_TP_EP_PP, "[0,1,4,5] [2,3,6,7]");

    /* Rank 5 = (tp 1, cp 0, pp 1): last stage, first CP rank, second TP rank. */
    int m[8], n, pos;
    CHECK(tr_rank_group_of(&d, TR_GROUP_PP, 5, m, 8, &n, &pos) == TR_OK);
    CHECK_INT_EQ(pos, 1);
    CHECK(tr_rank_group_of(&d, TR_GROUP_CP, 5, m, 8, &n, &pos) == TR_OK);
    CHECK_INT_EQ(pos, 0);
    CHECK(tr_rank_group_of(&d, TR_GROUP_TP, 5, m, 8, &n, &pos) == TR_OK);
    CHECK_INT_EQ(pos, 1);
    CHECK(tr_rank_group_of(&d, TR_GROUP_POSITION_EMBEDDING, 5, m, 8, &n, &pos) == TR_OK);
    CHECK_INT_EQ(n, 0);
    CHECK_INT_EQ(pos, -1);
}

/* megatron-core.md 1.4: world 8, TP2 EP4 PP1, expert TP 2 (the MCore default). */
static void test_example_b_tp2_ep4_etp2(void) {
    tr_parallel_dims d = dims(8, 2, 1, 1, 4, 2);
    CHECK_INT_EQ(d.dp, 4);
    CHECK_INT_EQ(d.edp, 1);
    EXPECT(d, TR_GROUP_TP, "[0,1] [2,3] [4,5] [6,7]");
    EXPECT(d, TR_GROUP_DP, "[0,2,4,6] [1,3,5,7]");
    EXPECT(d, TR_GROUP_DP_CP, "[0,2,4,6] [1,3,5,7]");
    EXPECT(d, TR_GROUP_CP, singletons(8));
    EXPECT(d, TR_GROUP_PP, singletons(8));
    EXPECT(d, TR_GROUP_EMBEDDING, singletons(8));
    EXPECT(d, TR_GROUP_POSITION_EMBEDDING, singletons(8));
    EXPECT(d, TR_GROUP_TP_DP, "[0,1,2,3,4,5,6,7]");
    EXPECT(d, TR_GROUP_TP_DP_CP, "[0,1,2,3,4,5,6,7]");
    EXPECT(d, TR_GROUP_TP_CP, "[0,1] [2,3] [4,5] [6,7]");
    EXPECT(d, TR_GROUP_TP_PP, "[0,1] [2,3] [4,5] [6,7]");
    EXPECT(d, TR_GROUP_EXPERT_TP, "[0,1] [2,3] [4,5] [6,7]");
    EXPECT(d, TR_GROUP_EP, "[0,2,4,6] [1,3,5,7]");
    EXPECT(d, TR_GROUP_EXPERT_DP, singletons(8));
    EXPECT(d, TR_GROUP_TP_EP, "[0,1,2,3,4,5,6,7]");
    EXPECT(d, TR_GROUP_TP_EP_PP, "[0,1,2,3,4,5,6,7]");
}

/* megatron-core.md 1.4, second table: the same with expert TP 1. */
static void test_example_b_tp2_ep4_etp1(void) {
    tr_parallel_dims d = dims(8, 2, 1, 1, 4, 1);
    CHECK_INT_EQ(d.edp, 2);
    EXPECT(d, TR_GROUP_EXPERT_TP, singletons(8));
    EXPECT(d, TR_GROUP_EP, "[0,1,2,3] [4,5,6,7]");
    EXPECT(d, TR_GROUP_EXPERT_DP, "[0,4] [1,5] [2,6] [3,7]");
    EXPECT(d, TR_GROUP_TP_EP, "[0,1,2,3] [4,5,6,7]");
    /* The dense groups do not change with ETP. */
    EXPECT(d, TR_GROUP_TP, "[0,1] [2,3] [4,5] [6,7]");
    EXPECT(d, TR_GROUP_DP, "[0,2,4,6] [1,3,5,7]");
}

/* megatron-core.md 1.4 bonus (folding): world 16, TP2 CP2 EP4 ETP1. */
static void test_folding_16(void) {
    tr_parallel_dims d = dims(16, 2, 1, 2, 4, 1);
    CHECK_INT_EQ(d.dp, 4);
    CHECK_INT_EQ(d.edp, 4);
    EXPECT(d, TR_GROUP_CP, "[0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]");
    EXPECT(d, TR_GROUP_DP_CP, "[0,2,4,6,8,10,12,14] [1,3,5,7,9,11,13,15]");
    EXPECT(d, TR_GROUP_EP, "[0,1,2,3] [4,5,6,7] [8,9,10,11] [12,13,14,15]");
    EXPECT(d, TR_GROUP_EXPERT_DP, "[0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]");
}

/* megatron-bridge-config.md 7.2: W16, TP2 CP2 PP2 (DP2), EP4 ETP1 (EDP2). */
static void test_bridge_72_16_ranks(void) {
    tr_parallel_dims d = dims(16, 2, 2, 2, 4, 1);
    CHECK_INT_EQ(d.dp, 2);
    CHECK_INT_EQ(d.edp, 2);
    EXPECT(d, TR_GROUP_TP, "[0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]");
    EXPECT(d, TR_GROUP_CP, "[0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]");
    EXPECT(d, TR_GROUP_DP, "[0,4] [1,5] [2,6] [3,7] [8,12] [9,13] [10,14] [11,15]");
    EXPECT(d, TR_GROUP_PP, "[0,8] [1,9] [2,10] [3,11] [4,12] [5,13] [6,14] [7,15]");
    EXPECT(d, TR_GROUP_DP_CP, "[0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15]");
    EXPECT(d, TR_GROUP_TP_PP, "[0,1,8,9] [2,3,10,11] [4,5,12,13] [6,7,14,15]");
    EXPECT(d, TR_GROUP_EP, "[0,1,2,3] [4,5,6,7] [8,9,10,11] [12,13,14,15]");
    EXPECT(d, TR_GROUP_EXPERT_TP, singletons(16));
    EXPECT(d, TR_GROUP_EXPERT_DP, "[0,4] [1,5] [2,6] [3,7] [8,12] [9,13] [10,14] [11,15]");
    /* Expert pp == dense pp: each tp-ep-pp group is a union of whole pp groups. */
    EXPECT(d, TR_GROUP_TP_EP_PP, "[0,1,2,3,8,9,10,11] [4,5,6,7,12,13,14,15]");
    EXPECT(d, TR_GROUP_EMBEDDING, "[0,8] [1,9] [2,10] [3,11] [4,12] [5,13] [6,14] [7,15]");
}

/* megatron-bridge-config.md 7.2: order tp-cp-ep-pp-dp, W8, TP2 PP2. */
static void test_pp_before_dp(void) {
    tr_parallel_dims d = dims(8, 2, 2, 1, 1, 2);
    d.pp_before_dp = true;
    CHECK(tr_parallel_dims_check(&d, NULL) == TR_OK);
    EXPECT(d, TR_GROUP_DP, "[0,4] [1,5] [2,6] [3,7]");
    EXPECT(d, TR_GROUP_PP, "[0,2] [1,3] [4,6] [5,7]");
    EXPECT(d, TR_GROUP_TP, "[0,1] [2,3] [4,5] [6,7]");
    EXPECT(d, TR_GROUP_EMBEDDING, "[0,2] [1,3] [4,6] [5,7]");
    EXPECT(d, TR_GROUP_EXPERT_DP, "[0,4] [1,5] [2,6] [3,7]");
}

/* The parallel_state.py docstring: 16 GPUs, TP2 PP4 (DP2). */
static void test_mcore_docstring_16(void) {
    tr_parallel_dims d = dims(16, 2, 4, 1, 1, 2);
    EXPECT(d, TR_GROUP_DP, "[0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]");
    EXPECT(d, TR_GROUP_TP, "[0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]");
    EXPECT(d, TR_GROUP_PP, "[0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]");
    EXPECT(d, TR_GROUP_EMBEDDING, "[0,12] [1,13] [2,14] [3,15]");
    EXPECT(d, TR_GROUP_POSITION_EMBEDDING, "[0] [1] [2] [3]");
    int m[16], n, pos;
    CHECK(tr_rank_group_of(&d, TR_GROUP_EMBEDDING, 6, m, 16, &n, &pos) == TR_OK);
    CHECK_INT_EQ(n, 0); /* a middle stage */
    CHECK(tr_rank_group_of(&d, TR_GROUP_EMBEDDING, 13, m, 16, &n, &pos) == TR_OK);
    CHECK_INT_EQ(n, 2);
    CHECK_INT_EQ(m[0], 1);
    CHECK_INT_EQ(m[1], 13);
    CHECK_INT_EQ(pos, 1);
}

static void test_dist_opt_instances(void) {
    tr_parallel_dims d = dims(8, 1, 1, 1, 2, 1);
    d.dist_opt_instances = 2;
    EXPECT(d, TR_GROUP_INTRA_DP_CP, "[0,1,2,3] [4,5,6,7]");
    EXPECT(d, TR_GROUP_INTER_DP_CP, "[0,4] [1,5] [2,6] [3,7]");
    EXPECT(d, TR_GROUP_INTRA_DIST_OPT, "[0,1,2,3] [4,5,6,7]");

    d = dims(8, 1, 2, 1, 2, 1);
    d.dist_opt_instances = 2; /* expert rank = ep + 2*edp + 4*pp */
    EXPECT(d, TR_GROUP_TP_EP_PP, "[0,1,4,5] [2,3,6,7]");
    EXPECT(d, TR_GROUP_INTRA_DIST_OPT, "[0,1,4,5] [2,3,6,7]");

    d.dist_opt_instances = 1; /* one instance: the whole world, dp-cp, singletons */
    EXPECT(d, TR_GROUP_INTRA_DIST_OPT, "[0,1,2,3,4,5,6,7]");
    EXPECT(d, TR_GROUP_INTRA_DP_CP, "[0,1,2,3] [4,5,6,7]");
    EXPECT(d, TR_GROUP_INTER_DP_CP, singletons(8));
}

/* ---- properties over random layouts ---- */

static unsigned long long rng_state = 0x9e3779b97f4a7c15ull;
static int rnd(int n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((rng_state >> 33) % (unsigned long long)n);
}

static bool random_dims(tr_parallel_dims *d) {
    static const int sz[] = {1, 1, 2, 2, 3, 4};
    int tp = sz[rnd(6)], cp = sz[rnd(4)], pp = sz[rnd(6)], dp = sz[rnd(6)];
    int per_stage = tp * cp * dp;
    /* Pick ep*etp as a divisor of the ranks in one stage. */
    int divs[64], nd = 0;
    for (int x = 1; x <= per_stage; x++)
        if (per_stage % x == 0) divs[nd++] = x;
    int e = divs[rnd(nd)];
    int edivs[64], ne = 0;
    for (int x = 1; x <= e; x++)
        if (e % x == 0) edivs[ne++] = x;
    int etp = edivs[rnd(ne)];
    *d = dims(per_stage * pp, tp, pp, cp, e / etp, etp);
    d->pp_before_dp = rnd(2);
    d->dist_opt_instances = rnd(3) ? 1 : 2;
    tr_parallel_dims_derive(d);
    return tr_parallel_dims_check(d, NULL) == TR_OK;
}

static bool contains(const int *a, int n, int x) {
    for (int i = 0; i < n; i++)
        if (a[i] == x) return true;
    return false;
}

static int intersection(const int *a, int na, const int *b, int nb) {
    int c = 0;
    for (int i = 0; i < na; i++) c += contains(b, nb, a[i]);
    return c;
}

static void check_layout(const tr_parallel_dims *d) {
    int w = d->world;
    int expect_size[TR_GROUP_COUNT] = {
        [TR_GROUP_TP] = d->tp,
        [TR_GROUP_PP] = d->pp,
        [TR_GROUP_DP] = d->dp,
        [TR_GROUP_CP] = d->cp,
        [TR_GROUP_TP_CP] = d->tp * d->cp,
        [TR_GROUP_DP_CP] = d->dp * d->cp,
        [TR_GROUP_TP_DP_CP] = d->tp * d->dp * d->cp,
        [TR_GROUP_TP_DP] = d->tp * d->dp,
        [TR_GROUP_TP_PP] = d->tp * d->pp,
        [TR_GROUP_EP] = d->ep,
        [TR_GROUP_EXPERT_TP] = d->etp,
        [TR_GROUP_EXPERT_DP] = d->edp,
        [TR_GROUP_TP_EP] = d->etp * d->ep,
        [TR_GROUP_TP_EP_PP] = d->etp * d->ep * d->pp,
        [TR_GROUP_EMBEDDING] = d->pp > 1 ? 2 : 1,
        [TR_GROUP_POSITION_EMBEDDING] = 1,
        [TR_GROUP_INTRA_DP_CP] = d->dp * d->cp / d->dist_opt_instances,
        [TR_GROUP_INTER_DP_CP] = d->dist_opt_instances,
        [TR_GROUP_INTRA_DIST_OPT] = w / d->dist_opt_instances,
    };
    CHECK_INT_EQ(d->tp * d->cp * d->dp * d->pp, w);
    CHECK_INT_EQ(d->etp * d->ep * d->edp * d->pp, w);

    int *all[TR_GROUP_COUNT];
    int *seen = calloc((size_t)w, sizeof(int));
    int *m = malloc(sizeof(int) * (size_t)w);
    for (int k = 0; k < TR_GROUP_COUNT; k++) {
        int n, s;
        CHECK(tr_rank_groups_enumerate(d, (tr_group_kind)k, &all[k], &n, &s) == TR_OK);
        CHECK_INT_EQ(s, expect_size[k]);
        bool emb = k == TR_GROUP_EMBEDDING || k == TR_GROUP_POSITION_EMBEDDING;
        CHECK_INT_EQ(n, emb ? w / d->pp : w / s);
        memset(seen, 0, sizeof(int) * (size_t)w);
        for (int g = 0; g < n; g++) {
            for (int i = 0; i < s; i++) {
                int r = all[k][g * s + i];
                CHECK(r >= 0 && r < w);
                if (r < 0 || r >= w) continue;
                seen[r]++;
                if (i > 0) CHECK(r > all[k][g * s + i - 1]);
                /* The single-rank query agrees with the enumeration. */
                int cnt, pos;
                CHECK(tr_rank_group_of(d, (tr_group_kind)k, r, m, w, &cnt, &pos) == TR_OK);
                CHECK_INT_EQ(cnt, s);
                CHECK_INT_EQ(pos, i);
                CHECK(memcmp(m, all[k] + g * s, sizeof(int) * (size_t)s) == 0);
            }
        }
        for (int r = 0; r < w; r++) {
            if (!emb) {
                CHECK_INT_EQ(seen[r], 1); /* partitions the world */
                continue;
            }
            int cnt, pos;
            CHECK(tr_rank_group_of(d, TR_GROUP_PP, r, m, w, &cnt, &pos) == TR_OK);
            bool member = pos == 0 || (k == TR_GROUP_EMBEDDING && pos == d->pp - 1);
            CHECK_INT_EQ(seen[r], member ? 1 : 0);
        }
    }

    /* Orthogonality: a rank's groups along disjoint axes meet only in that rank, and a group
     * over more axes contains the smaller ones. */
    static const tr_group_kind pairs[][2] = {
        {TR_GROUP_TP, TR_GROUP_DP},
        {TR_GROUP_TP, TR_GROUP_PP},
        {TR_GROUP_CP, TR_GROUP_DP},
        {TR_GROUP_TP_CP, TR_GROUP_DP},
        {TR_GROUP_EP, TR_GROUP_EXPERT_DP},
        {TR_GROUP_EXPERT_TP, TR_GROUP_EP},
        {TR_GROUP_PP, TR_GROUP_DP_CP},
        {TR_GROUP_TP_EP, TR_GROUP_EXPERT_DP},
        {TR_GROUP_INTRA_DP_CP, TR_GROUP_INTER_DP_CP},
    };
    static const tr_group_kind subsets[][2] = {
        {TR_GROUP_TP, TR_GROUP_TP_PP},
        {TR_GROUP_PP, TR_GROUP_TP_PP},
        {TR_GROUP_DP, TR_GROUP_DP_CP},
        {TR_GROUP_CP, TR_GROUP_DP_CP},
        {TR_GROUP_DP_CP, TR_GROUP_TP_DP_CP},
        {TR_GROUP_TP_DP, TR_GROUP_TP_DP_CP},
        {TR_GROUP_TP_CP, TR_GROUP_TP_DP_CP},
        {TR_GROUP_EP, TR_GROUP_TP_EP},
        {TR_GROUP_TP_EP, TR_GROUP_TP_EP_PP},
        {TR_GROUP_PP, TR_GROUP_TP_EP_PP},
        {TR_GROUP_EXPERT_DP, TR_GROUP_DP_CP},
        {TR_GROUP_INTRA_DP_CP, TR_GROUP_DP_CP},
        {TR_GROUP_TP_EP_PP, TR_GROUP_INTRA_DIST_OPT},
    };
    int *m2 = malloc(sizeof(int) * (size_t)w);
    for (int r = 0; r < w; r++) {
        int n1, n2, p1, p2;
        for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
            tr_rank_group_of(d, pairs[i][0], r, m, w, &n1, &p1);
            tr_rank_group_of(d, pairs[i][1], r, m2, w, &n2, &p2);
            CHECK_INT_EQ(intersection(m, n1, m2, n2), 1);
        }
        for (size_t i = 0; i < sizeof subsets / sizeof subsets[0]; i++) {
            /* Expert DP sits inside dense DP-CP only when they tile the same ranks. */
            if (subsets[i][0] == TR_GROUP_EXPERT_DP && !(d->ep == 1 && d->etp == d->tp)) continue;
            tr_rank_group_of(d, subsets[i][0], r, m, w, &n1, &p1);
            tr_rank_group_of(d, subsets[i][1], r, m2, w, &n2, &p2);
            CHECK_INT_EQ(intersection(m, n1, m2, n2), n1);
        }
    }
    free(m2);
    for (int k = 0; k < TR_GROUP_COUNT; k++) free(all[k]);
    free(seen);
    free(m);
}

static void test_random_layouts(void) {
    int valid = 0;
    for (int it = 0; it < 600; it++) {
        tr_parallel_dims d;
        if (!random_dims(&d)) continue;
        int before = tr_test_failures;
        check_layout(&d);
        if (tr_test_failures != before) {
            fprintf(stderr, "  layout: ");
            tr_parallel_banner(stderr, &d, 0);
            return;
        }
        valid++;
    }
    CHECK(valid > 300);
}

/* ---- rules ---- */

static bool has_error(const tr_parallel_dims *d, const char *id) {
    tr_diags diags;
    tr_diags_init(&diags);
    tr_status st = tr_parallel_dims_check(d, &diags);
    const tr_diag *g = tr_diags_find(&diags, id);
    bool ok = st == TR_ERR_CONFIG && g && g->severity == TR_SEV_ERROR && g->hint;
    if (!ok) {
        fprintf(stderr, "  expected error %s, got:\n", id);
        tr_diags_print_text(&diags, stderr, false);
    }
    tr_diags_free(&diags);
    return ok;
}

static void test_rules(void) {
    tr_parallel_dims d = dims(6, 4, 1, 1, 1, 4);
    CHECK(has_error(&d, "parallel.world_divisible_by_tp_cp_pp"));
    CHECK(has_error(&d, "parallel.world_divisible_by_etp_ep_pp"));
    d = dims(8, 16, 1, 1, 1, 1);
    CHECK(has_error(&d, "parallel.model_parallel_too_large"));
    d = dims(8, 1, 1, 1, 16, 1);
    CHECK(has_error(&d, "parallel.moe_grid_too_large"));
    d = dims(12, 2, 1, 1, 8, 1);
    CHECK(has_error(&d, "parallel.world_divisible_by_etp_ep_pp"));
    d = dims(8, 0, 1, 1, 1, 1);
    CHECK(has_error(&d, "parallel.size_positive"));
    d = dims(8, 1, 1, 1, 1, 1);
    d.vpp = -1;
    CHECK(has_error(&d, "parallel.size_positive"));

    /* PP2 TP2 EP4 ETP1 on 16: DP 4, EDP 2. Fine with PP last, not with DP last. */
    d = dims(16, 2, 2, 1, 4, 1);
    CHECK(tr_parallel_dims_check(&d, NULL) == TR_OK);
    d.pp_before_dp = true;
    CHECK(has_error(&d, "parallel.edp_equals_dp"));
    int *r, n, s;
    CHECK(tr_rank_groups_enumerate(&d, TR_GROUP_TP, &r, &n, &s) == TR_ERR_CONFIG);

    d = dims(8, 2, 1, 1, 1, 2); /* DP 4 */
    d.dist_opt_instances = 3;
    CHECK(has_error(&d, "parallel.dp_cp_divisible_by_dist_opt_instances"));
    d = dims(8, 1, 1, 1, 8, 1); /* DP 8, EDP 1 */
    d.dist_opt_instances = 2;
    CHECK(has_error(&d, "parallel.edp_divisible_by_dist_opt_instances"));

    /* A virtual pipeline without a pipeline is only a warning. */
    d = dims(8, 1, 1, 1, 1, 1);
    d.vpp = 2;
    tr_diags diags;
    tr_diags_init(&diags);
    CHECK(tr_parallel_dims_check(&d, &diags) == TR_OK);
    CHECK(tr_diags_find(&diags, "parallel.vpp_without_pp") != NULL);
    tr_diags_free(&diags);

    int m[8], cnt, pos;
    d = dims(8, 2, 1, 1, 1, 2);
    CHECK(tr_rank_group_of(&d, TR_GROUP_TP, 8, m, 8, &cnt, &pos) == TR_ERR_INVALID);
    CHECK(tr_rank_group_of(&d, TR_GROUP_DP, 0, m, 2, &cnt, &pos) == TR_ERR_INVALID);
}

static void test_min_world(void) {
    /* The reference's examples (where max and lcm agree) and one where they differ. */
    tr_parallel_dims d = dims(8, 2, 1, 1, 8, 1);
    CHECK_INT_EQ(tr_parallel_min_world(&d), 8);
    d = dims(16, 2, 2, 1, 8, 1);
    CHECK_INT_EQ(tr_parallel_min_world(&d), 16);
    d = dims(8, 2, 1, 1, 4, 2);
    CHECK_INT_EQ(tr_parallel_min_world(&d), 8);
    d = dims(6, 3, 1, 1, 2, 1);
    CHECK_INT_EQ(tr_parallel_min_world(&d), 6);
    CHECK(tr_parallel_dims_check(&d, NULL) == TR_OK);
    d = dims(3, 3, 1, 1, 2, 1); /* max(3,2) = 3 ranks would not fit the expert grid */
    CHECK(tr_parallel_dims_check(&d, NULL) == TR_ERR_CONFIG);
}

static void test_names_and_print(void) {
    for (int k = 0; k < TR_GROUP_COUNT; k++) {
        tr_group_kind back;
        CHECK(tr_group_kind_from_name(tr_group_kind_name((tr_group_kind)k), &back) == TR_OK);
        CHECK_INT_EQ(back, k);
    }
    tr_group_kind x;
    CHECK(tr_group_kind_from_name("nope", &x) == TR_ERR_NOTFOUND);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tr_parallel_dims d = dims(8, 2, 2, 2, 1, 2);
    CHECK(tr_rank_groups_print(f, &d) == TR_OK);
    tr_parallel_banner(f, &d, 4);
    fclose(f);
    CHECK_CONTAINS(buf, "TP 2 x CP 2 x DP 1 x PP 2");
    CHECK_CONTAINS(buf, "expert DP 2");
    CHECK_CONTAINS(buf, "microbatches 4");
    CHECK_CONTAINS(buf, "tp-cp-ep-dp-pp");
    CHECK_CONTAINS(buf, "[0,4] [1,5] [2,6] [3,7]");
    CHECK_CONTAINS(buf, "embedding");
    free(buf);
}

/* The config adaptor resolves nulls the way Megatron-Bridge does. */
static void test_dims_from_config(void) {
    tr_config c;
    tr_diags diags;
    tr_diags_init(&diags);
    CHECK(tr_config_init(&c, &diags) == TR_OK);
    tr_parallel_dims d;
    CHECK(tr_parallel_dims_from_config(&c, 8, &d) == TR_OK);
    CHECK_INT_EQ(d.world, 8);
    CHECK_INT_EQ(d.tp * d.pp * d.cp * d.ep * d.etp, 1);
    CHECK_INT_EQ(d.vpp, 0);
    CHECK_INT_EQ(d.dp, 8);
    CHECK(!d.pp_before_dp);

    c.model.tensor_model_parallel_size = 2;
    CHECK(tr_parallel_dims_from_config(&c, 8, &d) == TR_OK);
    CHECK_INT_EQ(d.etp, 2); /* null ETP without experts follows TP */
    c.model.expert_model_parallel_size = 4;
    CHECK(tr_parallel_dims_from_config(&c, 8, &d) == TR_OK);
    CHECK_INT_EQ(d.etp, 1); /* null ETP with EP > 1 is 1 */
    CHECK_INT_EQ(d.edp, 2);
    c.model.expert_tensor_parallel_size = 2;
    c.model.pipeline_model_parallel_size = 2;
    c.model.virtual_pipeline_model_parallel_size = 3;
    c.model.context_parallel_size = 2;
    c.dist.use_tp_pp_dp_mapping = true;
    c.ddp.num_distributed_optimizer_instances = 2;
    CHECK(tr_parallel_dims_from_config(&c, 32, &d) == TR_OK);
    CHECK_INT_EQ(d.etp, 2);
    CHECK_INT_EQ(d.pp, 2);
    CHECK_INT_EQ(d.vpp, 3);
    CHECK_INT_EQ(d.cp, 2);
    CHECK_INT_EQ(d.dp, 4);
    CHECK_INT_EQ(d.edp, 2);
    CHECK(d.pp_before_dp);
    CHECK_INT_EQ(d.dist_opt_instances, 2);
    CHECK(has_error(&d, "parallel.edp_equals_dp"));

    c.model.tensor_model_parallel_size = (int64_t)1 << 40;
    CHECK(tr_parallel_dims_from_config(&c, 8, &d) == TR_ERR_INVALID);
    tr_config_free(&c);
    tr_diags_free(&diags);
}

TR_TEST_MAIN(TR_TEST(test_example_a_tp2_pp2_cp2), TR_TEST(test_example_b_tp2_ep4_etp2),
             TR_TEST(test_example_b_tp2_ep4_etp1), TR_TEST(test_folding_16),
             TR_TEST(test_bridge_72_16_ranks), TR_TEST(test_pp_before_dp),
             TR_TEST(test_mcore_docstring_16), TR_TEST(test_dist_opt_instances),
             TR_TEST(test_random_layouts), TR_TEST(test_rules), TR_TEST(test_min_world),
             TR_TEST(test_names_and_print), TR_TEST(test_dims_from_config))
