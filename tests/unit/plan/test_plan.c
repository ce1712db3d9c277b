/* The planner's own contracts (runtime/plan/plan.h); its numbers against the runtime's measured
 * allocations are tests/cli/plan_memory.sh, against Megatron's formula tests/cli/plan.sh.
 *  - the memo changes no number: every layout planned with and without it, twice through it;
 *  - context parallelism is planned: the exchange's buffers on every rank and the ring's volume
 *    per layer and microbatch, (CP-1) K/V forward and (CP-1) K/V + CP dK/dV backward (the volume
 *    tests/equiv/equiv_check.c books); MoE layers are refused (plan.unsupported), not guessed;
 *  - every layout the search prints is selected by its overrides: resolved with them from the
 *    recipe it validates and plans to the same numbers;
 *  - the search's fast path (typed overrides on a history-less copy, the error rules alone, the
 *    memo) decides every candidate as the plain path does (a deep copy, the text parser, every
 *    rule, no memo): the same rejecting rule ids and the same plan, byte for byte; where the
 *    fast path stopped at its lower bound on memory (plan.bounded), the plain path's plan does
 *    not fit and holds at least that bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipes/resolve.h"
#include "runtime/model/model.h"
#include "runtime/plan/plan.h"
#include "tests/unit/harness.h"

static tr_status resolve(const char *recipe, const char *const *ov, int n, int world, bool finish,
                         tr_config *c, tr_diags *d) {
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = recipe;
    o.overrides = ov;
    o.n_overrides = n;
    o.world = (tr_world){world, world < 8 ? world : 8};
    memset(c, 0, sizeof *c);
    return finish ? tr_resolve(&o, c, d) : tr_resolve_inputs(&o, c, d);
}

static bool same_plan(const tr_plan *a, const tr_plan *b) {
    if (a->n_ranks != b->n_ranks || a->peak_total != b->peak_total || a->step_s != b->step_s)
        return false;
    for (int i = 0; i < a->n_ranks; i++)
        if (memcmp(a->ranks[i].peak, b->ranks[i].peak, sizeof a->ranks[i].peak) ||
            a->ranks[i].act_per_slot != b->ranks[i].act_per_slot ||
            a->ranks[i].n_params != b->ranks[i].n_params)
            return false;
    return true;
}

static void test_memo_changes_nothing(void) {
    static const char *const l1[] = {"model.tensor_model_parallel_size=2",
                                     "model.sequence_parallel=true"};
    static const char *const l2[] = {"model.pipeline_model_parallel_size=2", "model.num_layers=4",
                                     "model.virtual_pipeline_model_parallel_size=2",
                                     "train.global_batch_size=8"};
    static const char *const l3[] = {
        "ddp.use_distributed_optimizer=true", "optimizer.use_distributed_optimizer=true",
        "model.recompute_granularity=full", "model.recompute_method=uniform",
        "model.recompute_num_layers=1"};
    struct {
        const char *const *ov;
        int n, world;
    } cases[] = {{l1, 2, 2}, {l2, 4, 4}, {l3, 5, 2}, {NULL, 0, 1}};
    tr_plan_cache *cache = NULL;
    CHECK(tr_plan_cache_create(&cache) == TR_OK);
    const tr_plan_gpu *gpus[] = {tr_plan_gpu_find("cpu"), tr_plan_gpu_find("h100-80gb")};
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            for (int g = 0; g < 2; g++) {
                tr_diags d;
                tr_diags_init(&d);
                tr_config c;
                CHECK(resolve("llama_tiny_pretrain", cases[i].ov, cases[i].n, cases[i].world, true,
                              &c, &d) == TR_OK);
                tr_plan a, b;
                CHECK(tr_plan_make(&c, gpus[g], &a, &d) == TR_OK);
                CHECK(tr_plan_make_cached(&c, gpus[g], cache, &b, &d) == TR_OK);
                CHECK(same_plan(&a, &b));
                tr_config_free(&c);
                tr_diags_free(&d);
            }
    int64_t hits = 0, misses = 0;
    tr_plan_cache_stats(cache, &hits, &misses);
    CHECK(hits > 0 && misses > 0);
    tr_plan_cache_free(cache);
}

static void test_cp_and_moe_planned(void) {
    static const char *const cp[] = {"model.context_parallel_size=2"};
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    tr_validate_opts vo = {.skip_capability = true};
    tr_world w = {2, 2};
    CHECK(resolve("llama_tiny_pretrain", cp, 1, 2, false, &c, &d) == TR_OK);
    CHECK(tr_config_finalize(&c, &w, &d) == TR_OK);
    CHECK(tr_config_validate(&c, &vo, &d) == TR_OK);
    tr_plan p;
    CHECK(tr_plan_make(&c, tr_plan_gpu_find("h100-80gb"), &p, &d) == TR_OK);
    CHECK(p.cp == 2 && p.n_ranks == 1 && p.ranks[0].cp_buffers > 0);
    tr_model_spec ms;
    CHECK(tr_model_spec_from_config(&c, &ms, &d) == TR_OK);
    double kv = 2.0 * p.mbs * ms.seq * ms.groups * ms.head_dim * 4.0;
    double want = (double)ms.num_layers * p.nmb * ((2 - 1) * kv + (2 - 1) * kv + 2 * kv);
    const tr_plan_comm *ring = NULL;
    for (int i = 0; i < p.n_comm; i++)
        if (strcmp(p.comm[i].group, "cp") == 0) ring = &p.comm[i];
    CHECK(ring && ring->size == 2 && ring->bytes == want);
    tr_config_free(&c);
    tr_diags_free(&d);
    tr_diags_init(&d);
    /* MoE: the layers' token buffers hold every token's top-k expert rows (dropless), so twice
     * the top-k adds the rows' input, fc1, activation and fc2 output (and their gradients'
     * scratch) once more per microbatch in flight; cli_plan_memory measures them */
    int64_t moe[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        const char *ov[] = {i ? "model.moe_router_topk=4" : "model.moe_router_topk=2"};
        w = (tr_world){1, 1};
        CHECK(resolve("moe_tiny_pretrain", ov, 1, 1, false, &c, &d) == TR_OK);
        CHECK(tr_config_finalize(&c, &w, &d) == TR_OK);
        CHECK(tr_plan_make(&c, tr_plan_gpu_find("cpu"), &p, &d) == TR_OK);
        CHECK(p.n_ranks == 1 && p.ranks[0].moe_buffers > 0);
        moe[i] = p.ranks[0].moe_buffers;
        if (i == 0) {
            /* 2 layers x (states + scratch): x, logits ... and the 2 T expert rows of h, fc1
             * (swiglu: 2 ffn), act (ffn), ye (h) floats at the least */
            int64_t T = c.train.micro_batch_size * c.model.seq_length;
            int64_t h = c.model.hidden_size, f = c.model.moe_ffn_hidden_size;
            CHECK(moe[0] >= 2 * 4 * (2 * T) * (h + 2 * f + f + h));
        }
        tr_config_free(&c);
        tr_diags_free(&d);
        tr_diags_init(&d);
    }
    CHECK(moe[1] > moe[0]);
    tr_diags_free(&d);
    CHECK(tr_plan_gpu_find("h100-80gb") && tr_plan_gpu_find("cpu") && !tr_plan_gpu_find("tpu"));
}

/* Splits "k=v k=v" into argv-style tokens in buf. */
static int split(char *buf, const char **tok, int cap) {
    int n = 0;
    for (char *t = strtok(buf, " "); t && n < cap; t = strtok(NULL, " ")) tok[n++] = t;
    return n;
}

static void test_search_overrides_select_the_layout(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config base;
    CHECK(resolve("llama_tiny_pretrain", NULL, 0, 4, false, &base, &d) == TR_OK);
    const tr_plan_gpu *g = tr_plan_gpu_find("cpu");
    tr_plan_search s;
    CHECK(tr_plan_search_layouts(&base, (tr_world){4, 4}, g, 8, &s, &d) == TR_OK);
    CHECK(s.tried > 100 && s.valid > 0 && s.n_best == 8);
    for (int i = 0; i < s.n_best; i++) {
        if (i) CHECK(s.best[i - 1].plan.step_s <= s.best[i].plan.step_s);
        char buf[1024];
        const char *tok[40];
        tr_plan_candidate_overrides(&s.best[i], buf, sizeof buf);
        int n = split(buf, tok, 40);
        tr_config c;
        tr_diags e;
        tr_diags_init(&e);
        CHECK(resolve("llama_tiny_pretrain", tok, n, 4, true, &c, &e) == TR_OK);
        CHECK(e.n_errors == 0);
        tr_plan p;
        CHECK(tr_plan_make(&c, g, &p, &e) == TR_OK);
        CHECK(same_plan(&p, &s.best[i].plan));
        tr_config_free(&c);
        tr_diags_free(&e);
    }
    tr_plan_search_free(&s);
    tr_config_free(&base);
    tr_diags_free(&d);
}

/* Every verdict of one search, in the order the candidates are tried. */
typedef struct verdicts {
    int n, cap;
    tr_plan_candidate *k;
    bool *planned;
    char (*why)[512];
} verdicts;

static void record(void *ctx, const tr_plan_verdict *v) {
    verdicts *r = ctx;
    if (r->n == r->cap) return;
    r->k[r->n] = *v->k;
    r->planned[r->n] = v->planned;
    memcpy(r->why[r->n], v->why, sizeof v->why);
    r->n++;
}

static void search_paths_agree(const char *recipe, int world, const char *gpu,
                               bool expect_bounded) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config base;
    CHECK(resolve(recipe, NULL, 0, world, false, &base, &d) == TR_OK);
    const tr_plan_gpu *g = tr_plan_gpu_find(gpu);
    tr_world w = {world, world < 8 ? world : 8};
    verdicts r[2];
    tr_plan_search s[2];
    for (int i = 0; i < 2; i++) {
        r[i] = (verdicts){0, 4096, calloc(4096, sizeof *r[i].k), calloc(4096, sizeof(bool)),
                          calloc(4096, sizeof *r[i].why)};
        CHECK(r[i].k && r[i].planned && r[i].why);
        tr_plan_search_opts o = {.plain = i == 1, .each = record, .ctx = &r[i]};
        CHECK(tr_plan_search_layouts_with(&base, w, g, 5, &o, &s[i], &d) == TR_OK);
    }
    CHECK(r[0].n == s[0].tried && r[0].n == r[1].n && r[0].n > 100);
    int valid = 0, fit = 0, differ = 0, bounded = 0;
    for (int i = 0; i < r[0].n; i++) {
        const tr_plan_candidate *a = &r[0].k[i], *b = &r[1].k[i];
        bool same = a->tp == b->tp && a->pp == b->pp && a->vpp == b->vpp && a->cp == b->cp &&
                    a->mbs == b->mbs && a->recompute == b->recompute &&
                    a->dist_opt == b->dist_opt && !strcmp(r[0].why[i], r[1].why[i]) &&
                    r[0].planned[i] == r[1].planned[i];
        /* a plan the fast path stopped at its lower bound: the plain path's full plan does
         * not fit and holds at least that bound (the verdicts above are both "memory") */
        if (same && r[0].planned[i] && a->plan.bounded) {
            same = a->dp == b->dp && !b->plan.bounded && !b->plan.fits && !a->plan.fits &&
                   a->plan.peak_total <= b->plan.peak_total;
            bounded++;
        } else if (same && r[0].planned[i]) {
            same = a->dp == b->dp && !memcmp(&a->plan, &b->plan, sizeof a->plan);
        }
        if (!same && differ++ < 5)
            fprintf(stderr, "  %s: candidate %d differs: fast '%s', plain '%s'\n", recipe, i,
                    r[0].why[i], r[1].why[i]);
        valid += r[0].planned[i];
        fit += r[0].why[i][0] == 0;
    }
    CHECK(differ == 0);
    if (expect_bounded) CHECK(bounded > 0);
    /* both kinds of verdict are in it: rejected by rules, by memory, and fitting */
    CHECK(valid > 0 && fit > 0 && valid < r[0].n);
    CHECK(s[0].valid == s[1].valid && s[0].fit == s[1].fit && s[0].n_why == s[1].n_why);
    for (int i = 0; i < s[0].n_why; i++)
        CHECK(!strcmp(s[0].why[i].id, s[1].why[i].id) && s[0].why[i].count == s[1].why[i].count);
    for (int i = 0; i < 2; i++) {
        free(r[i].k), free(r[i].planned), free(r[i].why);
        tr_plan_search_free(&s[i]);
    }
    tr_config_free(&base);
    tr_diags_free(&d);
}

static void test_search_fast_path_matches_plain(void) {
    search_paths_agree("llama3_70b_pretrain", 64, "h100-80gb", true);
    search_paths_agree("llama_tiny_pretrain", 8, "cpu", false);
}

TR_TEST_MAIN(TR_TEST(test_memo_changes_nothing), TR_TEST(test_cp_and_moe_planned),
             TR_TEST(test_search_overrides_select_the_layout),
             TR_TEST(test_search_fast_path_matches_plain))
