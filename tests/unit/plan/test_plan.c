/* The planner's own contracts (runtime/plan/plan.h); its numbers against the runtime's measured
 * allocations are tests/cli/plan_memory.sh, against Megatron's formula tests/cli/plan.sh.
 *  - the memo changes no number: every layout planned with and without it, twice through it;
 *  - context parallelism and MoE layers are refused (plan.unsupported), not guessed;
 *  - every layout the search prints is selected by its overrides: resolved with them from the
 *    recipe it validates and plans to the same numbers. */
#include <string.h>

#include "recipes/resolve.h"
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

static void test_cp_and_moe_refused(void) {
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
    CHECK(tr_plan_make(&c, tr_plan_gpu_find("h100-80gb"), &p, &d) == TR_ERR_CONFIG);
    CHECK(tr_diags_find(&d, "plan.unsupported") != NULL);
    tr_config_free(&c);
    tr_diags_free(&d);
    tr_diags_init(&d);
    w = (tr_world){1, 1};
    CHECK(resolve("moe_tiny_pretrain", NULL, 0, 1, false, &c, &d) == TR_OK);
    CHECK(tr_config_finalize(&c, &w, &d) == TR_OK);
    CHECK(tr_plan_make(&c, tr_plan_gpu_find("h100-80gb"), &p, &d) == TR_ERR_CONFIG);
    CHECK(tr_diags_find(&d, "plan.unsupported") != NULL);
    tr_config_free(&c);
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

TR_TEST_MAIN(TR_TEST(test_memo_changes_nothing), TR_TEST(test_cp_and_moe_refused),
             TR_TEST(test_search_overrides_select_the_layout))
