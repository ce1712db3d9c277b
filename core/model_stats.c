/* Parameter and FLOP counting. The structure follows Megatron's GPT layer (pre-norm attention and
 * MLP blocks, optional MoE, optional multi-latent attention and MTP); the FLOP count follows the
 * shape of Megatron's num_floating_point_operations: 2 FLOPs per multiply-accumulate for every
 * weight a token passes through, plus the two attention matmuls, times 3 for training. */
#include "core/model_stats.h"

#include <stdbool.h>

typedef struct counts {
    double params;        /* all parameters */
    double active;        /* parameters used by one token */
    double matmul_active; /* weights of matrix multiplications one token passes through */
} counts;

static int64_t or_default(int64_t v, int64_t fallback) {
    return v == TR_NULL_INT ? fallback : v;
}

/* ffn_hidden_size, else MCore's 4 x hidden, in doubles: absurd sizes must not overflow. */
static double ffn_size(const tr_model_config *m) {
    return m->ffn_hidden_size == TR_NULL_INT ? 4.0 * (double)m->hidden_size
                                             : (double)m->ffn_hidden_size;
}

static void add(counts *k, double all, double active, double matmul) {
    k->params += all;
    k->active += active;
    k->matmul_active += matmul;
}

/* A norm over n features: LayerNorm has a bias, RMSNorm only a scale. */
static double norm_params(const tr_model_config *m, double n) {
    return m->normalization == TR_NORM_LAYERNORM ? 2 * n : n;
}

static void attention(const tr_model_config *m, counts *k) {
    double h = (double)m->hidden_size;
    double heads = (double)m->num_attention_heads;
    if (m->multi_latent_attention) {
        double qk = (double)(m->qk_head_dim + m->qk_pos_emb_head_dim);
        double q_w;
        double q_norm = 0;
        if (m->q_lora_rank != TR_NULL_INT) {
            double r = (double)m->q_lora_rank;
            q_w = h * r + r * heads * qk;
            q_norm = norm_params(m, r);
        } else {
            q_w = h * heads * qk;
        }
        double kvr = (double)m->kv_lora_rank;
        double kv_w = h * (kvr + (double)m->qk_pos_emb_head_dim) +
                      kvr * heads * (double)(m->qk_head_dim + m->v_head_dim);
        double proj_w = heads * (double)m->v_head_dim * h;
        double norms = q_norm + norm_params(m, kvr);
        double w = q_w + kv_w + proj_w;
        add(k, w + norms, w + norms, w);
        return;
    }
    int64_t head_dim = or_default(m->kv_channels, m->hidden_size / m->num_attention_heads);
    double q = (double)head_dim * heads;
    double kv = (double)head_dim * (double)or_default(m->num_query_groups, m->num_attention_heads);
    double qkv_w = h * (q + 2 * kv);
    double proj_w = q * h;
    double bias = 0;
    if (m->add_bias_linear || m->add_qkv_bias) bias += q + 2 * kv;
    if (m->add_bias_linear) bias += h;
    double qk_norm = m->qk_layernorm ? 2 * norm_params(m, (double)head_dim) : 0;
    double w = qkv_w + proj_w;
    add(k, w + bias + qk_norm, w + bias + qk_norm, w);
}

/* One MLP of inner size ffn: fc1 (doubled when gated), fc2, and their biases. */
static double mlp_weights(const tr_model_config *m, double ffn) {
    double h = (double)m->hidden_size;
    return h * ffn * (m->gated_linear_unit ? 3 : 2);
}

static double mlp_biases(const tr_model_config *m, double ffn) {
    if (!m->add_bias_linear) return 0;
    return ffn * (m->gated_linear_unit ? 2 : 1) + (double)m->hidden_size;
}

static void dense_mlp(const tr_model_config *m, counts *k) {
    double ffn = ffn_size(m);
    double w = mlp_weights(m, ffn);
    double b = mlp_biases(m, ffn);
    add(k, w + b, w + b, w);
}

static void moe_mlp(const tr_model_config *m, counts *k) {
    double h = (double)m->hidden_size;
    double experts = (double)m->num_moe_experts;
    double topk = (double)m->moe_router_topk;
    if (topk > experts) topk = experts;
    double ffn =
        m->moe_ffn_hidden_size == TR_NULL_INT ? ffn_size(m) : (double)m->moe_ffn_hidden_size;
    double expert = mlp_weights(m, ffn) + mlp_biases(m, ffn);
    double router = h * experts;
    add(k, experts * expert, topk * expert, topk * mlp_weights(m, ffn));
    add(k, router, router, router);
    if (m->moe_shared_expert_intermediate_size != TR_NULL_INT) {
        double sf = (double)m->moe_shared_expert_intermediate_size;
        double w = mlp_weights(m, sf);
        add(k, w + mlp_biases(m, sf), w + mlp_biases(m, sf), w);
    }
}

/* moe_layer_freq: [n] makes every n-th layer (from layer 0) MoE; a longer list flags each layer. */
static bool layer_is_moe(const tr_model_config *m, int64_t layer) {
    if (m->num_moe_experts == TR_NULL_INT) return false;
    const tr_int_list *f = &m->moe_layer_freq;
    if (f->null || f->n == 0) return true;
    if (f->n == 1) return f->v[0] > 0 && layer % f->v[0] == 0;
    return layer < f->n && f->v[layer] != 0;
}

/* Counted without a loop over layers so that absurd layer counts stay cheap. */
static int64_t count_moe_layers(const tr_model_config *m) {
    if (m->num_moe_experts == TR_NULL_INT) return 0;
    const tr_int_list *f = &m->moe_layer_freq;
    if (f->null || f->n == 0) return m->num_layers;
    if (f->n == 1) return f->v[0] > 0 ? (m->num_layers + f->v[0] - 1) / f->v[0] : 0;
    int64_t n = 0;
    for (int64_t i = 0; i < m->num_layers && i < f->n; i++) n += f->v[i] != 0;
    return n;
}

static counts one_layer(const tr_model_config *m, bool moe) {
    counts k = {0, 0, 0};
    double norms = 2 * norm_params(m, (double)m->hidden_size); /* before attention and MLP */
    add(&k, norms, norms, 0);
    attention(m, &k);
    if (moe)
        moe_mlp(m, &k);
    else
        dense_mlp(m, &k);
    return k;
}

static void add_layers(counts *k, counts layer, double n) {
    add(k, n * layer.params, n * layer.active, n * layer.matmul_active);
}

/* Forward FLOPs per token of the two attention matmuls (QK^T and PV) of one layer, with causal
 * masking halving the work: 2 FLOPs x seq x dim per matmul, halved. */
static double attention_flops(const tr_model_config *m) {
    double s = (double)m->seq_length;
    double heads = (double)m->num_attention_heads;
    if (m->multi_latent_attention)
        return s * heads * (double)(m->qk_head_dim + m->qk_pos_emb_head_dim + m->v_head_dim);
    int64_t head_dim = or_default(m->kv_channels, m->hidden_size / m->num_attention_heads);
    return 2 * s * heads * (double)head_dim;
}

/* Absurd sizes saturate instead of overflowing the integer fields. */
static int64_t to_count(double x) {
    return x >= 9.2e18 ? INT64_MAX : (int64_t)x;
}

tr_model_stats tr_model_stats_compute(const tr_model_config *m, int64_t vocab) {
    tr_model_stats st = {0};
    if (m->num_layers <= 0 || m->hidden_size <= 0 || m->num_attention_heads <= 0) return st;
    if (vocab == TR_NULL_INT || vocab < 0) vocab = 0;
    double h = (double)m->hidden_size;
    double v = (double)vocab;
    counts k = {0, 0, 0};

    /* The input embedding is a lookup, not a matmul. */
    add(&k, v * h, v * h, 0);
    if (m->position_embedding_type == TR_POSEMB_LEARNED_ABSOLUTE) {
        double pos = (double)m->seq_length * h;
        add(&k, pos, pos, 0);
    }
    int64_t n_moe = count_moe_layers(m);
    add_layers(&k, one_layer(m, false), (double)(m->num_layers - n_moe));
    add_layers(&k, one_layer(m, true), (double)n_moe);
    double attn_flops = (double)m->num_layers * attention_flops(m);
    double final_norm = norm_params(m, h);
    add(&k, final_norm, final_norm, 0);
    /* The output projection always costs a matmul; it adds parameters only when untied. */
    double out = m->share_embeddings_and_output_weights ? 0 : v * h;
    add(&k, out, out, v * h);

    /* Each MTP depth: two norms, a 2h -> h projection, one more layer (shaped like the last one),
     * a final norm, and another pass through the shared output layer. */
    double mtp = (double)or_default(m->mtp_num_layers, 0);
    counts main = k;
    if (mtp > 0) {
        double proj = 2 * h * h;
        double norms = 3 * norm_params(m, h);
        add(&k, mtp * (proj + norms), mtp * (proj + norms), mtp * (proj + v * h));
        add_layers(&k, one_layer(m, layer_is_moe(m, m->num_layers - 1)), mtp);
        attn_flops += mtp * attention_flops(m);
    }

    st.num_params = to_count(k.params);
    st.num_active_params = to_count(k.active);
    st.num_mtp_params = st.num_params - to_count(main.params);
    st.num_mtp_active_params = st.num_active_params - to_count(main.active);
    double forward = 2 * k.matmul_active + attn_flops;
    st.flops_per_token = 3 * forward;
    return st;
}

tr_status tr_model_stats_fill(tr_config *c) {
    int64_t vocab = c->derived.padded_vocab_size != TR_NULL_INT ? c->derived.padded_vocab_size
                                                                : c->model.vocab_size;
    tr_model_stats st = tr_model_stats_compute(&c->model, vocab);
    c->derived.num_params = st.num_params;
    c->derived.num_active_params = st.num_active_params;
    c->derived.num_mtp_params = st.num_mtp_params;
    c->derived.num_mtp_active_params = st.num_mtp_active_params;
    c->derived.flops_per_token = st.flops_per_token;
    return TR_OK;
}
