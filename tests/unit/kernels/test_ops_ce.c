/* Vocab-parallel cross entropy: 1, 2 and 4 uneven shards, combined both ways (associative merge,
 * and Megatron's all-reduce MAX + rebase + all-reduce SUM), must reproduce the unsharded loss
 * and gradient, which must match a double-precision softmax. */
#include <string.h>

#include "kernels/cpu/simd/simd.h"
#include "tests/unit/kernels/test_ops_util.h"

#define ops (tr_ops_cpu())

enum { R = 6, V = 5003 }; /* V spans several internal vocab chunks, not a multiple of any */

static float logits[R * V];
static int32_t targets[R] = {0, 5002, -1, 2048, 4095, 1234};
static double ref_loss[R], ref_grad[R * V];
static const float dloss[R] = {0.5f, 1.0f, 2.0f, 0.25f, 1.5f, 1.0f};

static void make_inputs(void) {
    rng_seed(77);
    for (int i = 0; i < R * V; i++) logits[i] = rng_uniform(-8, 8);
    for (int j = 0; j < V; j++) logits[4 * V + j] += 80.0f; /* would overflow a naive exp */
    logits[5 * V + 1234] = 30.0f;                           /* a confident correct row */
    for (int r = 0; r < R; r++) {
        const float *x = logits + r * V;
        double m = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) m = x[j] > m ? x[j] : m;
        for (int j = 0; j < V; j++) s += exp(x[j] - m);
        ref_loss[r] = targets[r] < 0 ? 0 : m + log(s) - x[targets[r]];
        for (int j = 0; j < V; j++)
            ref_grad[r * V + j] =
                targets[r] < 0 ? 0 : dloss[r] * (exp(x[j] - m) / s - (j == targets[r]));
    }
}

/* Runs the split over `shards` ranks; `rebase` picks the all-reduce style combine. */
static void sharded(int shards, int rebase, float *loss, float *grad) {
    float *st[4] = {0}, *slice[4] = {0};
    int start[5];
    for (int s = 0; s <= shards; s++)
        start[s] = (int)((int64_t)V * s / shards) + (s && s < shards ? 7 * s : 0);
    for (int s = 0; s < shards; s++) {
        int vl = start[s + 1] - start[s];
        slice[s] = malloc(sizeof(float) * R * (vl ? vl : 1));
        for (int r = 0; r < R; r++)
            memcpy(slice[s] + r * vl, logits + r * V + start[s], sizeof(float) * vl);
        st[s] = zero_buf(3 * R);
        CHECK(ops->ce_stats(st[s], slice[s], targets, R, vl, start[s]) == TR_OK);
    }
    float comb[3 * R];
    if (!rebase) {
        memcpy(comb, st[0], sizeof comb);
        for (int s = 1; s < shards; s++) CHECK(ops->ce_merge(comb, st[s], R) == TR_OK);
    } else {
        float gmax[R];
        for (int r = 0; r < R; r++) {
            gmax[r] = -INFINITY;
            for (int s = 0; s < shards; s++) gmax[r] = st[s][r] > gmax[r] ? st[s][r] : gmax[r];
        }
        memset(comb, 0, sizeof comb);
        for (int s = 0; s < shards; s++) {
            CHECK(ops->ce_rebase(st[s], gmax, R) == TR_OK);
            for (int i = R; i < 3 * R; i++) comb[i] += st[s][i];
        }
        memcpy(comb, gmax, sizeof gmax);
    }
    CHECK(ops->ce_loss(loss, comb, targets, R) == TR_OK);
    for (int s = 0; s < shards; s++) {
        int vl = start[s + 1] - start[s];
        CHECK(ops->ce_bwd(slice[s], comb, targets, dloss, R, vl, start[s]) == TR_OK);
        for (int r = 0; r < R; r++)
            memcpy(grad + r * V + start[s], slice[s] + r * vl, sizeof(float) * vl);
        free(slice[s]), free(st[s]);
    }
}

static void test_sharded_matches_unsharded(void) {
    make_inputs();
    static float loss1[R], grad1[R * V], loss[R], grad[R * V];
    sharded(1, 0, loss1, grad1);
    /* loss = max + log(sum) - target loses ~1e-7 * max absolutely; the confident row (loss ~1e-9)
     * is therefore compared with an absolute floor. */
    for (int r = 0; r < R; r++) CHECK_CLOSE(loss1[r], ref_loss[r], 1e-6, 1e-5);
    CHECK(max_scaled_err_d(grad1, ref_grad, R * V) < 1e-6);
    for (int shards = 2; shards <= 4; shards *= 2)
        for (int rebase = 0; rebase < 2; rebase++) {
            sharded(shards, rebase, loss, grad);
            for (int r = 0; r < R; r++) CHECK_CLOSE(loss[r], loss1[r], 1e-6, 1e-5);
            CHECK(max_scaled_err(grad, grad1, R * V) < 1e-6);
        }
    CHECK(loss1[2] == 0.0f);
}

static void test_all_isa_variants(void) {
    static const char *isas[] = {"generic", "avx2", "avx512"};
    const tr_cpu_simd *orig = tr_cpu_simd_active();
    for (int i = 0; i < 3; i++)
        if (tr_cpu_simd_select(isas[i]) == TR_OK) test_sharded_matches_unsharded();
    CHECK(tr_cpu_simd_select(orig->isa) == TR_OK);
}

static void test_empty_shard_merges(void) {
    /* A rank whose vocab slice is empty contributes (-inf, 0, 0) and must not produce NaN. */
    float a[3] = {2.0f, 3.0f, 1.5f}, e[3];
    int32_t t = 0;
    CHECK(ops->ce_stats(e, NULL, &t, 1, 0, 10) == TR_OK);
    CHECK(e[0] == -INFINITY && e[1] == 0.0f && e[2] == 0.0f);
    CHECK(ops->ce_merge(e, a, 1) == TR_OK);
    CHECK(e[0] == 2.0f && e[1] == 3.0f && e[2] == 1.5f);
    float g = 1.0f;
    CHECK(ops->ce_rebase(a, &g, 1) == TR_ERR_INVALID); /* 1 < own max: not a global max */
}

TR_TEST_MAIN(TR_TEST(test_sharded_matches_unsharded), TR_TEST(test_all_isa_variants),
             TR_TEST(test_empty_shard_merges))
