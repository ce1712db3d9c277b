/* The MoE part of a validated config (what core/rules/runtime.c lets through). */
#include "core/config_query.h"
#include "runtime/moe/moe.h"

bool tr_moe_is_layer(const tr_moe_spec *s, int layer) {
    if (s->experts <= 0 || layer < 0 || layer >= TR_MOE_MAX_LAYERS) return false;
    return (s->layers[layer / 64] >> (layer % 64)) & 1u;
}

/* moe_layer_freq: [n] makes every n-th layer (from layer 0) MoE; a longer list flags each. */
static void mark_layers(const tr_model_config *m, tr_moe_spec *s) {
    const tr_int_list *f = &m->moe_layer_freq;
    for (int64_t i = 0; i < m->num_layers && i < TR_MOE_MAX_LAYERS; i++) {
        bool moe;
        if (f->null || f->n == 0)
            moe = true;
        else if (f->n == 1)
            moe = f->v[0] > 0 && i % f->v[0] == 0;
        else
            moe = i < f->n && f->v[i] != 0;
        if (moe) s->layers[i / 64] |= 1ull << (i % 64);
    }
}

tr_status tr_moe_spec_from_config(const tr_config *c, tr_moe_spec *s) {
    const tr_model_config *m = &c->model;
    *s = (tr_moe_spec){.ep_size = 1, .etp_size = 1};
    if (m->num_moe_experts == TR_NULL_INT) return TR_OK;
    if (m->num_moe_experts > TR_MOE_MAX_EXPERTS || m->num_layers > TR_MOE_MAX_LAYERS)
        return TR_ERR_INVALID; /* runtime.moe_layers refused it */
    s->experts = (int)m->num_moe_experts;
    s->topk = (int)m->moe_router_topk;
    s->ffn =
        (int)(m->moe_ffn_hidden_size != TR_NULL_INT ? m->moe_ffn_hidden_size : m->ffn_hidden_size);
    s->shared_ffn = m->moe_shared_expert_intermediate_size != TR_NULL_INT
                        ? (int)m->moe_shared_expert_intermediate_size
                        : 0;
    s->shared_gate = s->shared_ffn > 0 && m->moe_shared_expert_gate;
    s->score = m->moe_router_score_function == TR_SCORE_SIGMOID        ? TR_MOE_SIGMOID
               : m->moe_router_score_function == TR_SCORE_SQRTSOFTPLUS ? TR_MOE_SQRTSOFTPLUS
                                                                       : TR_MOE_SOFTMAX;
    s->pre_softmax = m->moe_router_pre_softmax;
    if (m->moe_router_num_groups != TR_NULL_INT && m->moe_router_group_topk != TR_NULL_INT) {
        s->groups = (int)m->moe_router_num_groups;
        s->group_topk = (int)m->moe_router_group_topk;
    }
    s->topk_scale = tr_is_null_float(m->moe_router_topk_scaling_factor)
                        ? 1.0f
                        : (float)m->moe_router_topk_scaling_factor;
    s->expert_bias = m->moe_router_enable_expert_bias;
    s->bias_rate = (float)m->moe_router_bias_update_rate;
    switch (m->moe_router_load_balancing_type) {
    case TR_MOELB_AUX_LOSS:
        s->balance = TR_MOE_LB_AUX;
        break;
    case TR_MOELB_SEQ_AUX_LOSS:
        s->balance = TR_MOE_LB_SEQ_AUX;
        break;
    case TR_MOELB_GLOBAL_AUX_LOSS:
        s->balance = TR_MOE_LB_GLOBAL_AUX;
        break;
    case TR_MOELB_NONE:
        s->balance = TR_MOE_LB_NONE;
        break;
    default:
        return TR_ERR_INVALID; /* sinkhorn: refused by runtime.moe_layers */
    }
    s->aux_coeff = (float)m->moe_aux_loss_coeff;
    s->z_coeff = tr_is_null_float(m->moe_z_loss_coeff) ? 0.0f : (float)m->moe_z_loss_coeff;
    if (!tr_is_null_float(m->moe_expert_capacity_factor)) {
        s->capacity = (float)m->moe_expert_capacity_factor;
        s->drop_position = m->moe_token_drop_policy == TR_DROP_POSITION;
        s->pad_capacity = m->moe_pad_expert_input_to_capacity;
    }
    s->jitter = tr_is_null_float(m->moe_input_jitter_eps) ? 0.0f : (float)m->moe_input_jitter_eps;
    if (m->moe_router_dtype == TR_RDTYPE_FP64) return TR_ERR_INVALID; /* refused */
    s->router_lowp = m->moe_router_dtype != TR_RDTYPE_FP32;
    s->per_token = m->calculate_per_token_loss;
    s->dispatcher = m->moe_token_dispatcher_type == TR_DISPATCH_ALLGATHER
                        ? TR_MOE_DISPATCH_ALLGATHER
                        : TR_MOE_DISPATCH_ALLTOALL; /* alltoall and flex */
    mark_layers(m, s);
    return TR_OK;
}
