/* Rules on the parallel layout: how TP, PP, CP, EP and ETP fit the world and the model. */
#include "core/rules/rule.h"

#define TP    c->model.tensor_model_parallel_size
#define PP    c->model.pipeline_model_parallel_size
#define CP    c->model.context_parallel_size
#define EP    c->model.expert_model_parallel_size
#define ETP   c->model.expert_tensor_parallel_size
#define WORLD c->derived.world_size

/* The smallest world both grids fit: they share PP and overlap within a stage (reference §7.3). */
static int64_t min_world(const tr_config *c) {
    return PP * tr_lcm(TP * CP, EP * tr_or(ETP, 1));
}

TR_RULE_FN(tr_check_world_divisible_by_model_size) {
    int64_t block = TP * PP * CP;
    if (WORLD % block == 0) return;
    char hint[256];
    TR_FAIL(
        "derived.world_size,model.tensor_model_parallel_size,model.pipeline_model_parallel_size,"
        "model.context_parallel_size",
        TR_FMT(hint,
               "run on a multiple of %lld GPUs (PP * lcm(TP*CP, EP*ETP)) or change the "
               "parallel sizes",
               tr_ll(min_world(c))),
        "world size (%lld) must be divisible by model.tensor_model_parallel_size (%lld) * "
        "model.pipeline_model_parallel_size (%lld) * model.context_parallel_size (%lld) = %lld",
        tr_ll(WORLD), tr_ll(TP), tr_ll(PP), tr_ll(CP), tr_ll(block));
}

/* For a dense model the expert grid is TP * PP, which already divides TP * PP * CP: the rule
 * would only repeat the one above. */
TR_RULE_FN(tr_check_world_divisible_by_expert_size) {
    if (!tr_is_moe(c) && EP == 1) return;
    int64_t etp = tr_or(ETP, 1), block = etp * EP * PP;
    if (WORLD % block == 0) return;
    char hint[256];
    TR_FAIL("derived.world_size,model.expert_tensor_parallel_size,model.expert_model_parallel_size,"
            "model.pipeline_model_parallel_size",
            TR_FMT(hint,
                   "run on a multiple of %lld GPUs (PP * lcm(TP*CP, EP*ETP)) or change "
                   "expert_model_parallel_size / expert_tensor_parallel_size",
                   tr_ll(min_world(c))),
            "world size (%lld) must be divisible by model.expert_tensor_parallel_size (%lld) * "
            "model.expert_model_parallel_size (%lld) * model.pipeline_model_parallel_size (%lld) "
            "= %lld",
            tr_ll(WORLD), tr_ll(etp), tr_ll(EP), tr_ll(PP), tr_ll(block));
}

TR_RULE_FN(tr_check_eval_world_divisible) {
    int64_t ecp = c->dist.eval_context_parallel_size;
    if (!tr_is_set(ecp)) return;
    int64_t block = TP * PP * ecp;
    if (WORLD % block == 0) return;
    TR_FAIL(
        "dist.eval_context_parallel_size,derived.world_size,model.tensor_model_parallel_size,"
        "model.pipeline_model_parallel_size",
        "choose dist.eval_context_parallel_size so that TP * PP * eval CP divides the world size",
        "world size (%lld) must be divisible by TP (%lld) * PP (%lld) * "
        "dist.eval_context_parallel_size (%lld) = %lld",
        tr_ll(WORLD), tr_ll(TP), tr_ll(PP), tr_ll(ecp), tr_ll(block));
}

/* Lists up to a few divisors of n (other than 1) for hints. */
static const char *divisors_text(int64_t n, char *buf, size_t cap) {
    size_t len = 0;
    int shown = 0;
    buf[0] = 0;
    for (int64_t k = 2; k <= n && shown < 4 && len < cap; k++) {
        if (n % k) continue;
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", shown ? ", " : "", tr_ll(k));
        shown++;
    }
    if (!shown) snprintf(buf, cap, "1");
    return buf;
}

TR_RULE_FN(tr_check_heads_divisible_by_tp) {
    int64_t h = c->model.num_attention_heads;
    if (h <= 0 || h % TP == 0) return;
    char divs[64], hint[200];
    TR_FAIL("model.num_attention_heads,model.tensor_model_parallel_size",
            TR_FMT(hint, "set model.tensor_model_parallel_size to a divisor of %lld, e.g. %s",
                   tr_ll(h), divisors_text(h, divs, sizeof divs)),
            "model.num_attention_heads (%lld) must be divisible by "
            "model.tensor_model_parallel_size (%lld)",
            tr_ll(h), tr_ll(TP));
}

/* MCore accepts query groups that are a multiple of TP (each rank owns whole groups) or a divisor
 * of it (each group is replicated on TP/groups ranks), so Trestle accepts both too. */
TR_RULE_FN(tr_check_query_groups_compatible_with_tp) {
    int64_t g = c->model.num_query_groups;
    if (!tr_is_set(g) || g % TP == 0 || TP % g == 0) return;
    char hint[200];
    TR_FAIL("model.num_query_groups,model.tensor_model_parallel_size",
            TR_FMT(hint, "set model.tensor_model_parallel_size to a divisor or multiple of %lld",
                   tr_ll(g)),
            "model.num_query_groups (%lld) must be a multiple or a divisor of "
            "model.tensor_model_parallel_size (%lld)",
            tr_ll(g), tr_ll(TP));
}

/* MBridge silently turns sequence parallelism off at TP 1; Trestle reports it so the config
 * says what actually runs. */
TR_RULE_FN(tr_check_sequence_parallel_needs_tp) {
    if (!c->model.sequence_parallel || TP > 1) return;
    TR_FAIL(
        "model.sequence_parallel,model.tensor_model_parallel_size",
        "set model.sequence_parallel=false, or model.tensor_model_parallel_size > 1",
        "model.sequence_parallel (true) needs model.tensor_model_parallel_size > 1 (it is %lld)",
        tr_ll(TP));
}

TR_RULE_FN(tr_check_tp_comm_overlap_needs_tp) {
    if (!c->model.tp_comm_overlap || TP > 1) return;
    TR_FAIL("model.tp_comm_overlap,model.tensor_model_parallel_size",
            "set comm_overlap.tp_comm_overlap=false, or use model.tensor_model_parallel_size >= 2",
            "model.tp_comm_overlap (true) needs model.tensor_model_parallel_size >= 2 (it is %lld)",
            tr_ll(TP));
}

/* Megatron-Bridge's comm_overlap section exists only with its tp_comm_overlap set (a required
 * field there); finalize() reads the other overrides only then, so one set alone would change
 * nothing: refused, naming it. */
TR_RULE_FN(tr_check_comm_overlap_section) {
    const tr_comm_overlap_config *co = &c->comm_overlap;
    if (co->tp_comm_overlap >= 0) return;
    const struct {
        const char *key;
        bool set;
    } keys[] = {
        {"comm_overlap.tp_comm_overlap_cfg", co->tp_comm_overlap_cfg != NULL},
        {"comm_overlap.overlap_p2p_comm", co->overlap_p2p_comm >= 0},
        {"comm_overlap.batch_p2p_comm", co->batch_p2p_comm >= 0},
        {"comm_overlap.overlap_grad_reduce", co->overlap_grad_reduce >= 0},
        {"comm_overlap.overlap_param_gather", co->overlap_param_gather >= 0},
        {"comm_overlap.overlap_param_gather_with_optimizer_step",
         co->overlap_param_gather_with_optimizer_step >= 0},
        {"comm_overlap.align_param_gather", co->align_param_gather >= 0},
        {"comm_overlap.bucket_size", tr_is_set(co->bucket_size)},
        {"comm_overlap.defer_embedding_wgrad_compute", co->defer_embedding_wgrad_compute >= 0},
        {"comm_overlap.wgrad_deferral_limit", tr_is_set(co->wgrad_deferral_limit)},
        {"comm_overlap.data_parallel_size", tr_is_set(co->data_parallel_size)},
        {"comm_overlap.overlap_moe_expert_parallel_comm",
         co->overlap_moe_expert_parallel_comm >= 0},
        {"comm_overlap.delay_wgrad_compute", co->delay_wgrad_compute >= 0},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (!keys[i].set) continue;
        char both[128];
        TR_FAIL(TR_FMT(both, "%s,comm_overlap.tp_comm_overlap", keys[i].key),
                "set comm_overlap.tp_comm_overlap (true or false) to use the comm_overlap section, "
                "or set the model.* / ddp.* key it overrides directly",
                "%s is set, but the comm_overlap section is off (comm_overlap.tp_comm_overlap is "
                "null), so it would change nothing",
                keys[i].key);
        return;
    }
}

TR_RULE_FN(tr_check_tp_comm_overlap_needs_sp) {
    if (!c->model.tp_comm_overlap || c->model.sequence_parallel) return;
    TR_FAIL("model.tp_comm_overlap,model.sequence_parallel",
            "set model.sequence_parallel=true (or turn tp_comm_overlap off)",
            "model.tp_comm_overlap (true) needs model.sequence_parallel (false)");
}

TR_RULE_FN(tr_check_seq_length_divisible_by_2cp) {
    int64_t s = c->model.seq_length;
    if (CP <= 1 || s % (2 * CP) == 0) return;
    char hint[200];
    TR_FAIL("model.seq_length,model.context_parallel_size",
            TR_FMT(hint, "use a sequence length that is a multiple of %lld, e.g. %lld",
                   tr_ll(2 * CP), tr_ll((s / (2 * CP) + 1) * 2 * CP)),
            "model.seq_length (%lld) must be divisible by 2 * model.context_parallel_size (2 * "
            "%lld = %lld)",
            tr_ll(s), tr_ll(CP), tr_ll(2 * CP));
}

TR_RULE_FN(tr_check_hierarchical_cp_product) {
    const tr_int_list *h = &c->model.hierarchical_context_parallel_sizes;
    if (h->null || h->n == 0) return;
    int64_t p = 1;
    for (int i = 0; i < h->n; i++) p *= h->v[i];
    if (p == CP) return;
    TR_FAIL("model.hierarchical_context_parallel_sizes,model.context_parallel_size",
            "make the product of the hierarchical sizes equal context_parallel_size",
            "the product of model.hierarchical_context_parallel_sizes (%lld) must equal "
            "model.context_parallel_size (%lld)",
            tr_ll(p), tr_ll(CP));
}

TR_RULE_FN(tr_check_cp_comm_type) {
    const tr_str_list *t = &c->model.cp_comm_type;
    if (t->null) return;
    static const char *const known[] = {"p2p", "a2a", "allgather", "a2a+p2p"};
    bool hier = false;
    for (int i = 0; i < t->n; i++) {
        bool ok = false;
        for (int k = 0; k < 4; k++) ok |= strcmp(t->v[i], known[k]) == 0;
        if (!ok)
            TR_FAIL("model.cp_comm_type", "use p2p, a2a, allgather or a2a+p2p",
                    "model.cp_comm_type contains '%s', which is not a context-parallel exchange",
                    t->v[i]);
        hier |= strcmp(t->v[i], "a2a+p2p") == 0;
    }
    if (CP > 1 && t->n > 1 && t->n != c->model.num_layers)
        TR_FAIL("model.cp_comm_type,model.num_layers", "give one value, or one per layer",
                "model.cp_comm_type has %d entries but model.num_layers is %lld", t->n,
                tr_ll(c->model.num_layers));
    if (hier && (c->model.hierarchical_context_parallel_sizes.null ||
                 c->model.hierarchical_context_parallel_sizes.n == 0))
        TR_FAIL("model.cp_comm_type,model.hierarchical_context_parallel_sizes",
                "set model.hierarchical_context_parallel_sizes, e.g. [2, CP/2]",
                "model.cp_comm_type a2a+p2p needs model.hierarchical_context_parallel_sizes");
}

TR_RULE_FN(tr_check_vpp_needs_pp) {
    if (!tr_is_set(c->model.virtual_pipeline_model_parallel_size) || PP > 1) return;
    TR_FAIL("model.virtual_pipeline_model_parallel_size,model.pipeline_model_parallel_size",
            "unset model.virtual_pipeline_model_parallel_size, or use PP > 1",
            "model.virtual_pipeline_model_parallel_size (%lld) needs "
            "model.pipeline_model_parallel_size > 1 (it is %lld)",
            tr_ll(c->model.virtual_pipeline_model_parallel_size), tr_ll(PP));
}

/* The interleaved schedule runs microbatches in groups of G = microbatch_group_size_per_vp_stage
 * (default PP): PP <= G <= M, and a partial last group must still hold at least PP microbatches
 * (megatron-core.md §3.2). With the default G this means M must be a multiple of PP. */
TR_RULE_FN(tr_check_vpp_microbatches) {
    if (!tr_is_set(c->model.virtual_pipeline_model_parallel_size) || PP <= 1) return;
    int64_t m = c->derived.num_microbatches,
            g = tr_or(c->model.microbatch_group_size_per_vp_stage, PP);
    char hint[256];
    TR_FMT(hint,
           "make global_batch_size / (micro_batch_size * DP) a multiple of PP (%lld), e.g. "
           "global_batch_size = %lld",
           tr_ll(PP),
           tr_ll(PP * tr_or(c->train.micro_batch_size, 1) * c->derived.data_parallel_size *
                 ((m + PP - 1) / PP)));
    if (g < PP || g > m)
        TR_FAIL("derived.num_microbatches,model.microbatch_group_size_per_vp_stage,"
                "model.pipeline_model_parallel_size",
                hint,
                "with interleaving, model.microbatch_group_size_per_vp_stage (%lld) must lie in "
                "[PP = %lld, num_microbatches = %lld]",
                tr_ll(g), tr_ll(PP), tr_ll(m));
    else if (m % g != 0 && m % g < PP)
        TR_FAIL("derived.num_microbatches,model.pipeline_model_parallel_size,"
                "model.microbatch_group_size_per_vp_stage",
                hint,
                "with interleaving, num_microbatches (%lld) must be a multiple of "
                "model.microbatch_group_size_per_vp_stage (%lld) or leave a remainder >= PP (%lld)",
                tr_ll(m), tr_ll(g), tr_ll(PP));
}

TR_RULE_FN(tr_check_expert_dp_matches_without_pp_last) {
    if (!c->dist.use_tp_pp_dp_mapping || PP == 1) return;
    int64_t dp = c->derived.data_parallel_size, edp = c->derived.expert_data_parallel_size;
    if (dp == edp) return;
    TR_FAIL(
        "dist.use_tp_pp_dp_mapping,derived.data_parallel_size,derived.expert_data_parallel_size",
        "use the default rank order (dist.use_tp_pp_dp_mapping=false) or make EP*ETP equal TP*CP",
        "with dist.use_tp_pp_dp_mapping and PP > 1 the data-parallel size (%lld) must equal the "
        "expert data-parallel size (%lld)",
        tr_ll(dp), tr_ll(edp));
}

TR_RULE_FN(tr_check_distopt_instances_divide_dp_cp) {
    int64_t n = c->ddp.num_distributed_optimizer_instances,
            dpcp = c->derived.data_parallel_size * CP;
    if (dpcp % n == 0) return;
    TR_FAIL("ddp.num_distributed_optimizer_instances,derived.data_parallel_size,"
            "model.context_parallel_size",
            "choose a number of instances that divides DP * CP",
            "ddp.num_distributed_optimizer_instances (%lld) must divide DP * CP (%lld)", tr_ll(n),
            tr_ll(dpcp));
}

TR_RULE_FN(tr_check_weight_shards) {
    int64_t s = c->model.tensor_parallel_num_weight_shards;
    if (tr_is_set(s) && (s < TP || s % TP != 0))
        TR_FAIL("model.tensor_parallel_num_weight_shards,model.tensor_model_parallel_size",
                "use a multiple of tensor_model_parallel_size, or null",
                "model.tensor_parallel_num_weight_shards (%lld) must be a multiple of "
                "model.tensor_model_parallel_size (%lld) and at least it",
                tr_ll(s), tr_ll(TP));
    int64_t es = c->model.expert_tensor_parallel_num_weight_shards, etp = tr_or(ETP, TP);
    if (tr_is_set(es) && (es < etp || es % etp != 0))
        TR_FAIL("model.expert_tensor_parallel_num_weight_shards,model.expert_tensor_parallel_size",
                "use a multiple of expert_tensor_parallel_size, or null",
                "model.expert_tensor_parallel_num_weight_shards (%lld) must be a multiple of "
                "model.expert_tensor_parallel_size (%lld) and at least it",
                tr_ll(es), tr_ll(etp));
}

TR_RULE_FN(tr_check_defer_embedding_wgrad) {
    if (!c->model.defer_embedding_wgrad_compute) return;
    if (PP == 1)
        TR_FAIL("model.defer_embedding_wgrad_compute,model.pipeline_model_parallel_size",
                "turn defer_embedding_wgrad_compute off when PP is 1",
                "model.defer_embedding_wgrad_compute needs model.pipeline_model_parallel_size > 1");
    if (!c->model.gradient_accumulation_fusion)
        TR_FAIL("model.defer_embedding_wgrad_compute,model.gradient_accumulation_fusion",
                "set model.gradient_accumulation_fusion=true",
                "model.defer_embedding_wgrad_compute needs model.gradient_accumulation_fusion");
}

TR_RULE_FN(tr_check_p2p_warmup_flush) {
    const tr_model_config *m = &c->model;
    if (!m->overlap_p2p_comm_warmup_flush || (m->overlap_p2p_comm && !m->batch_p2p_comm)) return;
    TR_FAIL("model.overlap_p2p_comm_warmup_flush,model.overlap_p2p_comm,model.batch_p2p_comm",
            "set model.overlap_p2p_comm=true and model.batch_p2p_comm=false",
            "model.overlap_p2p_comm_warmup_flush needs model.overlap_p2p_comm (%s) without "
            "model.batch_p2p_comm (%s)",
            m->overlap_p2p_comm ? "true" : "false", m->batch_p2p_comm ? "true" : "false");
}

TR_RULE_FN(tr_check_sharp_group_needs_sharp) {
    if (c->dist.sharp_enabled_group < 0 || c->dist.use_sharp) return;
    TR_FAIL("dist.sharp_enabled_group,dist.use_sharp", "set dist.use_sharp=true or unset the group",
            "dist.sharp_enabled_group (%s) needs dist.use_sharp",
            tr_enum_str(&tr_enum_sharp_group, c->dist.sharp_enabled_group));
}

/* ---- warnings ---- */

TR_RULE_FN(tr_warn_tp_exceeds_node) {
    if (TP <= c->derived.gpus_per_node) return;
    TR_FAIL("model.tensor_model_parallel_size,derived.gpus_per_node",
            "keep tensor parallelism inside a node (TP <= GPUs per node)",
            "model.tensor_model_parallel_size (%lld) is larger than the GPUs per node (%lld): "
            "tensor-parallel traffic will cross the network",
            tr_ll(TP), tr_ll(c->derived.gpus_per_node));
}

TR_RULE_FN(tr_warn_pp_without_vpp) {
    if (PP <= 1 || tr_is_set(c->model.virtual_pipeline_model_parallel_size)) return;
    TR_FAIL("model.pipeline_model_parallel_size,model.virtual_pipeline_model_parallel_size",
            "set model.virtual_pipeline_model_parallel_size (e.g. 2) to shrink the pipeline bubble",
            "model.pipeline_model_parallel_size is %lld without interleaving: the pipeline bubble "
            "is (PP-1)/M of each step",
            tr_ll(PP));
}

TR_RULE_FN(tr_warn_ep_tp_without_sp) {
    if (EP <= 1 || TP <= 1 || c->model.sequence_parallel) return;
    TR_FAIL("model.sequence_parallel,model.expert_model_parallel_size,"
            "model.tensor_model_parallel_size",
            "set model.sequence_parallel=true",
            "expert parallelism (%lld) with tensor parallelism (%lld) should use "
            "model.sequence_parallel",
            tr_ll(EP), tr_ll(TP));
}
