/* Rules on how the layer stack is cut into pipeline stages (reference §3.4 and §3.6). */
#include <stdlib.h>

#include "core/pipeline_layout.h"
#include "core/rules/rule.h"

#define PP      c->model.pipeline_model_parallel_size
#define LAYERS  c->model.num_layers
#define VPP_SET tr_is_set(c->model.virtual_pipeline_model_parallel_size)

static bool uneven(const tr_config *c) {
    return tr_is_set(c->model.num_layers_in_first_pipeline_stage) ||
           tr_is_set(c->model.num_layers_in_last_pipeline_stage);
}
static bool accounts(const tr_config *c) {
    return c->model.account_for_embedding_in_pipeline_split ||
           c->model.account_for_loss_in_pipeline_split;
}
static bool has_layout(const tr_config *c) {
    return c->model.pipeline_model_parallel_layout != NULL;
}

TR_RULE_FN(tr_check_layers_divisible_by_pp) {
    if (PP <= 1 || LAYERS <= 0 || uneven(c) || accounts(c) || has_layout(c)) return;
    if (LAYERS % PP == 0) return;
    char hint[200];
    TR_FAIL(
        "model.num_layers,model.pipeline_model_parallel_size",
        TR_FMT(hint,
               "use a pipeline size dividing %lld, or set "
               "model.num_layers_in_first/last_pipeline_stage for an uneven split",
               tr_ll(LAYERS)),
        "model.num_layers (%lld) must be divisible by model.pipeline_model_parallel_size (%lld)",
        tr_ll(LAYERS), tr_ll(PP));
}

TR_RULE_FN(tr_check_stage_layers_divisible_by_vpp) {
    if (PP <= 1 || !VPP_SET || uneven(c) || accounts(c) || has_layout(c)) return;
    int64_t vpp = c->model.virtual_pipeline_model_parallel_size, per = LAYERS / PP;
    if (LAYERS % PP != 0 || per % vpp == 0) return;
    char hint[200];
    TR_FAIL("model.num_layers,model.pipeline_model_parallel_size,"
            "model.virtual_pipeline_model_parallel_size",
            TR_FMT(hint, "choose a virtual pipeline size dividing %lld", tr_ll(per)),
            "layers per pipeline stage (model.num_layers %lld / PP %lld = %lld) must be divisible "
            "by model.virtual_pipeline_model_parallel_size (%lld)",
            tr_ll(LAYERS), tr_ll(PP), tr_ll(per), tr_ll(vpp));
}

TR_RULE_FN(tr_check_uneven_not_with_account_for) {
    if (!uneven(c) || !accounts(c)) return;
    TR_FAIL(
        "model.num_layers_in_first_pipeline_stage,model.num_layers_in_last_pipeline_stage,"
        "model.account_for_embedding_in_pipeline_split,model.account_for_loss_in_pipeline_split",
        "use either the explicit first/last stage sizes or the account_for_* switches",
        "model.num_layers_in_first/last_pipeline_stage cannot be combined with "
        "model.account_for_embedding/loss_in_pipeline_split");
}

TR_RULE_FN(tr_check_uneven_split) {
    if (!uneven(c) || accounts(c) || has_layout(c)) return;
    int64_t first = c->model.num_layers_in_first_pipeline_stage;
    int64_t last = c->model.num_layers_in_last_pipeline_stage;
    int64_t vpp = tr_vpp_chunks(c);
    if (VPP_SET) {
        if (tr_is_set(first) && first % vpp)
            TR_FAIL("model.num_layers_in_first_pipeline_stage,"
                    "model.virtual_pipeline_model_parallel_size",
                    "make the first stage a multiple of the virtual pipeline size",
                    "model.num_layers_in_first_pipeline_stage (%lld) must be divisible by "
                    "model.virtual_pipeline_model_parallel_size (%lld)",
                    tr_ll(first), tr_ll(vpp));
        if (tr_is_set(last) && last % vpp)
            TR_FAIL("model.num_layers_in_last_pipeline_stage,"
                    "model.virtual_pipeline_model_parallel_size",
                    "make the last stage a multiple of the virtual pipeline size",
                    "model.num_layers_in_last_pipeline_stage (%lld) must be divisible by "
                    "model.virtual_pipeline_model_parallel_size (%lld)",
                    tr_ll(last), tr_ll(vpp));
    }
    int64_t middle = LAYERS - tr_or(first, 0) - tr_or(last, 0);
    int64_t stages = PP - tr_is_set(first) - tr_is_set(last);
    const char *keys = "model.num_layers,model.num_layers_in_first_pipeline_stage,"
                       "model.num_layers_in_last_pipeline_stage,model.pipeline_model_parallel_size";
    if (middle < 0 || (middle > 0) != (stages > 0)) {
        TR_FAIL(keys, "make first + last + middle stages add up to model.num_layers",
                "uneven pipeline split leaves %lld layers for %lld middle stages (num_layers %lld, "
                "first %lld, last %lld, PP %lld)",
                tr_ll(middle), tr_ll(stages), tr_ll(LAYERS), tr_ll(tr_or(first, 0)),
                tr_ll(tr_or(last, 0)), tr_ll(PP));
        return;
    }
    if (stages == 0) return;
    if (middle % stages) {
        TR_FAIL(keys, "adjust the first/last stage sizes so the rest divides evenly",
                "the %lld middle layers must be divisible by the %lld middle pipeline stages",
                tr_ll(middle), tr_ll(stages));
    } else if ((middle / stages) % vpp) {
        TR_FAIL(keys, "adjust the split so each middle stage holds a multiple of VPP layers",
                "each middle pipeline stage holds %lld layers, not divisible by "
                "model.virtual_pipeline_model_parallel_size (%lld)",
                tr_ll(middle / stages), tr_ll(vpp));
    }
}

TR_RULE_FN(tr_check_account_for_split) {
    if (!accounts(c) || uneven(c) || has_layout(c)) return;
    int64_t total = LAYERS + c->model.account_for_embedding_in_pipeline_split +
                    c->model.account_for_loss_in_pipeline_split;
    const char *keys = "model.num_layers,model.pipeline_model_parallel_size,"
                       "model.account_for_embedding_in_pipeline_split,"
                       "model.account_for_loss_in_pipeline_split";
    if (total % PP) {
        TR_FAIL(keys, "change model.num_layers or PP so that layers + embedding/loss divide evenly",
                "model.num_layers plus the accounted embedding/loss (%lld) must be divisible by "
                "model.pipeline_model_parallel_size (%lld)",
                tr_ll(total), tr_ll(PP));
    } else if ((total / PP) % tr_vpp_chunks(c)) {
        TR_FAIL(keys, "choose a virtual pipeline size dividing the layers per stage",
                "layers per pipeline stage including embedding/loss (%lld) must be divisible by "
                "model.virtual_pipeline_model_parallel_size (%lld)",
                tr_ll(total / PP), tr_ll(tr_vpp_chunks(c)));
    }
}

TR_RULE_FN(tr_check_layout_conflicts) {
    if (!has_layout(c) || (!uneven(c) && !accounts(c))) return;
    TR_FAIL("model.pipeline_model_parallel_layout,model.num_layers_in_first_pipeline_stage,"
            "model.num_layers_in_last_pipeline_stage,model.account_for_embedding_in_pipeline_split,"
            "model.account_for_loss_in_pipeline_split",
            "describe the whole split in the layout string and unset the other pipeline fields",
            "model.pipeline_model_parallel_layout cannot be combined with uneven first/last "
            "stage sizes or account_for_* switches");
}

TR_RULE_FN(tr_check_layout_valid) {
    const char *layout = c->model.pipeline_model_parallel_layout;
    if (!layout) return;
    const char *key = "model.pipeline_model_parallel_layout";
    char *flat;
    size_t n;
    const char *err;
    tr_status st = tr_pipeline_layout_expand(layout, &flat, &n, &err);
    if (st == TR_ERR_NOMEM) return;
    if (st != TR_OK) {
        TR_FAIL(key, "write stages like \"Et*2|t*2|t*2L\"", "%s (\"%s\") %s", key, layout, err);
        return;
    }
    int64_t stages = 1, t = 0, m = 0, e_stage = -1, l_stage = -1, stage = 0;
    for (size_t i = 0; i < n; i++) {
        switch (flat[i]) {
        case '|':
            stages++, stage++;
            break;
        case 't':
            t++;
            break;
        case 'm':
            m++;
            break;
        case 'E':
            e_stage = e_stage < 0 ? stage : -2;
            break;
        case 'L':
            l_stage = l_stage < 0 ? stage : -2;
            break;
        }
    }
    free(flat);
    char hint[200];
    if (stages % PP)
        TR_FAIL("model.pipeline_model_parallel_layout,model.pipeline_model_parallel_size",
                TR_FMT(hint, "write a multiple of %lld stages separated by '|'", tr_ll(PP)),
                "%s has %lld stages, not a multiple of model.pipeline_model_parallel_size (%lld)",
                key, tr_ll(stages), tr_ll(PP));
    else if (VPP_SET && stages / PP != c->model.virtual_pipeline_model_parallel_size)
        TR_FAIL("model.pipeline_model_parallel_layout,model.virtual_pipeline_model_parallel_size",
                "unset model.virtual_pipeline_model_parallel_size (the layout implies it)",
                "%s implies %lld virtual stages per rank but "
                "model.virtual_pipeline_model_parallel_size is %lld",
                key, tr_ll(stages / PP), tr_ll(c->model.virtual_pipeline_model_parallel_size));
    if (t != LAYERS)
        TR_FAIL("model.pipeline_model_parallel_layout,model.num_layers",
                "place exactly num_layers 't' symbols in the layout",
                "%s places %lld transformer layers but model.num_layers is %lld", key, tr_ll(t),
                tr_ll(LAYERS));
    if (m != tr_or(c->model.mtp_num_layers, 0))
        TR_FAIL("model.pipeline_model_parallel_layout,model.mtp_num_layers",
                "place exactly mtp_num_layers 'm' symbols in the layout",
                "%s places %lld MTP layers but model.mtp_num_layers is %lld", key, tr_ll(m),
                tr_ll(tr_or(c->model.mtp_num_layers, 0)));
    if (e_stage != 0 || l_stage != stages - 1)
        TR_FAIL(key, "put one E in the first stage and one L in the last",
                "%s must hold the embedding E once in the first stage and the loss L once in the "
                "last stage",
                key);
}
