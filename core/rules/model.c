/* Rules on the model architecture and activation recomputation (reference §3.4). */
#include "core/rules/rule.h"

TR_RULE_FN(tr_check_architecture_set) {
    static const struct {
        int id;
        const char *key;
    } f[] = {{TR_FID_model_num_layers, "model.num_layers"},
             {TR_FID_model_hidden_size, "model.hidden_size"},
             {TR_FID_model_num_attention_heads, "model.num_attention_heads"}};
    int64_t v[3] = {c->model.num_layers, c->model.hidden_size, c->model.num_attention_heads};
    for (int i = 0; i < 3; i++) {
        if (v[i] > 0) continue;
        char hint[128];
        TR_FAIL(f[i].key, TR_FMT(hint, "set %s (pick a recipe or a model provider)", f[i].key),
                "%s is not set (0)", f[i].key);
    }
}

/* Megatron floors hidden/heads silently; a head dim that drops part of the hidden size is
 * almost always a typo, so Trestle rejects it unless kv_channels was given explicitly. */
TR_RULE_FN(tr_check_hidden_divisible_by_heads) {
    int64_t h = c->model.hidden_size, n = c->model.num_attention_heads;
    bool derived = c->origin[TR_FID_model_kv_channels].kind == TR_ORIGIN_DERIVED ||
                   !tr_is_set(c->model.kv_channels);
    if (!derived || h <= 0 || n <= 0 || h % n == 0) return;
    TR_FAIL(
        "model.hidden_size,model.num_attention_heads,model.kv_channels",
        "set model.kv_channels (the head dim) explicitly, or make hidden_size a multiple of the "
        "heads",
        "model.hidden_size (%lld) must be divisible by model.num_attention_heads (%lld) when "
        "model.kv_channels is not set",
        tr_ll(h), tr_ll(n));
}

TR_RULE_FN(tr_check_recompute) {
    const tr_model_config *m = &c->model;
    int64_t per_stage = m->num_layers / m->pipeline_model_parallel_size;
    if (m->recompute_granularity == TR_RECG_FULL) {
        if (m->recompute_method < 0)
            TR_FAIL("model.recompute_method,model.recompute_granularity",
                    "set model.recompute_method to uniform or block",
                    "model.recompute_granularity full needs model.recompute_method");
        if (!tr_is_set(m->recompute_num_layers) || m->recompute_num_layers > per_stage) {
            char hint[128];
            TR_FAIL(
                "model.recompute_num_layers,model.recompute_granularity",
                TR_FMT(hint, "set model.recompute_num_layers between 1 and %lld", tr_ll(per_stage)),
                "model.recompute_granularity full needs model.recompute_num_layers in [1, "
                "layers per pipeline stage = %lld] (it is %lld)",
                tr_ll(per_stage), tr_ll(m->recompute_num_layers));
        }
    } else if (m->recompute_granularity == TR_RECG_SELECTIVE) {
        if (tr_is_set(m->recompute_num_layers))
            TR_FAIL("model.recompute_num_layers,model.recompute_granularity",
                    "unset model.recompute_num_layers for selective recomputation",
                    "model.recompute_num_layers (%lld) only applies to full recomputation",
                    tr_ll(m->recompute_num_layers));
    } else if (m->recompute_method >= 0 || tr_is_set(m->recompute_num_layers)) {
        TR_FAIL("model.recompute_method,model.recompute_num_layers,model.recompute_granularity",
                "set model.recompute_granularity=full, or unset the method and layer count",
                "model.recompute_method / recompute_num_layers need model.recompute_granularity");
    }
    if (m->distribute_saved_activations && m->sequence_parallel)
        TR_FAIL(
            "model.distribute_saved_activations,model.sequence_parallel", "turn one of them off",
            "model.distribute_saved_activations cannot be combined with model.sequence_parallel");
}

TR_RULE_FN(tr_check_recompute_modules) {
    const tr_str_list *l = &c->model.recompute_modules;
    static const char *const known[] = {"core_attn", "moe_act", "layernorm",     "mla_up_proj",
                                        "mlp",       "moe",     "shared_experts"};
    for (int i = 0; !l->null && i < l->n; i++) {
        bool ok = false;
        for (size_t k = 0; k < sizeof known / sizeof *known; k++) ok |= !strcmp(l->v[i], known[k]);
        if (!ok)
            TR_FAIL("model.recompute_modules",
                    "use core_attn, mlp, layernorm, moe, moe_act, shared_experts or mla_up_proj",
                    "model.recompute_modules contains unknown module '%s'", l->v[i]);
    }
    if (tr_strlist_has(l, "moe_act") && !c->model.moe_grouped_gemm)
        TR_FAIL("model.recompute_modules,model.moe_grouped_gemm", "set model.moe_grouped_gemm=true",
                "recomputing moe_act needs model.moe_grouped_gemm");
    if (tr_strlist_has(l, "mla_up_proj") && !c->model.multi_latent_attention)
        TR_FAIL("model.recompute_modules,model.multi_latent_attention",
                "drop mla_up_proj from model.recompute_modules",
                "recomputing mla_up_proj needs model.multi_latent_attention");
}

TR_RULE_FN(tr_check_bias_activation_fusion) {
    int32_t a = c->model.activation_func;
    if (!c->model.bias_activation_fusion || a == TR_ACT_GELU || a == TR_ACT_SILU ||
        a == TR_ACT_QUICK_GELU || a == TR_ACT_FAST_GELU)
        return;
    TR_FAIL(
        "model.bias_activation_fusion,model.activation_func",
        "set model.bias_activation_fusion=false",
        "model.bias_activation_fusion needs a gelu or silu activation (model.activation_func is "
        "%s)",
        tr_enum_str(&tr_enum_activation, a));
}

TR_RULE_FN(tr_check_deterministic_no_ce_fusion) {
    if (!c->model.deterministic_mode || !c->model.cross_entropy_loss_fusion) return;
    TR_FAIL("model.deterministic_mode,model.cross_entropy_loss_fusion",
            "set model.cross_entropy_loss_fusion=false",
            "model.deterministic_mode needs model.cross_entropy_loss_fusion off (the fused kernel "
            "is not deterministic)");
}

TR_RULE_FN(tr_check_window_size) {
    const tr_int_list *w = &c->model.window_size;
    if (w->null) return;
    if (w->n != 2 || w->v[0] < -1 || w->v[1] < -1)
        TR_FAIL("model.window_size", "write [left, right] with -1 for unbounded",
                "model.window_size must be two values >= -1 ([left, right]); it has %d", w->n);
}

/* The runtime indexes layers, rows, heads and positions with int and sizes its buffers from
 * these values: a size past INT32_MAX, a parameter count that saturated 64 bits, or weights no
 * machine could hold would fail only at launch (or wrap), so the dry run refuses them too. */
TR_RULE_FN(tr_check_sizes_fit_runtime) {
    const tr_model_config *m = &c->model;
    const struct {
        const char *key;
        int64_t v;
    } f[] = {{"model.num_layers", m->num_layers},
             {"model.hidden_size", m->hidden_size},
             {"model.ffn_hidden_size", m->ffn_hidden_size},
             {"model.num_attention_heads", m->num_attention_heads},
             {"model.num_query_groups", m->num_query_groups},
             {"model.kv_channels", m->kv_channels},
             {"model.seq_length", m->seq_length},
             {"model.vocab_size", m->vocab_size},
             {"dataset.seq_length", c->dataset.seq_length},
             {"train.micro_batch_size", c->train.micro_batch_size}};
    bool too_big = false;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!tr_is_set(f[i].v) || f[i].v <= INT32_MAX) continue;
        too_big = true;
        TR_FAIL(f[i].key, "use a size below 2^31",
                "%s (%lld) is larger than the runtime's 32-bit index range (2147483647)", f[i].key,
                tr_ll(f[i].v));
    }
    if (too_big) return;
    int64_t params = c->derived.num_params;
    if (params == INT64_MAX) {
        TR_FAIL("model.num_layers,model.hidden_size,model.ffn_hidden_size,model.vocab_size",
                "reduce the model's dimensions",
                "the parameter count overflows 64 bits (num_layers %lld, hidden_size %lld)",
                tr_ll(m->num_layers), tr_ll(m->hidden_size));
        return;
    }
    /* fp32 weights, gradients and two Adam moments: 16 bytes a parameter, split over TP x PP.
     * 2^48 bytes (256 TiB) on one rank is beyond any machine this runs on. */
    int64_t split;
    if (__builtin_mul_overflow(m->tensor_model_parallel_size, m->pipeline_model_parallel_size,
                               &split))
        split = INT64_MAX;
    double bytes = (double)params * 16.0 / (double)(split > 0 ? split : 1);
    if (bytes > 281474976710656.0)
        TR_FAIL("model.num_layers,model.hidden_size,model.tensor_model_parallel_size,"
                "model.pipeline_model_parallel_size",
                "reduce the model or raise TP x PP",
                "%lld parameters need %.3g TiB of weights, gradients and Adam moments per rank "
                "(TP x PP = %lld); no rank can allocate that",
                tr_ll(params), bytes / 1099511627776.0, tr_ll(split));
}
