/* Bucket and shard layout of the data-parallel gradient buffer: reverse order, boundaries at
 * parameters, padding, and every element in exactly one bucket and one shard. */
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/field.h"
#include "core/validate.h"
#include "tests/unit/harness.h"
#include "runtime/distributed/ddp.h"
#include "runtime/distributed/grad_buffer.h"

static void make_params(tr_grad_param *p, int n, const int64_t *numel) {
    memset(p, 0, (size_t)n * sizeof *p);
    for (int i = 0; i < n; i++) {
        snprintf(p[i].name, sizeof p[i].name, "p%d", i);
        p[i].numel = numel[i];
    }
}

/* Hand-worked Megatron example: dp=2, sharded, one bucket. Reverse order: p2 at 0 (30 elements),
 * p1 starts at the next multiple of 64 (64), p0 at 128; end 138 padded to lcm(2,128) = 256. */
static void test_hand_sharded(void) {
    tr_grad_param p[3];
    make_params(p, 3, (const int64_t[]){10, 20, 30});
    tr_grad_layout_options o = tr_grad_layout_defaults(2, 0, true);
    tr_grad_layout L;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_grad_layout_build(&L, p, 3, &o, &d) == TR_OK);
    CHECK_INT_EQ(L.n_buckets, 1);
    CHECK_INT_EQ(L.params[2].offset, 0);
    CHECK_INT_EQ(L.params[1].offset, 64);
    CHECK_INT_EQ(L.params[0].offset, 128);
    CHECK_INT_EQ(L.numel, 256);
    CHECK_INT_EQ(L.param_numel, 60);
    CHECK_INT_EQ(L.buckets[0].shard_numel, 128);
    /* Rank 1 owns [128, 256): only p0, whole, at state offset 0. */
    tr_grad_owned w;
    CHECK(tr_grad_owned_build(&w, &L, 1) == TR_OK);
    CHECK_INT_EQ(w.n_ranges, 1);
    CHECK_INT_EQ(w.ranges[0].param, 0);
    CHECK_INT_EQ(w.ranges[0].numel, 10);
    CHECK_INT_EQ(w.ranges[0].state_offset, 0);
    CHECK_INT_EQ(w.state_numel, 128);
    tr_grad_owned_free(&w);
    tr_grad_layout_free(&L);
    tr_diags_free(&d);
}

/* Unsharded, bucket_size 25: p2 (30) fills bucket 0 alone; p1 (20) is short of 25, p0 (10)
 * completes bucket 1 at 30 elements. No padding anywhere. */
static void test_hand_unsharded(void) {
    tr_grad_param p[3];
    make_params(p, 3, (const int64_t[]){10, 20, 30});
    tr_grad_layout_options o = tr_grad_layout_defaults(4, 25, false);
    tr_grad_layout L;
    CHECK(tr_grad_layout_build(&L, p, 3, &o, NULL) == TR_OK);
    CHECK_INT_EQ(L.n_buckets, 2);
    CHECK_INT_EQ(L.buckets[0].offset, 0);
    CHECK_INT_EQ(L.buckets[0].numel, 30);
    CHECK_INT_EQ(L.buckets[1].offset, 30);
    CHECK_INT_EQ(L.buckets[1].numel, 30);
    CHECK_INT_EQ(L.params[1].offset, 30);
    CHECK_INT_EQ(L.params[0].offset, 50);
    CHECK_INT_EQ(L.numel, 60);
    tr_grad_layout_free(&L);
}

/* The layout's invariants, checked from the slots alone. */
static void check_layout(const tr_grad_layout *L, const tr_grad_param *p, int n,
                         const tr_grad_layout_options *o) {
    int64_t palign = o->param_align ? o->param_align : 64;
    int64_t balign = o->bucket_align ? o->bucket_align : 128;
    int64_t bmult = balign;
    while (bmult % o->dp_size) bmult += balign; /* lcm(dp, balign) */
    /* Reverse order and no overlap: each parameter lies after the next one. */
    for (int i = 0; i + 1 < n; i++) {
        CHECK(L->params[i].offset >= L->params[i + 1].offset + p[i + 1].numel);
        CHECK(L->params[i].bucket >= L->params[i + 1].bucket);
    }
    /* Buckets tile the buffer in order and contain whole parameters. */
    int64_t pos = 0;
    for (int b = 0; b < L->n_buckets; b++) {
        const tr_grad_bucket *bk = &L->buckets[b];
        CHECK_INT_EQ(bk->offset, pos);
        CHECK(bk->numel > 0);
        pos += bk->numel;
        int64_t data_end = bk->offset;
        for (int i = bk->first_param; i <= bk->last_param; i++) {
            CHECK_INT_EQ(L->params[i].bucket, b);
            CHECK(L->params[i].offset >= bk->offset);
            CHECK(L->params[i].offset + p[i].numel <= bk->offset + bk->numel);
            if (L->params[i].offset + p[i].numel > data_end)
                data_end = L->params[i].offset + p[i].numel;
        }
        /* A bucket closes as soon as it reaches bucket_size, and not before (unless it is the
         * last one or a parameter demanded a bucket of its own). */
        bool forced = p[bk->first_param].own_bucket ||
                      (bk->first_param > 0 && p[bk->first_param - 1].own_bucket);
        if (o->bucket_size > 0 && b + 1 < L->n_buckets && !forced)
            CHECK(data_end - bk->offset >= o->bucket_size);
        if (o->bucket_size > 0 && bk->first_param < bk->last_param)
            CHECK(L->params[bk->first_param + 1].offset + p[bk->first_param + 1].numel -
                      bk->offset <
                  o->bucket_size);
        if (o->bucket_size <= 0 && !forced) CHECK_INT_EQ(L->n_buckets, 1);
        if (o->sharded) {
            CHECK_INT_EQ(bk->numel % bmult, 0);
            CHECK_INT_EQ(bk->numel % o->dp_size, 0);
            CHECK_INT_EQ(bk->shard_numel * o->dp_size, bk->numel);
        } else {
            CHECK_INT_EQ(bk->numel, data_end - bk->offset); /* no padding */
        }
    }
    CHECK_INT_EQ(pos, L->numel);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        total += p[i].numel;
        if (o->sharded) CHECK_INT_EQ(L->params[i].offset % palign, 0);
    }
    CHECK_INT_EQ(L->param_numel, total);
    if (!o->sharded) CHECK_INT_EQ(L->numel, total);

    /* Every parameter element in exactly one bucket, padding in none, and across the dp ranks
     * every parameter element owned exactly once, with distinct state slots per rank. */
    unsigned char *param_of = calloc((size_t)L->numel, 1);
    unsigned char *owned = calloc((size_t)L->numel, 1);
    for (int i = 0; i < n; i++)
        for (int64_t e = 0; e < p[i].numel; e++) param_of[L->params[i].offset + e]++;
    for (int64_t e = 0; e < L->numel; e++) CHECK(param_of[e] <= 1);
    int ranks = o->sharded ? o->dp_size : 1;
    for (int r = 0; r < ranks; r++) {
        tr_grad_owned w;
        CHECK(tr_grad_owned_build(&w, L, r) == TR_OK);
        unsigned char *state = calloc((size_t)w.state_numel + 1, 1);
        int64_t sum_shards = 0;
        for (int b = 0; b < L->n_buckets; b++) sum_shards += L->buckets[b].shard_numel;
        CHECK_INT_EQ(w.state_numel, sum_shards);
        for (int k = 0; k < w.n_ranges; k++) {
            const tr_grad_range *g = &w.ranges[k];
            int64_t lo = tr_grad_bucket_shard_offset(L, g->bucket, r);
            CHECK(g->offset >= lo &&
                  g->offset + g->numel <= lo + L->buckets[g->bucket].shard_numel);
            CHECK_INT_EQ(g->offset, L->params[g->param].offset + g->param_offset);
            CHECK(g->state_offset >= 0 && g->state_offset + g->numel <= w.state_numel);
            for (int64_t e = 0; e < g->numel; e++) {
                owned[g->offset + e]++;
                state[g->state_offset + e]++;
                CHECK(param_of[g->offset + e] == 1);
            }
        }
        for (int64_t s = 0; s < w.state_numel; s++) CHECK(state[s] <= 1);
        free(state);
        tr_grad_owned_free(&w);
    }
    for (int64_t e = 0; e < L->numel; e++) CHECK_INT_EQ(owned[e], param_of[e]);
    free(param_of);
    free(owned);
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void test_properties_random(void) {
    uint64_t seed = 12345;
    for (int trial = 0; trial < 300; trial++) {
        int n = 1 + (int)(lcg(&seed) % 12);
        int64_t numel[12];
        for (int i = 0; i < n; i++) numel[i] = 1 + (int64_t)(lcg(&seed) % (trial % 3 ? 300 : 5));
        tr_grad_param p[12];
        make_params(p, n, numel);
        if (trial % 5 == 0) p[0].own_bucket = true; /* a tied embedding */
        int dps[] = {1, 2, 3, 4, 6, 8};
        tr_grad_layout_options o = tr_grad_layout_defaults(
            dps[lcg(&seed) % 6], (int64_t)(lcg(&seed) % 700) - 50, lcg(&seed) % 2);
        if (trial % 4 == 1) o.param_align = o.bucket_align = 1; /* only the dp multiple */
        if (trial % 4 == 2) o.param_align = 4, o.bucket_align = 3;
        tr_grad_layout L;
        CHECK(tr_grad_layout_build(&L, p, n, &o, NULL) == TR_OK);
        check_layout(&L, p, n, &o);
        tr_grad_layout_free(&L);
    }
}

static void test_own_bucket(void) {
    tr_grad_param p[4];
    make_params(p, 4, (const int64_t[]){50, 3, 4, 5});
    p[0].own_bucket = true;
    tr_grad_layout_options o = tr_grad_layout_defaults(2, 0, true);
    tr_grad_layout L;
    CHECK(tr_grad_layout_build(&L, p, 4, &o, NULL) == TR_OK);
    CHECK_INT_EQ(L.n_buckets, 2);
    CHECK_INT_EQ(L.buckets[1].first_param, 0);
    CHECK_INT_EQ(L.buckets[1].last_param, 0);
    CHECK_INT_EQ(L.buckets[0].first_param, 1);
    tr_grad_layout_free(&L);
}

static void test_bad_input(void) {
    tr_grad_param p[2];
    make_params(p, 2, (const int64_t[]){5, 0});
    tr_grad_layout_options o = tr_grad_layout_defaults(2, 0, true);
    tr_grad_layout L;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_grad_layout_build(&L, p, 2, &o, &d) == TR_ERR_INVALID);
    CHECK(d.n_errors == 1 && strstr(d.items[0].message, "'p1'"));
    CHECK(tr_grad_layout_build(&L, p, 0, &o, &d) == TR_ERR_INVALID);
    o.dp_size = 0;
    CHECK(tr_grad_layout_build(&L, p, 1, &o, &d) == TR_ERR_INVALID);
    CHECK_INT_EQ(d.n_errors, 3);
    CHECK(tr_diags_find(&d, "ddp.layout") != NULL);
    o.dp_size = 2;
    CHECK(tr_grad_layout_build(&L, p, 1, &o, &d) == TR_OK); /* p0 alone is fine */
    tr_grad_owned w;
    CHECK(tr_grad_owned_build(&w, &L, 2) == TR_ERR_INVALID); /* rank outside dp */
    tr_grad_layout_free(&L);
    tr_diags_free(&d);
}

static void test_options_from_config(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    CHECK(tr_config_init(&c, &d) == TR_OK);
    tr_grad_layout_options lo;
    tr_ddp_options dd;
    /* Megatron: without overlap one bucket, whatever bucket_size says. */
    c.ddp.bucket_size = 1000;
    CHECK(tr_ddp_options_from_config(&c, 4, 100000, &lo, &dd, &d) == TR_OK);
    CHECK_INT_EQ(lo.bucket_size, 0);
    CHECK(!lo.sharded);
    c.ddp.overlap_grad_reduce = true;
    CHECK(tr_ddp_options_from_config(&c, 4, 100000, &lo, &dd, &d) == TR_OK);
    CHECK_INT_EQ(lo.bucket_size, 1000);
    CHECK(dd.overlap_grad_reduce);
    c.ddp.bucket_size = TR_NULL_INT;
    CHECK(tr_ddp_options_from_config(&c, 64, 100000, &lo, &dd, &d) == TR_OK);
    CHECK_INT_EQ(lo.bucket_size, 64000000); /* max(40M, 1M x dp) */
    c.ddp.num_buckets = 3;
    CHECK(tr_ddp_options_from_config(&c, 4, 100000, &lo, &dd, &d) == TR_OK);
    CHECK_INT_EQ(lo.bucket_size, 33334);
    c.optimizer.use_distributed_optimizer = true; /* either flag turns sharding on */
    c.ddp.pad_buckets_for_high_nccl_busbw = true;
    CHECK(tr_ddp_options_from_config(&c, 4, 100000, &lo, &dd, &d) == TR_OK);
    CHECK(lo.sharded);
    CHECK_INT_EQ(lo.bucket_align, 65536);
    CHECK_INT_EQ(d.n_errors, 0);
    c.ddp.num_distributed_optimizer_instances = 2;
    CHECK(tr_ddp_options_from_config(&c, 4, 100000, &lo, &dd, &d) == TR_ERR_INVALID);
    CHECK(tr_runtime_check(&c, &d) == TR_ERR_CONFIG); /* the loop refuses it first, by its rule */
    CHECK(tr_diags_find(&d, "runtime.distopt_instances") != NULL);
    tr_config_free(&c);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_hand_sharded), TR_TEST(test_hand_unsharded),
             TR_TEST(test_properties_random), TR_TEST(test_own_bucket), TR_TEST(test_bad_input),
             TR_TEST(test_options_from_config))
