/* Rules on mixture-of-experts layers and their router (reference §3.4, §3.9). */
#include "core/rules/rule.h"

#define EXPERTS c->model.num_moe_experts
#define EP      c->model.expert_model_parallel_size

TR_RULE_FN(tr_check_ep_needs_experts) {
    if (EP <= 1 || tr_is_moe(c)) return;
    TR_FAIL("model.expert_model_parallel_size,model.num_moe_experts",
            "set model.num_moe_experts or model.expert_model_parallel_size=1",
            "model.expert_model_parallel_size (%lld) needs model.num_moe_experts", tr_ll(EP));
}

TR_RULE_FN(tr_check_experts_divisible_by_ep) {
    if (!tr_is_moe(c) || EXPERTS % EP == 0) return;
    char hint[160];
    TR_FAIL(
        "model.num_moe_experts,model.expert_model_parallel_size",
        TR_FMT(hint, "set model.expert_model_parallel_size to a divisor of %lld", tr_ll(EXPERTS)),
        "model.num_moe_experts (%lld) must be divisible by model.expert_model_parallel_size "
        "(%lld)",
        tr_ll(EXPERTS), tr_ll(EP));
}

TR_RULE_FN(tr_check_topk_le_experts) {
    if (!tr_is_moe(c) || c->model.moe_router_topk <= EXPERTS) return;
    TR_FAIL("model.moe_router_topk,model.num_moe_experts",
            "route each token to at most num_moe_experts experts",
            "model.moe_router_topk (%lld) must not exceed model.num_moe_experts (%lld)",
            tr_ll(c->model.moe_router_topk), tr_ll(EXPERTS));
}

TR_RULE_FN(tr_check_group_limited_routing) {
    int64_t groups = c->model.moe_router_num_groups, gk = c->model.moe_router_group_topk;
    if (tr_is_set(gk) && !tr_is_set(groups)) {
        TR_FAIL("model.moe_router_group_topk,model.moe_router_num_groups",
                "set model.moe_router_num_groups",
                "model.moe_router_group_topk (%lld) needs "
                "model.moe_router_num_groups",
                tr_ll(gk));
        return;
    }
    if (!tr_is_set(groups)) return;
    if (tr_is_moe(c) && EXPERTS % groups)
        TR_FAIL(
            "model.num_moe_experts,model.moe_router_num_groups",
            "use a number of groups that divides the experts",
            "model.num_moe_experts (%lld) must be divisible by model.moe_router_num_groups (%lld)",
            tr_ll(EXPERTS), tr_ll(groups));
    if (tr_is_set(gk) && gk > groups)
        TR_FAIL("model.moe_router_group_topk,model.moe_router_num_groups",
                "pick at most moe_router_num_groups groups",
                "model.moe_router_group_topk (%lld) must not exceed model.moe_router_num_groups "
                "(%lld)",
                tr_ll(gk), tr_ll(groups));
}

TR_RULE_FN(tr_check_topk1_pre_softmax) {
    const tr_model_config *m = &c->model;
    if (!tr_is_moe(c) || m->moe_router_topk != 1 ||
        m->moe_router_score_function != TR_SCORE_SOFTMAX || m->moe_router_pre_softmax ||
        m->moe_router_load_balancing_type == TR_MOELB_SINKHORN)
        return;
    TR_FAIL("model.moe_router_pre_softmax,model.moe_router_topk,model.moe_router_score_function",
            "set model.moe_router_pre_softmax=true",
            "top-1 routing with a softmax score needs model.moe_router_pre_softmax (a softmax over "
            "one expert is always 1)");
}

TR_RULE_FN(tr_check_expert_bias_score) {
    int32_t f = c->model.moe_router_score_function;
    if (!c->model.moe_router_enable_expert_bias || f == TR_SCORE_SIGMOID ||
        f == TR_SCORE_SQRTSOFTPLUS)
        return;
    TR_FAIL("model.moe_router_enable_expert_bias,model.moe_router_score_function",
            "set model.moe_router_score_function=sigmoid",
            "model.moe_router_enable_expert_bias needs a sigmoid or sqrtsoftplus score (it is %s)",
            tr_enum_str(&tr_enum_moe_score_function, f));
}

TR_RULE_FN(tr_check_capacity) {
    const tr_model_config *m = &c->model;
    bool factor = !tr_is_null_float(m->moe_expert_capacity_factor);
    if (factor && m->moe_router_load_balancing_type == TR_MOELB_SINKHORN)
        TR_FAIL("model.moe_expert_capacity_factor,model.moe_router_load_balancing_type",
                "use aux_loss balancing or drop the capacity factor",
                "model.moe_expert_capacity_factor cannot be used with sinkhorn load balancing");
    if (m->moe_pad_expert_input_to_capacity && !factor)
        TR_FAIL("model.moe_pad_expert_input_to_capacity,model.moe_expert_capacity_factor",
                "set model.moe_expert_capacity_factor, e.g. 1.0",
                "model.moe_pad_expert_input_to_capacity needs model.moe_expert_capacity_factor");
}

TR_RULE_FN(tr_check_shared_expert_overlap) {
    int32_t t = c->model.moe_token_dispatcher_type;
    if (!c->model.moe_shared_expert_overlap || t != TR_DISPATCH_ALLGATHER) return;
    TR_FAIL(
        "model.moe_shared_expert_overlap,model.moe_token_dispatcher_type",
        "set model.moe_token_dispatcher_type=alltoall",
        "model.moe_shared_expert_overlap needs the alltoall or flex dispatcher (it is allgather)");
}

TR_RULE_FN(tr_check_moe_bias_needs_etp1) {
    int64_t etp = tr_or(c->model.expert_tensor_parallel_size, 1);
    if (!tr_is_moe(c) || !c->model.add_bias_linear || etp == 1) return;
    TR_FAIL("model.add_bias_linear,model.expert_tensor_parallel_size,model.num_moe_experts",
            "set model.expert_tensor_parallel_size=1 or model.add_bias_linear=false",
            "biased MoE layers need model.expert_tensor_parallel_size 1 (it is %lld)", tr_ll(etp));
}

/* Megatron's MoELayer refuses to train with TP > 1 and without sequence parallelism. */
TR_RULE_FN(tr_check_moe_tp_needs_sp) {
    int64_t tp = c->model.tensor_model_parallel_size;
    if (!tr_is_moe(c) || tp <= 1 || c->model.sequence_parallel) return;
    TR_FAIL("model.sequence_parallel,model.tensor_model_parallel_size,model.num_moe_experts",
            "set model.sequence_parallel=true",
            "MoE layers with model.tensor_model_parallel_size %lld need model.sequence_parallel",
            tr_ll(tp));
}

TR_RULE_FN(tr_check_moe_fields_without_experts) {
    if (tr_is_moe(c)) return;
    if (tr_is_set(c->model.moe_ffn_hidden_size) &&
        c->origin[TR_FID_model_moe_ffn_hidden_size].kind != TR_ORIGIN_DERIVED)
        TR_FAIL(
            "model.moe_ffn_hidden_size,model.num_moe_experts",
            "set model.num_moe_experts or unset model.moe_ffn_hidden_size",
            "model.moe_ffn_hidden_size (%lld) is set on a dense model (model.num_moe_experts is "
            "null)",
            tr_ll(c->model.moe_ffn_hidden_size));
}

TR_RULE_FN(tr_check_moe_layer_freq) {
    const tr_int_list *f = &c->model.moe_layer_freq;
    if (!tr_is_moe(c) || f->null || f->n <= 1) return;
    bool flags = true;
    for (int i = 0; i < f->n; i++) flags &= f->v[i] == 0 || f->v[i] == 1;
    if (f->n != c->model.num_layers || !flags)
        TR_FAIL("model.moe_layer_freq,model.num_layers",
                "give a single interval [n], or one 0/1 flag per layer",
                "model.moe_layer_freq as a list needs one 0/1 flag per layer (%d values for %lld "
                "layers)",
                f->n, tr_ll(c->model.num_layers));
}

TR_RULE_FN(tr_check_ep_overlap) {
    const tr_model_config *m = &c->model;
    if (!m->overlap_moe_expert_parallel_comm) return;
    const char *k = "model.overlap_moe_expert_parallel_comm";
    char keys[160];
#define KEYS(other) TR_FMT(keys, "%s,%s", k, other)
    if (EP <= 1)
        TR_FAIL(KEYS("model.expert_model_parallel_size"), "use EP > 1 or turn the overlap off",
                "%s needs model.expert_model_parallel_size > 1 (it is %lld)", k, tr_ll(EP));
    if (!tr_is_moe(c) || EXPERTS <= 1)
        TR_FAIL(KEYS("model.num_moe_experts"), "use more than one expert",
                "%s needs model.num_moe_experts > 1", k);
    if (m->moe_token_dispatcher_type == TR_DISPATCH_ALLGATHER)
        TR_FAIL(KEYS("model.moe_token_dispatcher_type"),
                "set model.moe_token_dispatcher_type=alltoall",
                "%s needs the alltoall or flex dispatcher", k);
    if (!m->bf16 && !m->fp16)
        TR_FAIL(KEYS("model.bf16"), "use mixed_precision.preset=bf16_mixed",
                "%s needs bf16 or fp16 training", k);
    if (m->pipeline_model_parallel_size > 1 && !tr_is_set(m->virtual_pipeline_model_parallel_size))
        TR_FAIL(KEYS("model.virtual_pipeline_model_parallel_size"),
                "set model.virtual_pipeline_model_parallel_size",
                "%s with PP > 1 needs model.virtual_pipeline_model_parallel_size", k);
    if (m->recompute_granularity == TR_RECG_FULL || m->recompute_method >= 0 ||
        tr_is_set(m->recompute_num_layers) || tr_strlist_has(&m->recompute_modules, "moe"))
        TR_FAIL(KEYS("model.recompute_granularity"),
                "use selective recomputation without the moe module",
                "%s cannot be combined with full recomputation or recomputing the moe module", k);
    if (m->moe_shared_expert_overlap)
        TR_FAIL(KEYS("model.moe_shared_expert_overlap"),
                "set model.moe_shared_expert_overlap=false",
                "%s cannot be combined with model.moe_shared_expert_overlap", k);
    if (tr_or(m->mtp_num_layers, 0) > 1)
        TR_FAIL(KEYS("model.mtp_num_layers"), "use at most one MTP layer",
                "%s supports at most one MTP layer (model.mtp_num_layers is %lld)", k,
                tr_ll(m->mtp_num_layers));
#undef KEYS
}

TR_RULE_FN(tr_check_delay_wgrad_needs_ep_overlap) {
    if (!c->model.delay_wgrad_compute || c->model.overlap_moe_expert_parallel_comm) return;
    TR_FAIL("model.delay_wgrad_compute,model.overlap_moe_expert_parallel_comm",
            "set model.overlap_moe_expert_parallel_comm=true or turn delay_wgrad_compute off",
            "model.delay_wgrad_compute needs model.overlap_moe_expert_parallel_comm");
}

TR_RULE_FN(tr_check_variable_seq_dispatcher) {
    if (!tr_is_moe(c) || !c->model.variable_seq_lengths ||
        c->model.moe_token_dispatcher_type != TR_DISPATCH_ALLGATHER)
        return;
    TR_FAIL("model.variable_seq_lengths,model.moe_token_dispatcher_type",
            "set model.moe_token_dispatcher_type=alltoall",
            "model.variable_seq_lengths is not supported by the allgather MoE dispatcher");
}
