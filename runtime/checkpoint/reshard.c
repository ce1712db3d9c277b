#include "runtime/checkpoint/reshard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parts along each dimension under the target layout (1 = not split). */
static void target_parts(const tr_ckpt_entry *e, const tr_ckpt_layout *l, int64_t *parts) {
    for (int i = 0; i < e->ndim; i++) parts[i] = 1;
    if (e->tp_axis >= 0) parts[e->tp_axis] *= l->tp;
    if (e->pp_axis >= 0) parts[e->pp_axis] *= (int64_t)l->pp * (l->vpp > 1 ? l->vpp : 1);
    if (e->dp_axis >= 0 && l->dist_opt) parts[e->dp_axis] *= l->dp;
}

/* Does the stored shard set equal the regular grid `parts` (last block takes the remainder)? */
static bool matches_grid(const tr_ckpt_entry *e, const int64_t *parts) {
    int64_t cells = 1;
    for (int i = 0; i < e->ndim; i++) cells *= parts[i];
    if (cells != e->n_shards) return false;
    for (int s = 0; s < e->n_shards; s++) {
        const tr_ckpt_slice *sl = &e->shards[s].slice;
        for (int i = 0; i < e->ndim; i++) {
            int64_t block = e->shape[i] / parts[i];
            if (block == 0 || sl->offset[i] % block != 0) return false;
            int64_t idx = sl->offset[i] / block;
            int64_t len = idx == parts[i] - 1 ? e->shape[i] - idx * block : block;
            if (idx >= parts[i] || sl->shape[i] != len) return false;
        }
    }
    return true; /* disjoint (checked at parse) and the right count and shapes: the same grid */
}

tr_status tr_ckpt_plan(const tr_ckpt_manifest *m, const tr_ckpt_layout *target,
                       tr_ckpt_plan_item **items, tr_diags *d) {
    *items = calloc((size_t)m->n_tensors + 1, sizeof **items);
    if (!*items) return TR_ERR_NOMEM;
    tr_status worst = TR_OK;
    for (int t = 0; t < m->n_tensors; t++) {
        const tr_ckpt_entry *e = &m->tensors[t];
        tr_ckpt_plan_item *it = &(*items)[t];
        it->name = e->name;
        int64_t parts[TR_CKPT_MAX_DIMS];
        target_parts(e, target, parts);
        it->kind = TR_CKPT_PLAN_IDENTICAL;
        /* A TP split must be even (every TP rank holds the same shapes); DP ranges need not be.
         * The layer axis may split unevenly: the runtime registers every layer as its own block,
         * so uneven stages (num_layers_in_first/last_pipeline_stage) read whole layers. */
        int tp_ax = e->tp_axis, pp_ax = e->pp_axis;
        if (tp_ax >= 0 && e->shape[tp_ax] % parts[tp_ax] != 0) {
            it->kind = TR_CKPT_PLAN_IMPOSSIBLE;
            snprintf(it->why, sizeof it->why,
                     "dimension %d (%lld) does not split into %lld tensor-parallel parts", tp_ax,
                     (long long)e->shape[tp_ax], (long long)parts[tp_ax]);
        } else if (pp_ax >= 0 && e->shape[pp_ax] % parts[pp_ax] != 0) {
            it->kind = TR_CKPT_PLAN_RESHARD;
            snprintf(it->why, sizeof it->why,
                     "%lld layers over %lld stages is an uneven split: it loads when "
                     "num_layers_in_first/last_pipeline_stage describe it",
                     (long long)e->shape[pp_ax], (long long)parts[pp_ax]);
            continue;
        }
        if (it->kind == TR_CKPT_PLAN_IMPOSSIBLE) {
            worst = tr_diag_add(d, TR_SEV_ERROR, "checkpoint.cannot_reshard", NULL,
                                "model.tensor_model_parallel_size",
                                "choose a tensor-parallel size that divides the tensor's dimension",
                                "tensor '%s': %s", e->name, it->why);
            continue;
        }
        if (!matches_grid(e, parts)) {
            it->kind = TR_CKPT_PLAN_RESHARD;
            snprintf(it->why, sizeof it->why,
                     "stored in %d shard(s); the target reads other slices", e->n_shards);
        }
    }
    return worst;
}

static tr_status bad_layout(tr_diags *d, const char *item, const char *why) {
    return tr_diag_add(d, TR_SEV_ERROR, "checkpoint.bad_layout", NULL, "--layout",
                       "write e.g. tp=2,pp=2,dp=1,vpp=1,dist_opt=1", "layout item '%s': %s", item,
                       why);
}

tr_status tr_ckpt_layout_parse(const char *text, tr_ckpt_layout *l, tr_diags *d) {
    static const struct {
        const char *key;
        size_t off;
        int lo, hi;
    } KEYS[] = {
        {"tp", offsetof(tr_ckpt_layout, tp), 1, 1 << 20},
        {"pp", offsetof(tr_ckpt_layout, pp), 1, 1 << 20},
        {"vpp", offsetof(tr_ckpt_layout, vpp), 1, 1 << 20},
        {"dp", offsetof(tr_ckpt_layout, dp), 1, 1 << 20},
        {"cp", offsetof(tr_ckpt_layout, cp), 1, 1 << 20},
        {"ep", offsetof(tr_ckpt_layout, ep), 1, 1 << 20},
        {"dist_opt", offsetof(tr_ckpt_layout, dist_opt), 0, 1},
        {"model.tensor_model_parallel_size", offsetof(tr_ckpt_layout, tp), 1, 1 << 20},
        {"model.pipeline_model_parallel_size", offsetof(tr_ckpt_layout, pp), 1, 1 << 20},
        {"model.virtual_pipeline_model_parallel_size", offsetof(tr_ckpt_layout, vpp), 1, 1 << 20},
        {"model.context_parallel_size", offsetof(tr_ckpt_layout, cp), 1, 1 << 20},
        {"model.expert_model_parallel_size", offsetof(tr_ckpt_layout, ep), 1, 1 << 20},
        {"ddp.use_distributed_optimizer", offsetof(tr_ckpt_layout, dist_opt), 0, 1},
    };
    char *copy = strdup(text);
    if (!copy) return TR_ERR_NOMEM;
    tr_status st = TR_OK;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item && st == TR_OK;
         item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            st = bad_layout(d, item, "expected key=value");
            break;
        }
        *eq = '\0';
        const char *val = eq + 1;
        /* null (unset in a config) means 1 for sizes and off for the optimizer flag. */
        bool is_flag = strstr(item, "dist") != NULL;
        long v = 0;
        char *end = NULL;
        bool numeric = true;
        if (strcmp(val, "true") == 0)
            v = 1;
        else if (strcmp(val, "false") == 0)
            v = 0;
        else if (strcmp(val, "null") == 0)
            v = is_flag ? 0 : 1;
        else {
            v = strtol(val, &end, 10);
            numeric = val[0] && *end == '\0';
        }
        size_t k = 0, nk = sizeof KEYS / sizeof KEYS[0];
        while (k < nk && strcmp(KEYS[k].key, item) != 0) k++;
        if (k == nk)
            st = bad_layout(d, item, "unknown key (tp, pp, vpp, dp, cp, ep, dist_opt)");
        else if (!numeric || v < KEYS[k].lo || v > KEYS[k].hi)
            st = bad_layout(d, item, "value out of range");
        else
            *(int *)((char *)l + KEYS[k].off) = (int)v;
    }
    free(copy);
    return st;
}
