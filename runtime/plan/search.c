/* The layout search (runtime/plan/plan.h): every combination of the axes below is set on a copy
 * of the resolved config as the overrides a user would give, finalized for the world and
 * validated by the same rules as a dry run (capability rules included: what the runtime cannot
 * run is refused under its rule id), then planned; what does not fit the device is counted as
 * "memory". The fastest fitting layouts are kept. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/validate.h"
#include "runtime/plan/plan_internal.h"

static const int tps[] = {1, 2, 4, 8};
static const int cps[] = {1, 2};
static const int pps[] = {1, 2, 4, 8, 16};
static const int vpps[] = {1, 2, 4, 5};
static const int mbss[] = {1, 2, 4};
#define N(a) ((int)(sizeof a / sizeof a[0]))

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void tr_plan_candidate_overrides(const tr_plan_candidate *k, char *buf, size_t n) {
    static const char *const rc[] = {
        "model.recompute_granularity=null",
        "model.recompute_granularity=selective model.recompute_modules=[core_attn]",
        "model.recompute_granularity=full model.recompute_method=uniform "
        "model.recompute_num_layers=1"};
    char vpp[64] = "model.virtual_pipeline_model_parallel_size=null";
    if (k->vpp > 1)
        snprintf(vpp, sizeof vpp, "model.virtual_pipeline_model_parallel_size=%d", k->vpp);
    /* TP communication overlap needs TP (and SP); the parameter all-gather overlap needs the
     * distributed optimizer: a recipe's switches are turned off where the layout has neither */
    const char *tpo =
        k->tp > 1 ? "" : " comm_overlap.tp_comm_overlap=false model.tp_comm_overlap=false";
    const char *pgo = k->dist_opt
                          ? ""
                          : " comm_overlap.overlap_param_gather=false "
                            "ddp.overlap_param_gather=false optimizer.overlap_param_gather=false";
    snprintf(buf, n,
             "model.tensor_model_parallel_size=%d model.pipeline_model_parallel_size=%d %s "
             "model.context_parallel_size=%d model.expert_model_parallel_size=%d "
             "model.sequence_parallel=%s train.micro_batch_size=%d %s "
             "ddp.use_distributed_optimizer=%s optimizer.use_distributed_optimizer=%s%s%s",
             k->tp, k->pp, vpp, k->cp, k->ep, k->sp ? "true" : "false", k->mbs, rc[k->recompute],
             k->dist_opt ? "true" : "false", k->dist_opt ? "true" : "false", tpo, pgo);
}

static void count_why(tr_plan_search *s, const char *id) {
    for (int i = 0; i < s->n_why; i++)
        if (strcmp(s->why[i].id, id) == 0) {
            s->why[i].count++;
            return;
        }
    tr_plan_rejection *w = realloc(s->why, (size_t)(s->n_why + 1) * sizeof *w);
    if (!w) return;
    s->why = w;
    snprintf(w[s->n_why].id, sizeof w[s->n_why].id, "%s", id);
    w[s->n_why++].count = 1;
}

/* Applies candidate k to a copy of base; every override goes through the field table's parser. */
static tr_status apply(tr_config *c, const tr_plan_candidate *k, tr_diags *d) {
    char buf[1024];
    tr_plan_candidate_overrides(k, buf, sizeof buf);
    tr_origin o = tr_origin_make(TR_ORIGIN_API, "search-layouts");
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        if (!eq) return TR_ERR_INVALID;
        *eq = 0;
        /* a list value in the override's [a,b] form */
        if (eq[1] == '[') {
            char *item = eq + 2;
            item[strcspn(item, "]")] = 0;
            const char *items[1] = {item};
            TR_TRY(tr_config_set_strlist(c, TR_FID_model_recompute_modules, items, 1));
            continue;
        }
        TR_TRY(tr_config_set_text(c, tok, eq + 1, &o, d));
    }
    return TR_OK;
}

static void keep(tr_plan_search *s, const tr_plan_candidate *k, int top_k) {
    int at = s->n_best;
    while (at > 0 && s->best[at - 1].plan.step_s > k->plan.step_s) at--;
    if (at >= top_k) return;
    int n = s->n_best < top_k ? s->n_best + 1 : top_k;
    memmove(&s->best[at + 1], &s->best[at], (size_t)(n - at - 1) * sizeof *s->best);
    s->best[at] = *k;
    s->n_best = n;
}

static void try_one(const tr_config *base, tr_world w, const tr_plan_gpu *gpu, int top_k,
                    tr_plan_cache *cache, tr_plan_candidate *k, tr_plan_search *s) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    s->tried++;
    if (tr_config_copy(&c, base) != TR_OK) {
        tr_diags_free(&d);
        return;
    }
    tr_validate_opts vo = {.check_files = false};
    double t0 = now_s();
    tr_status st = apply(&c, k, &d);
    if (st == TR_OK) st = tr_config_finalize(&c, &w, &d);
    if (st == TR_OK) st = tr_config_validate(&c, &vo, &d);
    double t1 = now_s();
    s->validate_seconds += t1 - t0;
    if (st == TR_OK && d.n_errors == 0) {
        s->valid++;
        k->dp = (int)c.derived.data_parallel_size;
        tr_diags pd;
        tr_diags_init(&pd);
        tr_status ps = tr_plan_make_cached(&c, gpu, cache, &k->plan, &pd);
        s->plan_seconds += now_s() - t1;
        if (ps != TR_OK) {
            count_why(s, pd.n > 0 ? pd.items[0].id : "plan.failed");
        } else if (!k->plan.fits) {
            count_why(s, "memory");
        } else {
            s->fit++;
            keep(s, k, top_k);
        }
        tr_diags_free(&pd);
    } else {
        /* every rule the candidate breaks, once each */
        for (int i = 0; i < d.n; i++) {
            if (d.items[i].severity != TR_SEV_ERROR) continue;
            bool seen = false;
            for (int j = 0; j < i && !seen; j++)
                seen = d.items[j].severity == TR_SEV_ERROR &&
                       strcmp(d.items[j].id, d.items[i].id) == 0;
            if (!seen) count_why(s, d.items[i].id);
        }
        if (d.n_errors == 0) count_why(s, "config.set");
    }
    tr_config_free(&c);
    tr_diags_free(&d);
}

tr_status tr_plan_search_layouts(const tr_config *base, tr_world w, const tr_plan_gpu *gpu,
                                 int top_k, tr_plan_search *s, tr_diags *d) {
    (void)d;
    memset(s, 0, sizeof *s);
    if (top_k < 1) top_k = 1;
    s->best = calloc((size_t)top_k + 1, sizeof *s->best);
    if (!s->best) return TR_ERR_NOMEM;
    tr_plan_cache *cache = NULL;
    TR_TRY(tr_plan_cache_create(&cache));
    double t0 = now_s();
    for (int a = 0; a < N(tps); a++)
        for (int b = 0; b < N(cps); b++)
            for (int p = 0; p < N(pps); p++)
                for (int v = 0; v < N(vpps); v++)
                    for (int m = 0; m < N(mbss); m++)
                        for (int r = 0; r < 3; r++)
                            for (int o = 0; o < 2; o++) {
                                int tp = tps[a], cp = cps[b], pp = pps[p];
                                if ((int64_t)tp * cp * pp > w.world_size ||
                                    w.world_size % (tp * cp * pp))
                                    continue;
                                if (pp == 1 && vpps[v] > 1) continue;
                                /* one data-parallel rank: nothing to shard, the same layout */
                                if (o == 0 && w.world_size / (tp * cp * pp) == 1) continue;
                                tr_plan_candidate k = {.tp = tp,
                                                       .pp = pp,
                                                       .vpp = vpps[v],
                                                       .cp = cp,
                                                       .ep = 1,
                                                       .etp = 1,
                                                       .mbs = mbss[m],
                                                       .recompute = r,
                                                       .dist_opt = o == 0,
                                                       .sp = tp > 1};
                                try_one(base, w, gpu, top_k, cache, &k, s);
                            }
    s->seconds = now_s() - t0;
    tr_plan_cache_stats(cache, &s->memo_hits, &s->memo_misses);
    tr_plan_cache_free(cache);
    return TR_OK;
}

void tr_plan_search_free(tr_plan_search *s) {
    free(s->best);
    free(s->why);
    memset(s, 0, sizeof *s);
}

void tr_plan_search_print(FILE *out, const tr_plan_search *s, bool json) {
    char ov[1024];
    if (json) {
        fprintf(out,
                "{\"tried\":%d,\"valid\":%d,\"fit\":%d,\"seconds\":%.6g,\"validate_seconds\":%.6g,"
                "\"plan_seconds\":%.6g,\"rejected\":{",
                s->tried, s->valid, s->fit, s->seconds, s->validate_seconds, s->plan_seconds);
        for (int i = 0; i < s->n_why; i++)
            fprintf(out, "%s\"%s\":%d", i ? "," : "", s->why[i].id, s->why[i].count);
        fprintf(out, "},\"top\":[");
        for (int i = 0; i < s->n_best; i++) {
            const tr_plan_candidate *k = &s->best[i];
            tr_plan_candidate_overrides(k, ov, sizeof ov);
            fprintf(out, "%s{\"rank\":%d,\"overrides\":\"%s\",\"plan\":", i ? "," : "", i + 1, ov);
            tr_plan_print_json(out, &k->plan);
            fprintf(out, "}");
        }
        fprintf(out, "]}\n");
        return;
    }
    fprintf(out,
            "search: %d layouts tried, %d valid, %d fit (%.3f s: %.3f s resolving and validating, "
            "%.3f s planning; memo %lld hits, %lld misses)\n",
            s->tried, s->valid, s->fit, s->seconds, s->validate_seconds, s->plan_seconds,
            (long long)s->memo_hits, (long long)s->memo_misses);
    for (int i = 0; i < s->n_why; i++)
        fprintf(out, "  rejected %6d  %s\n", s->why[i].count, s->why[i].id);
    for (int i = 0; i < s->n_best; i++) {
        const tr_plan_candidate *k = &s->best[i];
        const tr_plan *p = &k->plan;
        tr_plan_candidate_overrides(k, ov, sizeof ov);
        fprintf(out,
                "#%d TP %d PP %d VPP %d CP %d DP %d mbs %d recompute %s dist-opt %s: step %.3f s, "
                "MFU %.1f%%, largest rank %.1f GiB\n   %s\n",
                i + 1, k->tp, k->pp, k->vpp, k->cp, k->dp, k->mbs,
                k->recompute == 2 ? "full"
                : k->recompute    ? "selective"
                                  : "none",
                k->dist_opt ? "on" : "off", p->step_s, 100.0 * p->mfu,
                (double)p->peak_total / (1024.0 * 1024.0 * 1024.0), ov);
    }
}
