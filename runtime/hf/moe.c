/* MixtralForCausalLM and Qwen3MoeForCausalLM (runtime/hf/internal.h): Llama's (Qwen3's) map for
 * the attention, the norms and the dense layers, plus the MoE layers' tensors. The router is the
 * HF gate [experts, hidden]; each expert's fc1 is [gate; up] (Mixtral: w1; w3, Qwen3-MoE:
 * gate_proj; up_proj) and its fc2 the down projection (w2, down_proj). */
#include <stdio.h>
#include <string.h>

#include "runtime/hf/internal.h"

enum { ROUTER = 32, EXPERT_FC1, EXPERT_FC2 };

typedef struct names {
    const char *block, *gate, *up, *down; /* the MoE block's prefix and its expert tensors */
} names;

static const names mixtral = {"block_sparse_moe", "w1", "w3", "w2"};
static const names qwen3_moe = {"mlp", "gate_proj", "up_proj", "down_proj"};

static tr_status moe_source(const names *nm, const char *name, const tr_hf_shape *k,
                            const tr_hf_weights *w, tr_hf_source *s, tr_diags *d) {
    int layer, e, used = 0;
    char hf[192];
    memset(s, 0, sizeof *s);
    if (sscanf(name, "decoder.layers.%d.mlp.%n", &layer, &used) != 1 || used == 0 ||
        !tr_moe_is_layer(&k->moe, layer))
        return tr_hf_llama_source(name, k, w, s, d);
    const char *rest = name + used;
    int64_t C = k->hidden, F = k->moe.ffn, E = k->moe.experts;
    if (strcmp(rest, "router.weight") == 0) {
        s->kind = ROUTER;
        snprintf(hf, sizeof hf, "model.layers.%d.%s.gate.weight", layer, nm->block);
        return tr_hf_need(w, hf, E, C, &s->t[0], d);
    }
    char which[16];
    if (sscanf(rest, "experts.local_experts.%d.%15[a-z_0-9].weight", &e, which) == 2 && e >= 0 &&
        e < E) {
        if (strcmp(which, "linear_fc1") == 0) {
            s->kind = EXPERT_FC1;
            snprintf(hf, sizeof hf, "model.layers.%d.%s.experts.%d.%s.weight", layer, nm->block, e,
                     nm->gate);
            TR_TRY(tr_hf_need(w, hf, F, C, &s->t[0], d));
            snprintf(hf, sizeof hf, "model.layers.%d.%s.experts.%d.%s.weight", layer, nm->block, e,
                     nm->up);
            return tr_hf_need(w, hf, F, C, &s->t[1], d);
        }
        if (strcmp(which, "linear_fc2") == 0) {
            s->kind = EXPERT_FC2;
            snprintf(hf, sizeof hf, "model.layers.%d.%s.experts.%d.%s.weight", layer, nm->block, e,
                     nm->down);
            return tr_hf_need(w, hf, C, F, &s->t[0], d);
        }
    }
    return tr_hf_tensor_error(d, name, "Trestle has no Hugging Face name for this MoE tensor");
}

static int moe_locate(const tr_hf_source *s, const tr_hf_shape *k, int64_t r, int64_t c,
                      int64_t *at) {
    int64_t C = k->hidden, F = k->moe.ffn;
    switch (s->kind) {
    case ROUTER:
        *at = r * C + c;
        return 0;
    case EXPERT_FC1: /* [gate; up] */
        *at = (r < F ? r : r - F) * C + c;
        return r < F ? 0 : 1;
    case EXPERT_FC2:
        *at = r * F + c;
        return 0;
    default:
        return tr_hf_llama_locate(s, k, r, c, at);
    }
}

/* An HF tensor of an MoE layer: its gate or one of its experts' three projections. */
static bool moe_known(const names *nm, const char *n, const tr_hf_shape *k, bool qwen3) {
    int layer, used = 0, e, used2 = 0;
    char pre[32];
    snprintf(pre, sizeof pre, "%s.", nm->block);
    if (sscanf(n, "model.layers.%d.%n", &layer, &used) == 1 && used > 0 &&
        tr_moe_is_layer(&k->moe, layer) && layer < k->layers) {
        const char *rest = n + used;
        if (strncmp(rest, pre, strlen(pre)) != 0)
            return tr_hf_llama_known(n, k, qwen3) && strstr(rest, "mlp.") != rest;
        rest += strlen(pre);
        if (strcmp(rest, "gate.weight") == 0) return true;
        if (sscanf(rest, "experts.%d.%n", &e, &used2) != 1 || used2 == 0 || e < 0 ||
            e >= k->moe.experts)
            return false;
        rest += used2;
        const char *proj[] = {nm->gate, nm->up, nm->down};
        for (int j = 0; j < 3; j++) {
            size_t len = strlen(proj[j]);
            if (strncmp(rest, proj[j], len) == 0 && strcmp(rest + len, ".weight") == 0) return true;
        }
        return false;
    }
    return tr_hf_llama_known(n, k, qwen3);
}

static bool mixtral_known(const char *n, const tr_hf_shape *k) {
    return moe_known(&mixtral, n, k, false);
}

static bool qwen3_moe_known(const char *n, const tr_hf_shape *k) {
    return moe_known(&qwen3_moe, n, k, true);
}

static tr_status mixtral_source(const char *name, const tr_hf_shape *k, const tr_hf_weights *w,
                                tr_hf_source *s, tr_diags *d) {
    return moe_source(&mixtral, name, k, w, s, d);
}

static tr_status qwen3_moe_source(const char *name, const tr_hf_shape *k, const tr_hf_weights *w,
                                  tr_hf_source *s, tr_diags *d) {
    return moe_source(&qwen3_moe, name, k, w, s, d);
}

const tr_hf_arch tr_hf_arch_mixtral = {"MixtralForCausalLM", mixtral_known, mixtral_source,
                                       moe_locate};
const tr_hf_arch tr_hf_arch_qwen3_moe = {"Qwen3MoeForCausalLM", qwen3_moe_known, qwen3_moe_source,
                                         moe_locate};
