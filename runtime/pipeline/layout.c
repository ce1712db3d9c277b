/* Layer assignment to virtual stages (megatron-bridge-config.md §3.4, megatron-core.md §3.2):
 * even split, uneven first/last stages, account_for_embedding/loss, and the layout string.
 * validate() has already accepted the config (core/rules/pipeline.c); the checks here only
 * guard against being handed an unvalidated one. */
#include <stdlib.h>
#include <string.h>

#include "core/pipeline_layout.h"
#include "runtime/pipeline/pipeline.h"

static tr_status bad_config(tr_diags *d, const char *keys, const char *msg) {
    tr_diag_add(d, TR_SEV_ERROR, "pipeline.schedule_layout", NULL, keys,
                "run validate() first; it reports the exact rule", "%s", msg);
    return TR_ERR_CONFIG;
}

static tr_status from_layout_string(const tr_config *c, tr_pp_layout *l, tr_diags *d) {
    char *flat;
    size_t n;
    const char *err;
    tr_status st =
        tr_pipeline_layout_expand(c->model.pipeline_model_parallel_layout, &flat, &n, &err);
    if (st == TR_ERR_NOMEM) return st;
    bool bad = st != TR_OK;
    int stage = 0, nstages = l->pp * l->vpp;
    for (size_t i = 0; i < n && !bad; i++) {
        if (flat[i] == '|') {
            if (++stage >= nstages) bad = true;
            continue;
        }
        /* flat stage i is virtual stage i: chunk i / PP on pp rank i % PP */
        tr_pp_stage *s = &l->stages[stage];
        if (flat[i] == 't') s->num_layers++;
        if (flat[i] == 'm') s->num_mtp_layers++;
        if (flat[i] == 'E') s->has_embedding = true;
        if (flat[i] == 'L') s->has_loss = true;
    }
    bad = bad || stage != nstages - 1;
    free(flat);
    if (bad)
        return bad_config(d, "model.pipeline_model_parallel_layout",
                          "model.pipeline_model_parallel_layout does not describe PP * VPP "
                          "stages");
    int first = 0;
    for (int s = 0; s < nstages; s++)
        l->stages[s].first_layer = first, first += l->stages[s].num_layers;
    return TR_OK;
}

/* Megatron's get_transformer_layer_offset / num_layers_to_build without a layout string. */
static tr_status from_split(const tr_config *c, tr_pp_layout *l, tr_diags *d) {
    int pp = l->pp, v = l->vpp, layers = (int)c->model.num_layers;
    const tr_model_config *m = &c->model;
    bool emb = m->account_for_embedding_in_pipeline_split,
         loss = m->account_for_loss_in_pipeline_split;
    int64_t f = m->num_layers_in_first_pipeline_stage, la = m->num_layers_in_last_pipeline_stage;
    int *per_rank = calloc((size_t)pp, sizeof *per_rank);
    if (!per_rank) return TR_ERR_NOMEM;
    bool ok = true;
    if (emb || loss) {
        int total = layers + emb + loss;
        ok = total % (pp * v) == 0;
        for (int p = 0; p < pp; p++) per_rank[p] = total / pp;
    } else {
        int set = (f != TR_NULL_INT) + (la != TR_NULL_INT && pp > 1);
        int middle_ranks = pp - set;
        int64_t middle =
            layers - (f != TR_NULL_INT ? f : 0) - (la != TR_NULL_INT && pp > 1 ? la : 0);
        ok = middle >= 0 && (middle_ranks == 0 ? middle == 0 : middle % middle_ranks == 0);
        for (int p = 0; p < pp && ok; p++)
            per_rank[p] = middle_ranks ? (int)(middle / middle_ranks) : 0;
        if (f != TR_NULL_INT) per_rank[0] = (int)f;
        if (la != TR_NULL_INT && pp > 1) per_rank[pp - 1] = (int)la;
        for (int p = 0; p < pp; p++) ok = ok && per_rank[p] % v == 0;
    }
    if (!ok) {
        free(per_rank);
        return bad_config(d, "model.num_layers,model.pipeline_model_parallel_size",
                          "model.num_layers does not split evenly over the pipeline stages");
    }
    /* Each virtual stage index (chunk) spans 1/v of the (padded) stack; ranks split it in order. */
    int span = 0;
    for (int p = 0; p < pp; p++) span += per_rank[p] / v;
    for (int ch = 0; ch < v; ch++) {
        int offset = ch * span;
        for (int p = 0; p < pp; p++) {
            tr_pp_stage *s = &l->stages[ch * pp + p];
            s->first_layer = offset;
            s->num_layers = per_rank[p] / v;
            offset += s->num_layers;
        }
    }
    if (emb) {
        for (int s = 1; s < pp * v; s++) l->stages[s].first_layer -= 1;
        l->stages[0].num_layers -= 1;
    }
    if (loss) l->stages[pp * v - 1].num_layers -= 1;
    l->stages[0].has_embedding = true;
    l->stages[pp * v - 1].has_loss = true;
    l->stages[pp * v - 1].num_mtp_layers =
        (int)(m->mtp_num_layers == TR_NULL_INT ? 0 : m->mtp_num_layers);
    free(per_rank);
    return TR_OK;
}

tr_status tr_pp_layout_build(const tr_config *c, tr_pp_layout *out, tr_diags *d) {
    memset(out, 0, sizeof *out);
    out->pp = (int)c->model.pipeline_model_parallel_size;
    out->vpp = c->model.virtual_pipeline_model_parallel_size == TR_NULL_INT
                   ? 1
                   : (int)c->model.virtual_pipeline_model_parallel_size;
    const char *ls = c->model.pipeline_model_parallel_layout;
    if (ls && c->model.virtual_pipeline_model_parallel_size == TR_NULL_INT) {
        /* the layout implies VPP: count its stages */
        char *flat;
        size_t n;
        const char *err;
        tr_status st = tr_pipeline_layout_expand(ls, &flat, &n, &err);
        if (st == TR_ERR_NOMEM) return st;
        int stages = 1;
        for (size_t i = 0; i < n; i++) stages += flat[i] == '|';
        free(flat);
        if (out->pp > 0 && stages % out->pp == 0) out->vpp = stages / out->pp;
    }
    if (out->pp < 1 || out->vpp < 1)
        return bad_config(d, "model.pipeline_model_parallel_size", "pipeline sizes must be >= 1");
    out->stages = calloc((size_t)(out->pp * out->vpp), sizeof *out->stages);
    if (!out->stages) return TR_ERR_NOMEM;
    tr_status st = ls ? from_layout_string(c, out, d) : from_split(c, out, d);
    if (st != TR_OK) {
        tr_pp_layout_free(out);
        return st;
    }
    out->shared_embedding = tr_pp_shares_embedding(c);
    out->embedding_group[0] = 0;
    out->embedding_group[1] = out->shared_embedding && out->pp > 1 ? out->pp - 1 : -1;
    return TR_OK;
}

bool tr_pp_shares_embedding(const tr_config *c) {
    const tr_model_config *m = &c->model;
    return m->share_embeddings_and_output_weights ||
           (m->mtp_num_layers != TR_NULL_INT && m->mtp_num_layers > 0);
}

void tr_pp_layout_free(tr_pp_layout *l) {
    free(l->stages);
    l->stages = NULL;
}

const tr_pp_stage *tr_pp_layout_stage(const tr_pp_layout *l, int pp_rank, int chunk) {
    if (pp_rank < 0 || pp_rank >= l->pp || chunk < 0 || chunk >= l->vpp) return NULL;
    return &l->stages[chunk * l->pp + pp_rank];
}
