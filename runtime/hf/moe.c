/* The MoE blocks of MixtralForCausalLM, Qwen3MoeForCausalLM and DeepseekV3ForCausalLM
 * (runtime/hf/internal.h), on Llama's (Qwen3's) map for the attention, the norms and the dense
 * layers. The router is the HF gate [experts, hidden]; each expert's fc1 is [gate; up] (Mixtral:
 * w1; w3, the others: gate_proj; up_proj) and its fc2 the down projection (w2, down_proj).
 * DeepSeek-V3 adds the router's expert bias (gate.e_score_correction_bias [experts], Megatron's
 * router.expert_bias [1, experts]) and the shared experts, one MLP of n_shared_experts x
 * moe_intermediate_size (shared_experts.*, Megatron's shared_experts.linear_fc1 = [gate; up]). */
#include <stdio.h>
#include <string.h>

#include "runtime/hf/internal.h"

enum { ROUTER = 32, EXPERT_FC1, EXPERT_FC2, EXPERT_BIAS, SHARED_FC1, SHARED_FC2 };

const tr_hf_moe_names tr_hf_moe_mixtral = {"block_sparse_moe", "w1", "w3", "w2", false};
const tr_hf_moe_names tr_hf_moe_qwen3 = {"mlp", "gate_proj", "up_proj", "down_proj", false};
const tr_hf_moe_names tr_hf_moe_deepseek = {"mlp", "gate_proj", "up_proj", "down_proj", true};

bool tr_hf_is_moe_layer(const tr_hf_shape *k, int layer) {
    if (layer < 0 || layer >= k->layers + k->mtp) return false;
    return tr_moe_is_layer(&k->moe, layer < k->layers ? layer : (int)k->layers - 1);
}

tr_status tr_hf_moe_source(const tr_hf_moe_names *nm, int layer, const char *rest,
                           const tr_hf_shape *k, const tr_hf_weights *w, tr_hf_source *s,
                           tr_diags *d) {
    int e;
    char hf[192];
    memset(s, 0, sizeof *s);
    int64_t C = k->hidden, F = k->moe.ffn, E = k->moe.experts, S = k->moe.shared_ffn;
#define NEED(i, rows, cols, ...)                                                                   \
    (snprintf(hf, sizeof hf, __VA_ARGS__), tr_hf_need(w, hf, rows, cols, &s->t[i], d))
    if (strcmp(rest, "router.weight") == 0) {
        s->kind = ROUTER;
        return NEED(0, E, C, "model.layers.%d.%s.gate.weight", layer, nm->block);
    }
    if (nm->deepseek && strcmp(rest, "router.expert_bias") == 0) {
        s->kind = EXPERT_BIAS;
        return NEED(0, E, 0, "model.layers.%d.%s.gate.e_score_correction_bias", layer, nm->block);
    }
    if (nm->deepseek && S > 0 && strcmp(rest, "shared_experts.linear_fc1.weight") == 0) {
        s->kind = SHARED_FC1;
        TR_TRY(NEED(0, S, C, "model.layers.%d.%s.shared_experts.%s.weight", layer, nm->block,
                    nm->gate));
        return NEED(1, S, C, "model.layers.%d.%s.shared_experts.%s.weight", layer, nm->block,
                    nm->up);
    }
    if (nm->deepseek && S > 0 && strcmp(rest, "shared_experts.linear_fc2.weight") == 0) {
        s->kind = SHARED_FC2;
        return NEED(0, C, S, "model.layers.%d.%s.shared_experts.%s.weight", layer, nm->block,
                    nm->down);
    }
    char which[16];
    if (sscanf(rest, "experts.local_experts.%d.%15[a-z_0-9].weight", &e, which) == 2 && e >= 0 &&
        e < E) {
        if (strcmp(which, "linear_fc1") == 0) {
            s->kind = EXPERT_FC1;
            TR_TRY(NEED(0, F, C, "model.layers.%d.%s.experts.%d.%s.weight", layer, nm->block, e,
                        nm->gate));
            return NEED(1, F, C, "model.layers.%d.%s.experts.%d.%s.weight", layer, nm->block, e,
                        nm->up);
        }
        if (strcmp(which, "linear_fc2") == 0) {
            s->kind = EXPERT_FC2;
            return NEED(0, C, F, "model.layers.%d.%s.experts.%d.%s.weight", layer, nm->block, e,
                        nm->down);
        }
    }
#undef NEED
    return tr_hf_tensor_error(d, rest, "Trestle has no Hugging Face name for this MoE tensor");
}

bool tr_hf_moe_locate(const tr_hf_source *s, const tr_hf_shape *k, int64_t r, int64_t c,
                      int64_t *at, int *which) {
    int64_t C = k->hidden, F = k->moe.ffn, S = k->moe.shared_ffn;
    *which = 0;
    switch (s->kind) {
    case ROUTER:
        *at = r * C + c;
        return true;
    case EXPERT_BIAS: /* [1, experts] from [experts] */
        *at = c;
        return true;
    case EXPERT_FC1: /* [gate; up] */
    case SHARED_FC1: {
        int64_t half = s->kind == EXPERT_FC1 ? F : S;
        *at = (r < half ? r : r - half) * C + c;
        *which = r < half ? 0 : 1;
        return true;
    }
    case EXPERT_FC2:
        *at = r * F + c;
        return true;
    case SHARED_FC2:
        *at = r * S + c;
        return true;
    default:
        return false;
    }
}

bool tr_hf_moe_known(const tr_hf_moe_names *nm, const char *rest, const tr_hf_shape *k) {
    size_t len = strlen(nm->block);
    int e, used = 0;
    if (strncmp(rest, nm->block, len) != 0 || rest[len] != '.') return false;
    rest += len + 1;
    if (strcmp(rest, "gate.weight") == 0) return true;
    if (nm->deepseek && strcmp(rest, "gate.e_score_correction_bias") == 0) return true;
    const char *proj[] = {nm->gate, nm->up, nm->down};
    if (nm->deepseek && k->moe.shared_ffn > 0 && strncmp(rest, "shared_experts.", 15) == 0) {
        used = 15;
    } else if (sscanf(rest, "experts.%d.%n", &e, &used) != 1 || used == 0 || e < 0 ||
               e >= k->moe.experts) {
        return false;
    }
    rest += used;
    for (int j = 0; j < 3; j++) {
        size_t n = strlen(proj[j]);
        if (strncmp(rest, proj[j], n) == 0 && strcmp(rest + n, ".weight") == 0) return true;
    }
    return false;
}

static tr_status moe_source(const tr_hf_moe_names *nm, const char *name, const tr_hf_shape *k,
                            const tr_hf_weights *w, tr_hf_source *s, tr_diags *d) {
    int layer, used = 0;
    if (sscanf(name, "decoder.layers.%d.mlp.%n", &layer, &used) == 1 && used > 0 &&
        tr_hf_is_moe_layer(k, layer))
        return tr_hf_moe_source(nm, layer, name + used, k, w, s, d);
    return tr_hf_llama_source(name, k, w, s, d);
}

static int moe_locate(const tr_hf_source *s, const tr_hf_shape *k, int64_t r, int64_t c,
                      int64_t *at) {
    int which = 0;
    if (tr_hf_moe_locate(s, k, r, c, at, &which)) return which;
    return tr_hf_llama_locate(s, k, r, c, at);
}

/* An HF tensor of a Mixtral / Qwen3-MoE checkpoint: an MoE layer's block (its dense MLP has no
 * place there) or one of Llama's (Qwen3's) tensors. */
static bool moe_known(const tr_hf_moe_names *nm, const char *n, const tr_hf_shape *k, bool qwen3) {
    int layer, used = 0;
    if (sscanf(n, "model.layers.%d.%n", &layer, &used) == 1 && used > 0 &&
        tr_hf_is_moe_layer(k, layer) && layer < k->layers) {
        const char *rest = n + used;
        if (tr_hf_moe_known(nm, rest, k)) return true;
        return strncmp(rest, nm->block, strlen(nm->block)) != 0 && strstr(rest, "mlp.") != rest &&
               tr_hf_llama_known(n, k, qwen3);
    }
    return tr_hf_llama_known(n, k, qwen3);
}

static bool mixtral_known(const char *n, const tr_hf_shape *k) {
    return moe_known(&tr_hf_moe_mixtral, n, k, false);
}

static bool qwen3_moe_known(const char *n, const tr_hf_shape *k) {
    return moe_known(&tr_hf_moe_qwen3, n, k, true);
}

static tr_status mixtral_source(const char *name, const tr_hf_shape *k, const tr_hf_weights *w,
                                tr_hf_source *s, tr_diags *d) {
    return moe_source(&tr_hf_moe_mixtral, name, k, w, s, d);
}

static tr_status qwen3_moe_source(const char *name, const tr_hf_shape *k, const tr_hf_weights *w,
                                  tr_hf_source *s, tr_diags *d) {
    return moe_source(&tr_hf_moe_qwen3, name, k, w, s, d);
}

const tr_hf_arch tr_hf_arch_mixtral = {.name = "MixtralForCausalLM",
                                       .known = mixtral_known,
                                       .source = mixtral_source,
                                       .locate = moe_locate};
const tr_hf_arch tr_hf_arch_qwen3_moe = {.name = "Qwen3MoeForCausalLM",
                                         .known = qwen3_moe_known,
                                         .source = qwen3_moe_source,
                                         .locate = moe_locate};
