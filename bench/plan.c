/* Planner throughput: layouts planned per second on one core (tr_plan_make on finalized,
 * validated configs: llama3_70b at 64 GPUs in four layouts, and llama_tiny), without the memo
 * and through it (tr_plan_make_cached: after the first round every sizing input repeats, so this
 * is the memo's floor, the rate for layouts whose parts were sized before), next to the peer
 * measured in the same run: the validator (tr_config_validate) on the same configs, the step
 * that decides which layouts exist. Then the search (tr_plan_search_layouts, llama3_70b at 64 x
 * H100, as run_recipe --search-layouts runs it): layouts tried per second for a fresh search (a
 * cold memo each time), for searches through one memo kept from search to search, and, as its
 * peer in the same run, the plain reference path (tr_plan_search_opts.plain: a deep copy, the
 * text parser and every rule per candidate, no memo). Rates per second of wall time and of this
 * process's CPU time (the machine is shared: CPU time is the one core's share it got).
 *
 *   bench_plan [--rounds R] [--smoke]
 *
 * Every round prints both rates. --smoke: one short round (the ctest run, no timing claim). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "recipes/resolve.h"
#include "runtime/plan/plan.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Searches of base until the budget is spent: layouts tried per wall second and per CPU second. */
static int search_rate(const tr_config *base, const tr_plan_gpu *g, const tr_plan_search_opts *o,
                       double budget, double *wall_rate, double *cpu_rate) {
    long tried = 0;
    double t0 = now_s(), c0 = cpu_s(), t;
    tr_diags d;
    tr_diags_init(&d);
    do {
        tr_plan_search s;
        if (tr_plan_search_layouts_with(base, (tr_world){64, 8}, g, 5, o, &s, &d) != TR_OK)
            return 0;
        tried += s.tried;
        tr_plan_search_free(&s);
    } while ((t = now_s() - t0) < budget);
    *wall_rate = tried / t;
    *cpu_rate = tried / (cpu_s() - c0);
    tr_diags_free(&d);
    return 1;
}

static int resolve(const char *recipe, const char *const *ov, int n, int world, tr_config *c) {
    tr_diags d;
    tr_diags_init(&d);
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = recipe;
    o.overrides = ov;
    o.n_overrides = n;
    o.world = (tr_world){world, world < 8 ? world : 8};
    int ok = tr_resolve(&o, c, &d) == TR_OK && d.n_errors == 0;
    if (!ok) tr_diags_print_text(&d, stderr, false);
    tr_diags_free(&d);
    return ok;
}

int main(int argc, char **argv) {
    int rounds = 3;
    bool smoke = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--smoke")) smoke = true, rounds = 1;
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    }
    static const char *const l1[] = {"model.context_parallel_size=1"};
    static const char *const l2[] = {"model.context_parallel_size=1",
                                     "model.pipeline_model_parallel_size=8"};
    static const char *const l3[] = {"model.context_parallel_size=1",
                                     "model.tensor_model_parallel_size=8",
                                     "model.virtual_pipeline_model_parallel_size=null"};
    static const char *const l4[] = {
        "model.context_parallel_size=1", "model.recompute_granularity=full",
        "model.recompute_method=uniform", "model.recompute_num_layers=1"};
    struct {
        const char *recipe;
        const char *const *ov;
        int n, world;
    } cases[] = {{"llama3_70b_pretrain", l1, 1, 64},
                 {"llama3_70b_pretrain", l2, 2, 64},
                 {"llama3_70b_pretrain", l3, 3, 64},
                 {"llama3_70b_pretrain", l4, 4, 64},
                 {"llama_tiny_pretrain", NULL, 0, 1}};
    enum { NC = 5 };
    tr_config c[NC];
    for (int i = 0; i < NC; i++)
        if (!resolve(cases[i].recipe, cases[i].ov, cases[i].n, cases[i].world, &c[i])) return 1;
    char line[256], model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    if (f) fclose(f);
    printf("machine: %s, one core; %d layouts (llama3_70b at 64 GPUs x 4, llama_tiny)\n", model,
           NC);
    const tr_plan_gpu *g = tr_plan_gpu_find("h100-80gb");
    double budget = smoke ? 0.05 : 1.0;
    /* the search's base: the recipe's inputs before finalize, as run_recipe resolves them */
    tr_config base;
    memset(&base, 0, sizeof base);
    {
        tr_diags d;
        tr_diags_init(&d);
        tr_resolve_opts o;
        memset(&o, 0, sizeof o);
        o.recipe = "llama3_70b_pretrain";
        o.world = (tr_world){64, 8};
        int ok = tr_resolve_inputs(&o, &base, &d) == TR_OK && d.n_errors == 0;
        tr_diags_free(&d);
        if (!ok) return 1;
    }
    tr_plan_cache *kept = NULL;
    if (tr_plan_cache_create(&kept) != TR_OK) return 1;
    for (int r = 0; r < rounds; r++) {
        long n = 0;
        double t0 = now_s(), t;
        tr_plan p;
        tr_diags d;
        tr_diags_init(&d);
        do {
            for (int i = 0; i < NC; i++, n++)
                if (tr_plan_make(&c[i], g, &p, &d) != TR_OK) return 1;
        } while ((t = now_s() - t0) < budget);
        double plan_rate = n / t;
        /* through the memo, as the search plans: the sizing calls once per distinct input */
        tr_plan_cache *cache = NULL;
        if (tr_plan_cache_create(&cache) != TR_OK) return 1;
        long nc = 0;
        t0 = now_s();
        do {
            for (int i = 0; i < NC; i++, nc++)
                if (tr_plan_make_cached(&c[i], g, cache, &p, &d) != TR_OK) return 1;
        } while ((t = now_s() - t0) < budget);
        double memo_rate = nc / t;
        tr_plan_cache_free(cache);
        long v = 0;
        tr_validate_opts vo = {0};
        t0 = now_s();
        do {
            for (int i = 0; i < NC; i++, v++) {
                tr_diags_clear(&d);
                tr_config_validate(&c[i], &vo, &d);
            }
        } while ((t = now_s() - t0) < budget);
        double val_rate = v / t;
        tr_diags_free(&d);
        printf("round %d: planner %.0f layouts/s (%ld in %.2f s), through the memo %.0f "
               "layouts/s; peer, the validator on the same configs: %.0f layouts/s; planner / "
               "validator %.2f, memo / validator %.2f\n",
               r, plan_rate, n, budget, memo_rate, val_rate, plan_rate / val_rate,
               memo_rate / val_rate);
        tr_plan_search_opts fresh = {0}, cached = {.cache = kept}, plain = {.plain = true};
        double fw, fc, cw, cc, pw, pc;
        if (!search_rate(&base, g, &fresh, budget, &fw, &fc) ||
            !search_rate(&base, g, &cached, budget, &cw, &cc) ||
            !search_rate(&base, g, &plain, budget, &pw, &pc))
            return 1;
        printf("round %d: search (llama3_70b, 64 x h100-80gb): fresh %.0f layouts/s (%.0f per CPU "
               "s), through a kept memo %.0f layouts/s (%.0f per CPU s); peer, the plain path: "
               "%.0f layouts/s (%.0f per CPU s); fresh / plain %.1f, kept / plain %.1f\n",
               r, fw, fc, cw, cc, pw, pc, fw / pw, cw / pw);
    }
    tr_plan_cache_free(kept);
    tr_config_free(&base);
    for (int i = 0; i < NC; i++) tr_config_free(&c[i]);
    return 0;
}
