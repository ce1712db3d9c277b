/* The layout search (runtime/plan/plan.h): every combination of the axes below is set on a copy
 * of the resolved config as the overrides a user would give, finalized for the world and
 * validated by the same rules as a dry run (capability rules included: what the runtime cannot
 * run is refused under its rule id), then planned; what does not fit the device is counted as
 * "memory". The fastest fitting layouts are kept. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/field.h"
#include "core/field_parse.h"
#include "core/validate.h"
#include "runtime/plan/plan_internal.h"

static const int tps[] = {1, 2, 4, 8};
static const int cps[] = {1, 2};
static const int pps[] = {1, 2, 4, 8, 16};
static const int vpps[] = {1, 2, 4, 5};
static const int mbss[] = {1, 2, 4};
/* MoE models only */
static const int eps[] = {1, 2, 4, 8, 16, 32, 64};
#define N(a) ((int)(sizeof a / sizeof a[0]))

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A candidate's overrides as field-table entries: the one list both the printed text (what a
 * user gives to select the layout) and the typed fast path are made from. */
enum { OV_INT, OV_BOOL, OV_NULL, OV_ENUM, OV_LIST };
typedef struct ov {
    int fid, kind;
    int64_t i;
    const char *s; /* OV_ENUM: the value's name; OV_LIST: the one item */
} ov;
enum { MAX_OV = 24 };

static int candidate_ovs(const tr_plan_candidate *k, ov *o) {
    int n = 0;
#define PUT(f, kd, iv, sv) o[n++] = (ov){TR_FID_##f, kd, iv, sv}
    PUT(model_tensor_model_parallel_size, OV_INT, k->tp, NULL);
    PUT(model_pipeline_model_parallel_size, OV_INT, k->pp, NULL);
    if (k->vpp > 1)
        PUT(model_virtual_pipeline_model_parallel_size, OV_INT, k->vpp, NULL);
    else
        PUT(model_virtual_pipeline_model_parallel_size, OV_NULL, 0, NULL);
    PUT(model_context_parallel_size, OV_INT, k->cp, NULL);
    PUT(model_expert_model_parallel_size, OV_INT, k->ep, NULL);
    if (k->etp > 0) PUT(model_expert_tensor_parallel_size, OV_INT, k->etp, NULL);
    PUT(model_sequence_parallel, OV_BOOL, k->sp, NULL);
    PUT(train_micro_batch_size, OV_INT, k->mbs, NULL);
    if (k->recompute == 0) PUT(model_recompute_granularity, OV_NULL, 0, NULL);
    if (k->recompute == 1) {
        PUT(model_recompute_granularity, OV_ENUM, 0, "selective");
        PUT(model_recompute_modules, OV_LIST, 0, "core_attn");
    }
    if (k->recompute == 2) {
        PUT(model_recompute_granularity, OV_ENUM, 0, "full");
        PUT(model_recompute_method, OV_ENUM, 0, "uniform");
        PUT(model_recompute_num_layers, OV_INT, 1, NULL);
    }
    PUT(ddp_use_distributed_optimizer, OV_BOOL, k->dist_opt, NULL);
    PUT(optimizer_use_distributed_optimizer, OV_BOOL, k->dist_opt, NULL);
    /* TP communication overlap needs TP (and SP); the parameter all-gather overlap needs the
     * distributed optimizer: a recipe's switches are turned off where the layout has neither */
    if (k->tp <= 1) {
        PUT(comm_overlap_tp_comm_overlap, OV_BOOL, 0, NULL);
        PUT(model_tp_comm_overlap, OV_BOOL, 0, NULL);
    }
    if (!k->dist_opt) {
        PUT(comm_overlap_overlap_param_gather, OV_BOOL, 0, NULL);
        PUT(ddp_overlap_param_gather, OV_BOOL, 0, NULL);
        PUT(optimizer_overlap_param_gather, OV_BOOL, 0, NULL);
    }
#undef PUT
    return n;
}

static void ov_text(const ov *v, char *buf, size_t n) {
    const char *path = tr_fields[v->fid].path;
    switch (v->kind) {
    case OV_INT:
        snprintf(buf, n, "%s=%lld", path, (long long)v->i);
        break;
    case OV_BOOL:
        snprintf(buf, n, "%s=%s", path, v->i ? "true" : "false");
        break;
    case OV_NULL:
        snprintf(buf, n, "%s=null", path);
        break;
    case OV_ENUM:
        snprintf(buf, n, "%s=%s", path, v->s);
        break;
    default:
        snprintf(buf, n, "%s=[%s]", path, v->s);
        break;
    }
}

void tr_plan_candidate_overrides(const tr_plan_candidate *k, char *buf, size_t n) {
    ov o[MAX_OV];
    int m = candidate_ovs(k, o);
    size_t at = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < m && at + 1 < n; i++) {
        char one[160];
        ov_text(&o[i], one, sizeof one);
        int w = snprintf(buf + at, n - at, "%s%s", i ? " " : "", one);
        if (w < 0) break;
        at += (size_t)w;
    }
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

/* The plain path: every override as the text a user types, through the field table's parser. */
static tr_status apply_text(tr_config *c, const ov *o, int n, tr_diags *d) {
    tr_origin org = tr_origin_make(TR_ORIGIN_API, "search-layouts");
    for (int i = 0; i < n; i++) {
        char tok[160];
        ov_text(&o[i], tok, sizeof tok);
        char *eq = strchr(tok, '=');
        *eq = 0;
        /* a list value in the override's [a,b] form */
        if (eq[1] == '[') {
            char *item = eq + 2;
            item[strcspn(item, "]")] = 0;
            const char *items[1] = {item};
            TR_TRY(tr_config_set_strlist(c, o[i].fid, items, 1));
            continue;
        }
        TR_TRY(tr_config_set_text(c, tok, eq + 1, &org, d));
    }
    return TR_OK;
}

/* The fast path: the same values stored through the field table's types (the storage
 * tr_config_set writes, its range check, the origin it records), without the text round trip
 * or a history entry (a scratch candidate has none). */
typedef struct in_range {
    int fid;
    int64_t v;
} in_range;
enum { MAX_IN_RANGE = 64 };
typedef struct range_memo {
    in_range ok[MAX_IN_RANGE]; /* (field, value) pairs its range admits (the range is fixed) */
    int n;
} range_memo;

/* tr_range_check parses the field's range text each call; a search stores a few values per
 * field thousands of times */
static bool in_range_of(range_memo *m, const tr_field *f, int64_t v) {
    for (int i = 0; i < m->n; i++)
        if (m->ok[i].fid == f->id && m->ok[i].v == v) return true;
    char why[96];
    if (!tr_range_check(f->range, (double)v, why, sizeof why)) return false;
    if (m->n < MAX_IN_RANGE) m->ok[m->n++] = (in_range){f->id, v};
    return true;
}

static tr_status apply_typed(tr_config *c, const ov *o, int n, range_memo *rm) {
    tr_origin org = tr_origin_make(TR_ORIGIN_API, "search-layouts");
    for (int i = 0; i < n; i++) {
        const tr_field *f = &tr_fields[o[i].fid];
        void *p = tr_config_field_ptr(c, f);
        if (o[i].kind == OV_LIST) {
            TR_TRY(tr_config_set_strlist(c, o[i].fid, &o[i].s, 1));
            continue;
        }
        bool null = o[i].kind == OV_NULL;
        if (null && !tr_field_is_nullable(f)) return TR_ERR_INVALID;
        switch (f->type) {
        case TR_T_BOOL:
            if (null || o[i].kind != OV_BOOL) return TR_ERR_INVALID;
            *(bool *)p = o[i].i != 0;
            break;
        case TR_T_OBOOL:
            if (!null && o[i].kind != OV_BOOL) return TR_ERR_INVALID;
            *(int8_t *)p = null ? -1 : o[i].i != 0;
            break;
        case TR_T_INT:
        case TR_T_OINT: {
            if (null) {
                *(int64_t *)p = TR_NULL_INT;
                break;
            }
            if (o[i].kind != OV_INT || !in_range_of(rm, f, o[i].i)) return TR_ERR_INVALID;
            *(int64_t *)p = o[i].i;
            break;
        }
        case TR_T_ENUM:
        case TR_T_OENUM: {
            int idx = null ? -1 : o[i].kind == OV_ENUM ? tr_enum_lookup(f->enm, o[i].s) : -1;
            if (!null && idx < 0) return TR_ERR_INVALID;
            *(int32_t *)p = idx;
            break;
        }
        default:
            return TR_ERR_INVALID;
        }
        c->origin[f->id] = org;
    }
    return TR_OK;
}

static void keep(tr_plan_candidate *best, int *n_best, const tr_plan_candidate *k, int top_k) {
    int at = *n_best;
    while (at > 0 && best[at - 1].plan.step_s > k->plan.step_s) at--;
    if (at >= top_k) return;
    int n = *n_best < top_k ? *n_best + 1 : top_k;
    memmove(&best[at + 1], &best[at], (size_t)(n - at - 1) * sizeof *best);
    best[at] = *k;
    *n_best = n;
}

/* The rejecting ids of a candidate, as counted and as the verdict reports them. */
static void reject(tr_plan_search *s, tr_plan_verdict *v, const char *id) {
    count_why(s, id);
    size_t at = strlen(v->why);
    snprintf(v->why + at, sizeof v->why - at, "%s%s", at ? "," : "", id);
}

/* The fast path's configs: one scratch candidate reset to the base before each, and `before`,
 * kept holding the scratch's values ahead of its finalize (tr_config_finalize_against). Only the
 * fields the last candidate's overrides and finalize changed can differ from the base, so only
 * they are reset (all of them when finalize changed more than the list holds, or failed). */
enum { MAX_DIRTY = 512 };
typedef struct fast_cfg {
    tr_config scratch, before;
    int dirty[MAX_DIRTY + MAX_OV], n_dirty; /* scratch's fields that may differ from the base */
    int ov_prev[MAX_OV], n_ov_prev;         /* before's fields that may differ from the base */
    bool all;                               /* reset every field */
    range_memo ranges;
} fast_cfg;

/* Resets the scratch to base and applies the overrides; before then holds its values. */
static tr_status fast_prepare(fast_cfg *f, const tr_config *base, const ov *o, int n) {
    TR_TRY(f->all ? tr_config_reset_to(&f->scratch, base)
                  : tr_config_reset_fields(&f->scratch, base, f->dirty, f->n_dirty));
    f->all = false;
    f->n_dirty = 0;
    for (int i = 0; i < n; i++) f->dirty[f->n_dirty++] = o[i].fid;
    TR_TRY(apply_typed(&f->scratch, o, n, &f->ranges));
    int both[2 * MAX_OV], nb = 0;
    for (int i = 0; i < f->n_ov_prev; i++) both[nb++] = f->ov_prev[i];
    for (int i = 0; i < n; i++) both[nb++] = o[i].fid;
    TR_TRY(tr_config_reset_fields(&f->before, &f->scratch, both, nb));
    for (int i = 0; i < n; i++) f->ov_prev[i] = o[i].fid;
    f->n_ov_prev = n;
    return TR_OK;
}

static tr_status fast_finalize(fast_cfg *f, tr_world w, tr_diags *d) {
    int changed[MAX_DIRTY], n = 0;
    tr_status st =
        tr_config_finalize_against(&f->scratch, &w, &f->before, changed, MAX_DIRTY, &n, d);
    if (st != TR_OK || n > MAX_DIRTY) {
        f->all = true;
        return st;
    }
    for (int i = 0; i < n; i++) f->dirty[f->n_dirty++] = changed[i];
    return TR_OK;
}

/* The plain path plans every candidate in full without the memo; the fast path through the
 * memo, and stops at a lower bound that proves a candidate does not fit (tr_plan_make_bounded). */
static tr_status plan_one(const tr_config *c, const tr_plan_gpu *gpu, const tr_plan_search_opts *so,
                          tr_plan_cache *cache, tr_plan *p, tr_diags *d) {
    return so->plain ? tr_plan_make_cached(c, gpu, NULL, p, d)
                     : tr_plan_make_bounded(c, gpu, cache, p, d);
}

/* fc: NULL for a fresh deep copy of base (the plain path), else the fast path's configs */
static void try_one(const tr_config *base, fast_cfg *fc, tr_world w, const tr_plan_gpu *gpu,
                    int top_k, const tr_plan_search_opts *so, tr_plan_cache *cache,
                    tr_plan_candidate *k, tr_plan_search *s) {
    tr_config own, *c = fc ? &fc->scratch : &own;
    tr_diags d;
    tr_diags_init(&d);
    tr_plan_verdict v = {.k = k};
    s->tried++;
    double t0 = now_s();
    ov o[MAX_OV];
    int n = candidate_ovs(k, o);
    if (!fc && tr_config_copy(&own, base) != TR_OK) {
        tr_diags_free(&d);
        return;
    }
    /* the verdict is the errors; the fast path runs the error rules alone (the same errors) */
    tr_validate_opts vo = {.check_files = false, .errors_only = !so->plain};
    tr_status st = fc ? fast_prepare(fc, base, o, n) : apply_text(c, o, n, &d);
    if (st == TR_OK) st = fc ? fast_finalize(fc, w, &d) : tr_config_finalize(c, &w, &d);
    bool finalized = st == TR_OK && d.n_errors == 0;
    if (st == TR_OK) st = tr_config_validate(c, &vo, &d);
    double t1 = now_s();
    s->validate_seconds += t1 - t0;
    if (st == TR_OK && d.n_errors == 0) {
        s->valid++;
        k->dp = (int)c->derived.data_parallel_size;
        tr_diags pd;
        tr_diags_init(&pd);
        tr_status ps = plan_one(c, gpu, so, cache, &k->plan, &pd);
        s->plan_seconds += now_s() - t1;
        v.planned = ps == TR_OK;
        if (ps != TR_OK) {
            reject(s, &v, pd.n > 0 ? pd.items[0].id : "plan.failed");
        } else if (!k->plan.fits) {
            reject(s, &v, "memory");
        } else {
            s->fit++;
            keep(s->best, &s->n_best, k, top_k);
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
            if (!seen) reject(s, &v, d.items[i].id);
        }
        if (d.n_errors == 0) reject(s, &v, "config.set");
        /* refused by the runtime's capability rules alone (runtime.*: not built yet) on a
         * finalized config: planned as predicted only, ranked apart */
        bool refused = finalized && d.n_errors > 0;
        for (int i = 0; i < d.n && refused; i++)
            refused =
                d.items[i].severity != TR_SEV_ERROR || strncmp(d.items[i].id, "runtime.", 8) == 0;
        if (refused) {
            k->dp = (int)c->derived.data_parallel_size;
            tr_diags pd;
            tr_diags_init(&pd);
            double t2 = now_s();
            if (plan_one(c, gpu, so, cache, &k->plan, &pd) == TR_OK) {
                k->plan.predicted_only = true;
                memcpy(k->plan.refused_by, v.why, sizeof k->plan.refused_by - 1);
                k->plan.refused_by[sizeof k->plan.refused_by - 1] = 0;
                s->predicted++;
                if (k->plan.fits) {
                    s->predicted_fit++;
                    keep(s->pred, &s->n_pred, k, top_k);
                }
            }
            s->plan_seconds += now_s() - t2;
            tr_diags_free(&pd);
        }
    }
    if (so->each) so->each(so->ctx, &v);
    if (!fc) tr_config_free(c);
    tr_diags_free(&d);
}

tr_status tr_plan_search_layouts(const tr_config *base, tr_world w, const tr_plan_gpu *gpu,
                                 int top_k, tr_plan_search *s, tr_diags *d) {
    tr_plan_search_opts o = {0};
    return tr_plan_search_layouts_with(base, w, gpu, top_k, &o, s, d);
}

tr_status tr_plan_search_layouts_with(const tr_config *base, tr_world w, const tr_plan_gpu *gpu,
                                      int top_k, const tr_plan_search_opts *so, tr_plan_search *s,
                                      tr_diags *d) {
    (void)d;
    memset(s, 0, sizeof *s);
    if (top_k < 1) top_k = 1;
    s->best = calloc((size_t)top_k + 1, sizeof *s->best);
    s->pred = calloc((size_t)top_k + 1, sizeof *s->pred);
    if (!s->best || !s->pred) {
        tr_plan_search_free(s);
        return TR_ERR_NOMEM;
    }
    bool moe = base->model.num_moe_experts != TR_NULL_INT && base->model.num_moe_experts > 0;
    tr_plan_cache *cache = so->cache;
    if (!cache) TR_TRY(tr_plan_cache_create(&cache));
    double t0 = now_s();
    /* the candidates' scratch base: the values and origins, without the history and the recipe
     * snapshot that each copy (and finalize's copy of it) would otherwise duplicate */
    tr_config lean;
    fast_cfg *fc = NULL;
    const tr_config *from = base;
    if (!so->plain) {
        tr_status cs = tr_config_copy(&lean, base);
        if (cs != TR_OK) {
            if (cache != so->cache) tr_plan_cache_free(cache);
            return cs;
        }
        tr_config_drop_history(&lean);
        from = &lean;
        fc = calloc(1, sizeof *fc);
        if (!fc) cs = TR_ERR_NOMEM;
        if (cs == TR_OK) cs = tr_config_copy(&fc->scratch, &lean);
        if (cs == TR_OK) cs = tr_config_copy(&fc->before, &lean);
        if (cs != TR_OK) {
            if (fc) tr_config_free(&fc->scratch), tr_config_free(&fc->before);
            free(fc);
            tr_config_free(&lean);
            if (cache != so->cache) tr_plan_cache_free(cache);
            return cs;
        }
    }
    for (int a = 0; a < N(tps); a++)
        for (int b = 0; b < N(cps); b++)
            for (int p = 0; p < N(pps); p++)
                for (int v = 0; v < N(vpps); v++)
                    for (int m = 0; m < N(mbss); m++)
                        for (int r = 0; r < 3; r++)
                            for (int o = 0; o < 2; o++)
                                for (int e = 0; e < (moe ? N(eps) : 1); e++)
                                    for (int t = 0; t < (moe ? 2 : 1); t++) {
                                        int tp = tps[a], cp = cps[b], pp = pps[p], ep = eps[e];
                                        /* ETP 1, or the dense layers' TP */
                                        int etp = !moe ? 0 : t ? tp : 1;
                                        if (t && tp == 1) continue;
                                        if ((int64_t)tp * cp * pp > w.world_size ||
                                            w.world_size % (tp * cp * pp))
                                            continue;
                                        if (moe && (ep > base->model.num_moe_experts ||
                                                    w.world_size % ((int64_t)ep * etp * pp)))
                                            continue;
                                        if (pp == 1 && vpps[v] > 1) continue;
                                        /* one data-parallel rank: nothing to shard */
                                        if (o == 0 && w.world_size / (tp * cp * pp) == 1) continue;
                                        tr_plan_candidate k = {.tp = tp,
                                                               .pp = pp,
                                                               .vpp = vpps[v],
                                                               .cp = cp,
                                                               .ep = ep,
                                                               .etp = etp,
                                                               .mbs = mbss[m],
                                                               .recompute = r,
                                                               .dist_opt = o == 0,
                                                               .sp = tp > 1};
                                        try_one(from, fc, w, gpu, top_k, so, cache, &k, s);
                                    }
    if (!so->plain) {
        tr_config_free(&fc->before);
        tr_config_free(&fc->scratch);
        free(fc);
        tr_config_free(&lean);
    }
    s->seconds = now_s() - t0;
    tr_plan_cache_stats(cache, &s->memo_hits, &s->memo_misses);
    if (cache != so->cache) tr_plan_cache_free(cache);
    return TR_OK;
}

void tr_plan_search_free(tr_plan_search *s) {
    free(s->best);
    free(s->pred);
    free(s->why);
    memset(s, 0, sizeof *s);
}

static void print_json_list(FILE *out, const char *name, const tr_plan_candidate *l, int n) {
    char ov[1024];
    fprintf(out, ",\"%s\":[", name);
    for (int i = 0; i < n; i++) {
        tr_plan_candidate_overrides(&l[i], ov, sizeof ov);
        fprintf(out, "%s{\"rank\":%d,\"overrides\":\"%s\",\"plan\":", i ? "," : "", i + 1, ov);
        tr_plan_print_json(out, &l[i].plan);
        fprintf(out, "}");
    }
    fprintf(out, "]");
}

static void print_text_list(FILE *out, const tr_plan_candidate *l, int n) {
    char ov[1024];
    for (int i = 0; i < n; i++) {
        const tr_plan_candidate *k = &l[i];
        const tr_plan *p = &k->plan;
        tr_plan_candidate_overrides(k, ov, sizeof ov);
        char ex[48] = "";
        if (k->etp > 0) snprintf(ex, sizeof ex, " EP %d ETP %d", k->ep, k->etp);
        fprintf(out,
                "#%d TP %d PP %d VPP %d CP %d DP %d%s mbs %d recompute %s dist-opt %s: step "
                "%.3f s, MFU %.1f%%, largest rank %.1f GiB\n   %s\n",
                i + 1, k->tp, k->pp, k->vpp, k->cp, k->dp, ex, k->mbs,
                k->recompute == 2 ? "full"
                : k->recompute    ? "selective"
                                  : "none",
                k->dist_opt ? "on" : "off", p->step_s, 100.0 * p->mfu,
                (double)p->peak_total / (1024.0 * 1024.0 * 1024.0), ov);
        if (p->predicted_only) fprintf(out, "   refused by: %s\n", p->refused_by);
    }
}

void tr_plan_search_print(FILE *out, const tr_plan_search *s, bool json) {
    if (json) {
        fprintf(out,
                "{\"tried\":%d,\"valid\":%d,\"fit\":%d,\"predicted\":%d,\"predicted_fit\":%d,"
                "\"seconds\":%.6g,\"validate_seconds\":%.6g,\"plan_seconds\":%.6g,\"rejected\":{",
                s->tried, s->valid, s->fit, s->predicted, s->predicted_fit, s->seconds,
                s->validate_seconds, s->plan_seconds);
        for (int i = 0; i < s->n_why; i++)
            fprintf(out, "%s\"%s\":%d", i ? "," : "", s->why[i].id, s->why[i].count);
        fprintf(out, "}");
        print_json_list(out, "top", s->best, s->n_best);
        print_json_list(out, "predicted_top", s->pred, s->n_pred);
        fprintf(out, "}\n");
        return;
    }
    fprintf(out,
            "search: %d layouts tried, %d valid, %d fit (%.3f s: %.3f s resolving and validating, "
            "%.3f s planning; memo %lld hits, %lld misses)\n",
            s->tried, s->valid, s->fit, s->seconds, s->validate_seconds, s->plan_seconds,
            (long long)s->memo_hits, (long long)s->memo_misses);
    for (int i = 0; i < s->n_why; i++)
        fprintf(out, "  rejected %6d  %s\n", s->why[i].count, s->why[i].id);
    print_text_list(out, s->best, s->n_best);
    if (s->predicted > 0) {
        fprintf(out,
                "predicted only: %d layouts the runtime's capability rules alone refuse were "
                "planned from Megatron's semantics, %d fit; the fastest:\n",
                s->predicted, s->predicted_fit);
        print_text_list(out, s->pred, s->n_pred);
    }
}
