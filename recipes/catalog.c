/* Catalog validation. Each recipe's inputs are resolved once (defaults, recipe, overrides) and
 * then finalized and validated per world size from a copy, which keeps the whole catalog over a
 * dozen world sizes well under a frame of wall time. */
#include "recipes/catalog.h"

#include <stdlib.h>
#include <string.h>

#include "recipes/resolve.h"

static int64_t gcd(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Does the layout of c (not yet finalized) fit W GPUs with its batch sizes? Beyond the grid and
 * the batch split, an interleaved pipeline needs at least one microbatch group per step: past
 * the data-parallel size where GBS / (MBS * DP) drops below it, no schedule exists, which is a
 * property of the layout at that size and not a defect of the recipe. */
static bool layout_fits(const tr_config *c, int64_t w) {
    const tr_model_config *m = &c->model;
    int64_t tp = m->tensor_model_parallel_size, pp = m->pipeline_model_parallel_size;
    int64_t cp = m->context_parallel_size, ep = m->expert_model_parallel_size;
    int64_t etp = m->expert_tensor_parallel_size;
    if (etp == TR_NULL_INT) etp = ep > 1 ? 1 : tp;
    if (tp < 1 || pp < 1 || cp < 1 || ep < 1 || etp < 1) return true; /* validate() says why */
    int64_t dense = tp * cp, expert = ep * etp;
    int64_t block = pp * (dense / gcd(dense, expert) * expert);
    if (w % block) return false;
    int64_t dp = w / (tp * pp * cp);
    int64_t gbs = c->train.global_batch_size, mbs = c->train.micro_batch_size;
    if (gbs == TR_NULL_INT || mbs == TR_NULL_INT || mbs < 1) return true;
    if (gbs % (mbs * dp)) return false;
    int64_t microbatches = gbs / (mbs * dp);
    if (m->virtual_pipeline_model_parallel_size != TR_NULL_INT && pp > 1) {
        int64_t group = m->microbatch_group_size_per_vp_stage;
        if (group == TR_NULL_INT) group = pp;
        if (microbatches < group) return false;
    }
    return true;
}

typedef struct seen_ids {
    char **ids;
    int n, cap;
} seen_ids;

/* Remember a launch requirement id; true the first time it is seen for this recipe. */
static bool first_time(seen_ids *s, const char *id) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->ids[i], id)) return false;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        char **v = realloc(s->ids, (size_t)cap * sizeof *v);
        if (!v) return true;
        s->ids = v;
        s->cap = cap;
    }
    s->ids[s->n] = strdup(id);
    if (s->ids[s->n]) s->n++;
    return true;
}

static void seen_free(seen_ids *s) {
    for (int i = 0; i < s->n; i++) free(s->ids[i]);
    free(s->ids);
    memset(s, 0, sizeof *s);
}

/* world 0: the inputs themselves are wrong, whatever the world size. */
static void report(const char *label, int world, const tr_diags *d, const tr_catalog_opts *o,
                   seen_ids *seen, tr_catalog_result *r) {
    char where[32];
    if (world > 0)
        snprintf(where, sizeof where, "%d", world);
    else
        snprintf(where, sizeof where, "any");
    for (int i = 0; i < d->n; i++) {
        const tr_diag *g = &d->items[i];
        if (!strncmp(g->id, "launch.", 7)) {
            if (!first_time(seen, g->id)) continue;
            r->requirements++;
            if (o->requirements)
                fprintf(o->requirements, "%s: needs at launch: %s: %s\n", label, g->id, g->message);
            continue;
        }
        if (!strncmp(g->id, "runtime.", 8) && g->severity == TR_SEV_NOTE) {
            /* A valid configuration the runtime cannot train yet: listed once per recipe and
             * rule, not a catalog failure. */
            if (!first_time(seen, g->id)) continue;
            r->refusals++;
            if (o->requirements)
                fprintf(o->requirements, "%s @ world %s: not trained by this runtime: %s: %s\n",
                        label, where, g->id, g->message);
            continue;
        }
        if (g->severity != TR_SEV_ERROR) continue;
        r->failures++;
        if (o->failures)
            fprintf(o->failures, "%s @ world %s: %s: %s\n", label, where, g->id, g->message);
    }
}

/* Check one recipe (registry name or YAML file) at its minimum world size and the given sizes. */
static int check_one(const char *label, const tr_resolve_opts *base, int min_world,
                     const tr_catalog_opts *o, tr_catalog_result *r) {
    tr_config inputs;
    tr_diags d;
    tr_diags_init(&d);
    seen_ids seen = {NULL, 0, 0};
    r->recipes++;
    tr_status s = tr_resolve_inputs(base, &inputs, &d);
    if (s == TR_ERR_NOMEM) {
        tr_config_free(&inputs);
        tr_diags_free(&d);
        return -1;
    }
    if (s != TR_OK) {
        report(label, 0, &d, o, &seen, r);
        tr_config_free(&inputs);
        tr_diags_free(&d);
        seen_free(&seen);
        return 0;
    }
    if (min_world < 1) {
        /* A YAML recipe's minimum is whatever its layout needs. */
        const tr_model_config *m = &inputs.model;
        int64_t etp = m->expert_tensor_parallel_size;
        if (etp == TR_NULL_INT)
            etp = m->expert_model_parallel_size > 1 ? 1 : m->tensor_model_parallel_size;
        int64_t dense = m->tensor_model_parallel_size * m->context_parallel_size;
        int64_t expert = m->expert_model_parallel_size * etp;
        int64_t need = m->pipeline_model_parallel_size * (dense / gcd(dense, expert) * expert);
        min_world = need > 0 && need < (1 << 30) ? (int)need : 1;
    }
    int status = 0;
    for (int k = -1; k < o->n_world_sizes && status == 0; k++) {
        int w = k < 0 ? min_world : o->world_sizes[k];
        if (k >= 0 && w == min_world) continue;
        if (k >= 0 && !layout_fits(&inputs, w)) {
            r->skipped++;
            continue;
        }
        tr_config c;
        if (tr_config_copy(&c, &inputs) != TR_OK) {
            status = -1;
            break;
        }
        tr_resolve_opts opts = *base;
        int gpn = o->gpus_per_node > 0 ? o->gpus_per_node : 8;
        opts.world = (tr_world){w, w < gpn ? w : gpn};
        tr_diags_clear(&d);
        s = tr_resolve_finish(&opts, &c, &d);
        if (s == TR_ERR_NOMEM) status = -1;
        r->checks++;
        report(label, w, &d, o, &seen, r);
        tr_config_free(&c);
    }
    tr_config_free(&inputs);
    tr_diags_free(&d);
    seen_free(&seen);
    return status;
}

static int count_overrides(const char *const *list) {
    int n = 0;
    while (list && list[n]) n++;
    return n;
}

int tr_catalog_validate(const tr_catalog_opts *o, tr_catalog_result *result) {
    tr_catalog_result r;
    memset(&r, 0, sizeof r);
    int n;
    const tr_recipe *list = tr_recipe_list(&n);
    int status = 0;
    for (int i = 0; i < n && status == 0; i++) {
        tr_resolve_opts base;
        memset(&base, 0, sizeof base);
        base.recipe = list[i].name;
        base.overrides = list[i].catalog_overrides;
        base.n_overrides = count_overrides(list[i].catalog_overrides);
        base.validate.catalog_mode = true;
        status = check_one(list[i].name, &base, list[i].min_world_size, o, &r);
    }
    for (int i = 0; i < o->n_yaml_recipes && status == 0; i++) {
        tr_resolve_opts base;
        memset(&base, 0, sizeof base);
        base.config_files = &o->yaml_recipes[i];
        base.n_config_files = 1;
        base.validate.catalog_mode = true;
        status = check_one(o->yaml_recipes[i], &base, 0, o, &r);
    }
    if (result) *result = r;
    return status < 0 ? -1 : r.failures;
}

static const char *mode_name(int mode) {
    switch (mode) {
    case TR_MODE_PRETRAIN:
        return "pretrain";
    case TR_MODE_SFT:
        return "sft";
    case TR_MODE_LORA:
        return "lora";
    case TR_MODE_DORA:
        return "dora";
    default:
        return "?";
    }
}

int tr_catalog_refusals(const tr_recipe *r, char *buf, size_t cap) {
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = r->name;
    o.overrides = r->catalog_overrides;
    o.n_overrides = count_overrides(r->catalog_overrides);
    int w = r->min_world_size > 0 ? r->min_world_size : 1;
    o.world = (tr_world){w, w < 8 ? w : 8};
    o.validate.catalog_mode = true;
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    tr_status s = tr_resolve(&o, &c, &d);
    size_t len = 0;
    int n = 0;
    if (cap) buf[0] = 0;
    for (int i = 0; i < d.n; i++) {
        const char *id = d.items[i].id;
        if (strncmp(id, "runtime.", 8) != 0 || d.items[i].severity != TR_SEV_NOTE) continue;
        bool seen = false;
        for (int k = 0; k < i; k++) seen |= strcmp(d.items[k].id, id) == 0;
        if (seen) continue;
        int m = snprintf(buf + len, len < cap ? cap - len : 0, "%s%s", n ? ", " : "", id);
        if (m > 0 && len + (size_t)m < cap) len += (size_t)m;
        n++;
    }
    tr_config_free(&c);
    tr_diags_free(&d);
    return s == TR_ERR_NOMEM ? -1 : n;
}

void tr_catalog_markdown(FILE *out) {
    int n;
    const tr_recipe *r = tr_recipe_list(&n);
    fprintf(out, "| recipe | mode | min GPUs | trains on this runtime | what it is |\n");
    fprintf(out, "|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        char ids[512], trains[1024] = "yes";
        int k = tr_catalog_refusals(&r[i], ids, sizeof ids);
        if (k != 0) {
            /* "no: `runtime.a`, `runtime.b`" */
            size_t len = (size_t)snprintf(trains, sizeof trains, "no: `");
            for (const char *p = k < 0 ? "?" : ids; *p && len + 4 < sizeof trains; p++) {
                if (p[0] == ',' && p[1] == ' ') {
                    len += (size_t)snprintf(trains + len, sizeof trains - len, "`, `");
                    p++;
                } else {
                    trains[len++] = *p;
                }
            }
            snprintf(trains + len, sizeof trains - len, "`");
        }
        fprintf(out, "| `%s` | %s | %d | %s | %s |\n", r[i].name, mode_name(r[i].mode),
                r[i].min_world_size, trains, r[i].doc);
    }
}
