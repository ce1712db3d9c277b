/* The model section of a validated config, reduced to what the CPU maths implements. What the
 * config can express but the runtime cannot yet run is refused before this by tr_runtime_check
 * (core/rules/runtime.c), the same rules the dry run reports. */
#include <math.h>

#include "core/config_query.h"
#include "runtime/model/model.h"

/* As Transformer Engine: the pipelined input-gradient reduce-scatter replaces the bulk one. */
static unsigned tp_overlap_bits(const tr_model_config *m) {
    if (!m->tp_comm_overlap || !m->sequence_parallel || m->tensor_model_parallel_size < 2) return 0;
    unsigned b = 0;
    if (m->tp_comm_overlap_ag) b |= TR_TPO_AG;
    if (m->tp_comm_overlap_rs) b |= TR_TPO_RS;
    if (m->tp_comm_overlap_rs_dgrad)
        b |= TR_TPO_RS_DGRAD;
    else if (m->tp_comm_bulk_wgrad)
        b |= TR_TPO_BULK_WGRAD;
    if (m->tp_comm_overlap_disable_qkv) b |= TR_TPO_NO_QKV;
    if (m->tp_comm_overlap_disable_fc1) b |= TR_TPO_NO_FC1;
    return b;
}

/* Multi-latent attention: its own rotary part (s->rope off), linear_proj's input per head is a
 * value head, the queries have no groups; the q/kv norms exist under qk_layernorm (Megatron's
 * MLA spec), so the model's own q/k norms are off. */
static void mla_spec(const tr_model_config *m, tr_model_spec *s) {
    tr_mla_spec *a = &s->mla;
    a->on = 1;
    a->q_lora_rank = m->q_lora_rank != TR_NULL_INT ? (int)m->q_lora_rank : 0;
    a->kv_lora_rank = (int)m->kv_lora_rank;
    a->qk_dim = (int)m->qk_head_dim;
    a->rope_dim = (int)m->qk_pos_emb_head_dim;
    a->v_dim = (int)m->v_head_dim;
    a->norms = m->qk_layernorm;
    a->yarn = m->rope_type == TR_ROPE_YARN;
    a->rope_base = m->rotary_base;
    a->factor = tr_is_null_float(m->rotary_scaling_factor) ? 1.0 : m->rotary_scaling_factor;
    a->mscale = m->mscale;
    a->mscale_all_dim = m->mscale_all_dim;
    a->original_max_position = (double)m->original_max_position_embeddings;
    a->beta_fast = m->beta_fast;
    a->beta_slow = m->beta_slow;
    s->head_dim = a->v_dim;
    s->groups = s->heads;
    s->rope = 0;
    s->qk_norm = 0;
}

tr_status tr_model_spec_from_config(const tr_config *c, tr_model_spec *s, tr_diags *d) {
    (void)d; /* what the runtime cannot run was refused by tr_runtime_check */
    const tr_model_config *m = &c->model;
    *s = (tr_model_spec){0};
    s->num_layers = (int)m->num_layers;
    s->hidden = (int)m->hidden_size;
    s->heads = (int)m->num_attention_heads;
    s->groups = m->num_query_groups != TR_NULL_INT ? (int)m->num_query_groups : s->heads;
    s->head_dim = m->kv_channels != TR_NULL_INT ? (int)m->kv_channels : s->hidden / s->heads;
    s->ffn = m->ffn_hidden_size != TR_NULL_INT ? (int)m->ffn_hidden_size : 4 * s->hidden;
    int64_t v = c->derived.padded_vocab_size;
    if (v == TR_NULL_INT) v = m->vocab_size;
    if (v == TR_NULL_INT || v <= 0) return TR_ERR_INVALID; /* runtime.vocab refused it */
    s->vocab = (int)v;
    s->sequence_parallel = m->sequence_parallel;
    s->tp_overlap = tp_overlap_bits(m);
    s->vocab_real = m->vocab_size != TR_NULL_INT && m->vocab_size < v ? (int)m->vocab_size : 0;
    /* Context parallelism: the model holds its two chunks of every sequence. */
    s->cp = (int)m->context_parallel_size;
    s->seq = (int)(m->seq_length / (s->cp > 1 ? s->cp : 1));
    s->layernorm = m->normalization == TR_NORM_LAYERNORM;
    s->swiglu = m->gated_linear_unit;
    s->gelu_tanh = m->activation_func == TR_ACT_FAST_GELU;
    s->learned_pos = m->position_embedding_type == TR_POSEMB_LEARNED_ABSOLUTE;
    s->rope = m->position_embedding_type == TR_POSEMB_ROPE;
    if (s->rope) {
        int rot = (int)(s->head_dim * m->rotary_percent);
        s->rope_p = (tr_rope_params){
            .rot_dim = rot - rot % 2,
            .base = m->rotary_base,
            .interp_factor = tr_is_null_float(m->seq_len_interpolation_factor)
                                 ? 0.0
                                 : m->seq_len_interpolation_factor,
            .llama3 = m->rope_scaling,
            .factor = m->rope_scaling_factor,
            .low_freq_factor = m->rope_scaling_low_freq_factor,
            .high_freq_factor = m->rope_scaling_high_freq_factor,
            .original_max_position = (double)m->rope_scaling_original_max_position_embeddings,
        };
    }
    if (m->multi_latent_attention) mla_spec(m, s);
    if (m->mtp_num_layers != TR_NULL_INT && m->mtp_num_layers > 0) {
        s->mtp_layers = (int)m->mtp_num_layers;
        s->mtp_scale = (float)(m->mtp_loss_scaling_factor / (double)m->mtp_num_layers);
    }
    s->bias_linear = m->add_bias_linear;
    s->bias_qkv = m->add_bias_linear || m->add_qkv_bias;
    s->tied = m->share_embeddings_and_output_weights;
    s->zero_centered = m->layernorm_zero_centered_gamma;
    s->qk_norm = m->qk_layernorm && !m->multi_latent_attention;
    s->qk_norm_wd = c->optimizer.apply_wd_to_qk_layernorm;
    s->eps = (float)m->layernorm_epsilon;
    s->init_std = m->init_method_std;
    s->embed_init_std = tr_is_null_float(m->embedding_init_method_std)
                            ? m->init_method_std
                            : m->embedding_init_method_std;
    s->hidden_dropout = (float)m->hidden_dropout;
    s->attention_dropout = (float)m->attention_dropout;
    s->lowp = m->bf16 ? TR_LOWP_BF16 : m->fp16 ? TR_LOWP_F16 : 0;
    if (m->recompute_granularity == TR_RECG_FULL) {
        s->recompute = TR_RECOMPUTE_FULL;
        s->recompute_block = m->recompute_method == TR_RECM_BLOCK;
        s->recompute_layers = (int)m->recompute_num_layers;
    } else if (m->recompute_granularity == TR_RECG_SELECTIVE) {
        /* finalize made a null list Megatron's default [core_attn] (in TR_RC_MOD_* order) */
        static const char *const mods[] = {"core_attn", "mlp",     "layernorm",     "mla_up_proj",
                                           "moe",       "moe_act", "shared_experts"};
        s->recompute = TR_RECOMPUTE_SELECTIVE;
        for (unsigned k = 0; k < sizeof mods / sizeof *mods; k++)
            if (tr_strlist_has(&m->recompute_modules, mods[k])) s->recompute_modules |= 1u << k;
    }
    /* Only the pipeline's flush drains (parallel.defer_embedding_wgrad refuses PP 1). */
    if (m->defer_embedding_wgrad_compute && m->pipeline_model_parallel_size > 1) {
        int64_t nmb = c->derived.num_microbatches, limit = m->wgrad_deferral_limit;
        s->defer_wgrad = (int)(limit > 0 && limit < nmb ? limit : nmb);
    }
    return tr_moe_spec_from_config(c, &s->moe);
}

/* More TP ranks than query groups: each group's key and value heads are copied to the
 * tp.size / groups ranks whose query heads read them. */
int tr_model_kv_replicas(const tr_model_spec *s, tr_tp_shard tp) {
    return s->groups < tp.size ? tp.size / s->groups : 1;
}

double tr_model_flops_per_seq(const tr_model_spec *s) {
    double T = s->seq, C = s->hidden, hd = (double)s->heads * s->head_dim;
    double qkv_flops = C * (double)(s->heads + 2 * s->groups) * s->head_dim;
    /* causal attention: QK^T and PV over on average T/2 keys */
    double attn = 2.0 * 2.0 * hd * (T / 2.0);
    const tr_mla_spec *a = &s->mla;
    if (a->on) { /* the latent projections; QK^T over qk + rope channels, PV over v */
        double H = s->heads, qd = a->qk_dim + a->rope_dim, qr = a->q_lora_rank;
        double kr = a->kv_lora_rank;
        qkv_flops = (qr > 0 ? C * qr + qr * H * qd : C * H * qd) + C * (kr + a->rope_dim) +
                    kr * H * (a->qk_dim + a->v_dim);
        attn = 2.0 * H * (qd + a->v_dim) * (T / 2.0);
    }
    double fc1 = s->swiglu ? 2.0 * s->ffn : s->ffn;
    double per_tok = 2.0 * (qkv_flops + hd * C + C * fc1 + s->ffn * C);
    /* each MTP depth: a layer, eh_proj [C, 2C] and another pass through the output layer */
    double mtp = s->mtp_layers * T * (per_tok + attn + 2.0 * 2.0 * C * C + 2.0 * C * s->vocab);
    /* an MoE layer: the router and the top-k experts (and the shared expert) instead of the MLP */
    double moe_delta = 0.0;
    for (int i = 0; i < s->num_layers + s->mtp_layers && s->moe.experts > 0; i++)
        if (tr_moe_is_layer(&s->moe, i < s->num_layers ? i : s->num_layers - 1)) {
            double g = s->swiglu ? 3.0 : 2.0; /* weights per unit of width */
            double mlp = g * C * ((double)s->moe.topk * s->moe.ffn + s->moe.shared_ffn);
            moe_delta += 2.0 * (C * s->moe.experts + mlp - (C * fc1 + s->ffn * C));
        }
    return T * (s->num_layers * (per_tok + attn) + moe_delta) + 2.0 * T * C * s->vocab + mtp;
}

void tr_param_kv_range(const tr_param_info *p, int64_t *off, int64_t *numel) {
    *off = *numel = 0;
    if (p->kv_rep <= 1) return;
    /* Rows split: whole rows of the weight; columns split: the bias, one row. */
    int64_t unit = p->split_dim == 0 ? p->cols : 1;
    *off = (int64_t)p->kv_q * unit;
    *numel = (int64_t)p->kv_len * unit;
}
