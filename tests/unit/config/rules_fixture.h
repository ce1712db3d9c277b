/* Small valid configs for the finalize/validate tests, built in C without recipes: a 4-layer
 * dense GPT and the same model with 4 experts (valid at world size 2 with EP 2). */
#ifndef TR_TEST_RULES_FIXTURE_H
#define TR_TEST_RULES_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "core/validate.h"

/* Applies "key=value;key=value" through the same setter the CLI uses; "[a,b]" sets a list. */
static inline tr_status fixture_apply(tr_config *c, const char *assignments, tr_diags *d) {
    if (!assignments) return TR_OK;
    char *copy = strdup(assignments);
    if (!copy) return TR_ERR_NOMEM;
    tr_status s = TR_OK;
    tr_origin o = tr_origin_make(TR_ORIGIN_API, NULL);
    for (char *save = NULL, *kv = strtok_r(copy, ";", &save); kv && s == TR_OK;
         kv = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) {
            s = TR_ERR_INVALID;
            break;
        }
        *eq = 0;
        const char *val = eq + 1;
        const tr_field *f = tr_field_by_path(kv);
        if (f && val[0] == '[') {
            char *items[16];
            int64_t nums[16];
            int n = 0;
            char *body = strdup(val + 1);
            if (!body) return free(copy), TR_ERR_NOMEM;
            char *close = strchr(body, ']');
            if (close) *close = 0;
            for (char *s2 = NULL, *it = strtok_r(body, ",", &s2); it && n < 16;
                 it = strtok_r(NULL, ",", &s2)) {
                items[n] = it;
                nums[n] = strtoll(it, NULL, 10);
                n++;
            }
            s = f->type == TR_T_INTLIST
                    ? tr_config_set_intlist(c, f->id, nums, n)
                    : tr_config_set_strlist(c, f->id, (const char *const *)items, n);
            if (s == TR_OK) c->origin[f->id] = o;
            free(body);
        } else {
            s = tr_config_set_text(c, kv, val, &o, d);
        }
    }
    free(copy);
    return s;
}

static inline tr_status fixture_dense(tr_config *c, tr_diags *d) {
    TR_TRY(tr_config_init(c, d));
    return fixture_apply(c,
                         "model.num_layers=4;model.hidden_size=64;model.num_attention_heads=4;"
                         "model.seq_length=128;dataset.seq_length=128;"
                         "train.micro_batch_size=1;train.global_batch_size=8;train.train_iters=100;"
                         "optimizer.lr=1e-3;optimizer.min_lr=1e-4;"
                         "dataset.reset_position_ids=false;dataset.reset_attention_mask=false;"
                         "dataset.eod_mask_loss=false;"
                         "tokenizer.tokenizer_type=NullTokenizer;tokenizer.vocab_size=1024",
                         d);
}

static inline tr_status fixture_moe(tr_config *c, tr_diags *d) {
    TR_TRY(fixture_dense(c, d));
    return fixture_apply(
        c,
        "model.num_moe_experts=4;model.moe_router_topk=2;"
        "model.expert_model_parallel_size=2;model.moe_token_dispatcher_type=alltoall",
        d);
}

/* finalize + validate for a world of `world` ranks (gpus_per_node 0 means all on one node).
 * opts NULL checks Megatron's rules without the runtime's capability rules, which refuse the MoE
 * fixture; tests/unit/train/test_train_capability.c covers those. */
static inline tr_status fixture_resolve(tr_config *c, int world, int gpus_per_node,
                                        const tr_validate_opts *opts, tr_diags *d) {
    static const tr_validate_opts megatron = {.skip_capability = true};
    if (!opts) opts = &megatron;
    tr_world w = {world, gpus_per_node > 0 ? gpus_per_node : world};
    TR_TRY(tr_config_finalize(c, &w, d));
    return tr_config_validate(c, opts, d);
}

#endif
