/* config.json to the model section (runtime/hf/hf.h), for LlamaForCausalLM (the dimensions as
 * Megatron-Bridge's Llama bridge maps them, the Llama layer settings, rotary scaling, dtype),
 * Qwen3ForCausalLM (the same layers plus qk_layernorm; head_dim is explicit), GPT2LMHeadModel
 * and DeepseekV3ForCausalLM with dense layers (multi-latent attention, YaRN).
 * Both spellings transformers writes are read: rope_theta / rope_scaling / torch_dtype, and the
 * newer rope_parameters / dtype. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/field.h"
#include "providers/common.h"
#include "runtime/hf/hf.h"
#include "runtime/io/json.h"

typedef struct reader {
    const tr_json *root;
    const char *file;
    tr_diags *d;
    bool bad;
} reader;

static void fail(reader *r, const char *key, const char *hint, const char *what) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, r->file);
    tr_diag_add(r->d, TR_SEV_ERROR, "hf.config", &o, NULL, hint, "%s: \"%s\" %s", r->file, key,
                what);
    r->bad = true;
}

/* A whole number in [lo, hi]; `fallback` when absent or null (required when fallback < 0). */
static int64_t get_int(reader *r, const char *key, int64_t lo, int64_t hi, int64_t fallback) {
    const tr_json *v = tr_json_get(r->root, key);
    int64_t x;
    if ((!v || v->type == TR_JSON_NULL) && fallback >= 0) return fallback;
    if (!v || !tr_json_int(v, lo, hi, &x)) {
        fail(r, key, "every config.json of this architecture gives it as a positive integer",
             v ? "is not an integer in range" : "is missing");
        return lo;
    }
    return x;
}

static double get_num(reader *r, const tr_json *obj, const char *key, double fallback) {
    const tr_json *v = obj ? tr_json_get(obj, key) : NULL;
    if (!v || v->type == TR_JSON_NULL) return fallback;
    if (v->type != TR_JSON_NUMBER || !(v->number > 0)) {
        fail(r, key, NULL, "is not a positive number");
        return fallback;
    }
    return v->number;
}

static bool get_bool(reader *r, const char *key, bool fallback) {
    const tr_json *v = tr_json_get(r->root, key);
    if (!v || v->type == TR_JSON_NULL) return fallback;
    if (v->type != TR_JSON_TRUE && v->type != TR_JSON_FALSE) fail(r, key, NULL, "is not a boolean");
    return v->type == TR_JSON_TRUE;
}

static const char *get_str(const tr_json *obj, const char *key) {
    const tr_json *v = obj ? tr_json_get(obj, key) : NULL;
    return v && v->type == TR_JSON_STRING ? v->str : NULL;
}

/* Settings the Llama layers fix: anything else would be trained as something else. */
static void check_llama(reader *r, bool qwen3) {
    if (qwen3 && get_bool(r, "use_sliding_window", false))
        fail(r, "use_sliding_window", "Trestle has no sliding-window attention yet", "is true");
    const char *act = get_str(r->root, "hidden_act");
    if (act && strcmp(act, "silu") != 0)
        fail(r, "hidden_act", "Llama's MLP is SwiGLU (hidden_act silu)", "is not silu");
    if (get_bool(r, "attention_bias", false))
        fail(r, "attention_bias", "Trestle maps Llama without attention biases", "is true");
    if (get_bool(r, "mlp_bias", false))
        fail(r, "mlp_bias", "Trestle maps Llama without MLP biases", "is true");
}

static void apply_rope(reader *r, tr_model_config *m) {
    const tr_json *rp = tr_json_get(r->root, "rope_parameters");
    const tr_json *rs = tr_json_get(r->root, "rope_scaling");
    const tr_json *scaling = rp && rp->type == TR_JSON_OBJECT ? rp : rs;
    m->rotary_base = get_num(r, r->root, "rope_theta", get_num(r, rp, "rope_theta", 10000.0));
    if (!scaling || scaling->type == TR_JSON_NULL) return;
    const char *type = get_str(scaling, "rope_type");
    if (!type) type = get_str(scaling, "type");
    if (!type || strcmp(type, "default") == 0) return;
    if (strcmp(type, "llama3") != 0) {
        fail(r, rp == scaling ? "rope_parameters" : "rope_scaling",
             "Trestle maps the default and llama3 rotary scalings", "has an unsupported rope_type");
        return;
    }
    tr_provider_llama3_rope_scaling(m, get_num(r, scaling, "factor", 8.0));
    m->rope_scaling_low_freq_factor = get_num(r, scaling, "low_freq_factor", 1.0);
    m->rope_scaling_high_freq_factor = get_num(r, scaling, "high_freq_factor", 4.0);
    m->rope_scaling_original_max_position_embeddings =
        (int64_t)get_num(r, scaling, "original_max_position_embeddings", 8192.0);
}

static void apply_dtype(reader *r, tr_model_config *m) {
    const char *dt = get_str(r->root, "dtype");
    if (!dt) dt = get_str(r->root, "torch_dtype");
    if (!dt) return; /* the Llama layers' bf16 stays */
    m->bf16 = strcmp(dt, "bfloat16") == 0;
    m->fp16 = strcmp(dt, "float16") == 0;
    m->params_dtype = m->bf16 ? TR_DTYPE_BF16 : m->fp16 ? TR_DTYPE_FP16 : TR_DTYPE_FP32;
    if (!m->bf16 && !m->fp16 && strcmp(dt, "float32") != 0)
        fail(r, "dtype", "use float32, bfloat16 or float16", "is not a dtype Trestle trains in");
}

/* GPT2LMHeadModel's keys (n_embd, n_layer, ...): GPT layers with the tanh GeLU of "gelu_new". */
static tr_status apply_gpt2(tr_config *c, reader *r) {
    const int64_t big = (int64_t)1 << 31;
    tr_model_config *m = &c->model;
    int64_t hidden = get_int(r, "n_embd", 1, big, -1);
    int64_t layers = get_int(r, "n_layer", 1, big, -1), heads = get_int(r, "n_head", 1, big, -1);
    int64_t inner = get_int(r, "n_inner", 1, big, 4 * hidden);
    int64_t vocab = get_int(r, "vocab_size", 1, big, -1);
    int64_t positions = get_int(r, "n_positions", 1, big, -1);
    double eps = get_num(r, r->root, "layer_norm_epsilon", 1e-5);
    bool tied = get_bool(r, "tie_word_embeddings", true);
    const char *act = get_str(r->root, "activation_function");
    bool tanh_gelu = !act || strcmp(act, "gelu_new") == 0 || strcmp(act, "gelu_pytorch_tanh") == 0;
    if (act && !tanh_gelu && strcmp(act, "gelu") != 0)
        fail(r, "activation_function", "GPT-2's MLP uses gelu_new (tanh GeLU) or gelu",
             "is not a GeLU Trestle implements");
    /* Megatron has one hidden dropout for the embedding and the residual branches. */
    double resid = 0.1, embd = 0.1, attn = 0.1;
    const tr_json *v;
    if ((v = tr_json_get(r->root, "resid_pdrop")) && v->type == TR_JSON_NUMBER) resid = v->number;
    if ((v = tr_json_get(r->root, "embd_pdrop")) && v->type == TR_JSON_NUMBER) embd = v->number;
    if ((v = tr_json_get(r->root, "attn_pdrop")) && v->type == TR_JSON_NUMBER) attn = v->number;
    if (embd != resid)
        fail(r, "embd_pdrop", "Trestle has one hidden dropout: give embd_pdrop = resid_pdrop",
             "differs from resid_pdrop");
    if (r->bad) return TR_ERR_CONFIG;
    tr_provider_gpt_layers(m);
    m->num_layers = layers;
    m->hidden_size = hidden;
    m->ffn_hidden_size = inner;
    m->num_attention_heads = heads;
    m->num_query_groups = TR_NULL_INT;
    m->kv_channels = TR_NULL_INT;
    m->vocab_size = vocab;
    m->seq_length = positions;
    m->layernorm_epsilon = eps;
    m->share_embeddings_and_output_weights = tied;
    m->activation_func = tanh_gelu ? TR_ACT_FAST_GELU : TR_ACT_GELU;
    m->hidden_dropout = resid;
    m->attention_dropout = attn;
    apply_dtype(r, m);
    if (r->bad) return TR_ERR_CONFIG;
    return tr_config_set_str(c, TR_FID_model_hf_model_id, r->file);
}

/* The MoE layers (Megatron-Bridge's Mixtral and Qwen3-MoE bridges): experts, top-k, the expert
 * width, the aux loss coefficient; the probabilities renormalised over the top k are Megatron's
 * softmax over the selected logits (Qwen3-MoE's norm_topk_prob false: the softmax over all,
 * pre-softmax); Qwen3-MoE's dense layers (mlp_only_layers, decoder_sparse_step) as
 * moe_layer_freq. */
static tr_status apply_moe(tr_config *c, reader *r, bool qwen3_moe, int64_t layers) {
    tr_model_config *m = &c->model;
    const int64_t big = (int64_t)1 << 31;
    const tr_json *ne = tr_json_get(r->root, "num_experts");
    m->num_moe_experts = get_int(
        r, ne && ne->type != TR_JSON_NULL ? "num_experts" : "num_local_experts", 1, 1024, -1);
    m->moe_router_topk = get_int(r, "num_experts_per_tok", 1, m->num_moe_experts, -1);
    m->moe_ffn_hidden_size =
        qwen3_moe ? get_int(r, "moe_intermediate_size", 1, big, -1) : m->ffn_hidden_size;
    m->moe_router_pre_softmax = qwen3_moe && !get_bool(r, "norm_topk_prob", false);
    m->moe_router_load_balancing_type = TR_MOELB_AUX_LOSS;
    m->moe_aux_loss_coeff = get_num(r, r->root, "router_aux_loss_coef", 0.001);
    const tr_json *jit = tr_json_get(r->root, "router_jitter_noise");
    if (jit && jit->type == TR_JSON_NUMBER && jit->number != 0.0)
        fail(r, "router_jitter_noise", "Trestle maps Mixtral without router jitter", "is not 0");
    if (r->bad) return TR_ERR_CONFIG;
    if (!qwen3_moe) return TR_OK;
    int64_t step = get_int(r, "decoder_sparse_step", 1, big, 1);
    const tr_json *dense = tr_json_get(r->root, "mlp_only_layers");
    int64_t freq[256];
    if (layers > 256) return TR_OK; /* refused as runtime.moe_layers */
    for (int64_t i = 0; i < layers; i++) {
        freq[i] = (i + 1) % step == 0;
        for (size_t j = 0; dense && dense->type == TR_JSON_ARRAY && j < dense->n; j++) {
            int64_t v;
            if (tr_json_int(&dense->items[j], 0, big, &v) && v == i) freq[i] = 0;
        }
    }
    return tr_config_set_intlist(c, TR_FID_model_moe_layer_freq, freq, (int)layers);
}

/* A number that may be zero or negative; `fallback` when absent or null. */
static double get_real(reader *r, const tr_json *obj, const char *key, double fallback) {
    const tr_json *v = obj ? tr_json_get(obj, key) : NULL;
    if (!v || v->type == TR_JSON_NULL) return fallback;
    if (v->type != TR_JSON_NUMBER) fail(r, key, NULL, "is not a number");
    return v->type == TR_JSON_NUMBER ? v->number : fallback;
}

/* DeepseekV3ForCausalLM's MoE layers (after first_k_dense_replace dense ones) and MTP depths,
 * as Megatron-Bridge's DeepSeek-V3 bridge maps them: sigmoid scores with the expert bias
 * (e_score_correction_bias), group-limited routing, the routed scaling factor, shared experts
 * of n_shared_experts x moe_intermediate_size, the router in fp32; the balancing loss is the
 * bridge's (sequence-level, 1e-4), which transformers' model does not compute. */
static tr_status apply_deepseek_moe(tr_config *c, reader *r, int64_t layers) {
    tr_model_config *m = &c->model;
    const int64_t big = (int64_t)1 << 31;
    int64_t mtp = get_int(r, "num_nextn_predict_layers", 0, 64, 0);
    m->mtp_num_layers = mtp > 0 ? mtp : TR_NULL_INT;
    const tr_json *experts = tr_json_get(r->root, "n_routed_experts");
    int64_t first = get_int(r, "first_k_dense_replace", 0, big, 3);
    if (r->bad) return TR_ERR_CONFIG;
    if (!experts || experts->type == TR_JSON_NULL || first >= layers || layers > 256)
        return TR_OK; /* every layer dense (over 256: refused as runtime.moe_layers) */
    int64_t E = get_int(r, "n_routed_experts", 1, 1024, -1);
    if (r->bad) return TR_ERR_CONFIG;
    m->num_moe_experts = E;
    m->moe_router_topk = get_int(r, "num_experts_per_tok", 1, E, 8);
    m->moe_ffn_hidden_size = get_int(r, "moe_intermediate_size", 1, big, 2048);
    int64_t shared = get_int(r, "n_shared_experts", 0, 1024, 0);
    m->moe_shared_expert_intermediate_size =
        shared > 0 ? shared * m->moe_ffn_hidden_size : TR_NULL_INT;
    const char *score = get_str(r->root, "scoring_func");
    if (score && strcmp(score, "sigmoid") != 0)
        fail(r, "scoring_func", "DeepseekV3ForCausalLM routes by sigmoid scores", "is not sigmoid");
    m->moe_router_score_function = TR_SCORE_SIGMOID;
    m->moe_router_enable_expert_bias = true;
    m->moe_router_pre_softmax = true;
    m->moe_router_dtype = TR_RDTYPE_FP32;
    int64_t groups = get_int(r, "n_group", 1, E, 1), topk = m->moe_router_topk;
    int64_t group_topk = get_int(r, "topk_group", 1, groups, 1);
    if (groups > 1) {
        /* transformers scores a group by its best two experts, Megatron by its top
         * topk / topk_group: the same only where that is 2 */
        if (E % groups || topk % group_topk || topk / group_topk != 2)
            fail(r, "topk_group",
                 "Trestle maps group-limited routing where num_experts_per_tok / topk_group is 2 "
                 "and n_group divides n_routed_experts",
                 "scores groups differently from Megatron");
        m->moe_router_num_groups = groups;
        m->moe_router_group_topk = group_topk;
    }
    m->moe_router_topk_scaling_factor = get_real(r, r->root, "routed_scaling_factor", 1.0);
    if (topk > 1 && !get_bool(r, "norm_topk_prob", true))
        fail(r, "norm_topk_prob", "Megatron normalises the selected sigmoid scores", "is false");
    m->moe_router_load_balancing_type = TR_MOELB_SEQ_AUX_LOSS;
    m->moe_aux_loss_coeff = 1e-4;
    if (r->bad) return TR_ERR_CONFIG;
    int64_t freq[256];
    for (int64_t i = 0; i < layers; i++) freq[i] = i >= first;
    return tr_config_set_intlist(c, TR_FID_model_moe_layer_freq, freq, (int)layers);
}

/* DeepseekV3ForCausalLM's multi-latent attention and its rotary scaling (Megatron-Bridge's
 * DeepSeek-V3 bridge). */
static void apply_deepseek(reader *r, tr_model_config *m) {
    const int64_t big = (int64_t)1 << 31;
    if (!get_bool(r, "rope_interleave", true))
        fail(r, "rope_interleave", "Trestle keeps MLA's rotary channels interleaved, as DeepSeek",
             "is false");
    m->multi_latent_attention = true;
    m->qk_layernorm = true; /* q_a_layernorm and kv_a_layernorm */
    const tr_json *q = tr_json_get(r->root, "q_lora_rank");
    m->q_lora_rank =
        q && q->type != TR_JSON_NULL ? get_int(r, "q_lora_rank", 1, big, -1) : TR_NULL_INT;
    m->kv_lora_rank = get_int(r, "kv_lora_rank", 1, big, -1);
    m->qk_head_dim = get_int(r, "qk_nope_head_dim", 1, big, -1);
    m->qk_pos_emb_head_dim = get_int(r, "qk_rope_head_dim", 1, big, -1);
    m->v_head_dim = get_int(r, "v_head_dim", 1, big, -1);
    const tr_json *rp = tr_json_get(r->root, "rope_parameters");
    const tr_json *rs = tr_json_get(r->root, "rope_scaling");
    const tr_json *sc = rp && rp->type == TR_JSON_OBJECT ? rp : rs;
    const char *key = rp == sc ? "rope_parameters" : "rope_scaling";
    m->rotary_base = get_num(r, r->root, "rope_theta", get_num(r, rp, "rope_theta", 10000.0));
    const char *type = sc && sc->type == TR_JSON_OBJECT ? get_str(sc, "rope_type") : NULL;
    if (!type && sc && sc->type == TR_JSON_OBJECT) type = get_str(sc, "type");
    if (!type || strcmp(type, "default") == 0) {
        m->rope_type = TR_ROPE_ROPE;
        return;
    }
    if (strcmp(type, "yarn") != 0) {
        fail(r, key, "Trestle maps DeepSeek-V3's default and yarn rotary scalings",
             "has an unsupported rope_type");
        return;
    }
    m->rope_type = TR_ROPE_YARN;
    int64_t orig = (int64_t)get_num(r, sc, "original_max_position_embeddings", 4096.0);
    m->original_max_position_embeddings = orig;
    /* transformers' rule: no factor means the ratio of the two contexts */
    m->rotary_scaling_factor =
        get_num(r, sc, "factor", (double)get_int(r, "max_position_embeddings", 1, big, -1) / orig);
    m->beta_fast = get_real(r, sc, "beta_fast", 32.0);
    m->beta_slow = get_real(r, sc, "beta_slow", 1.0);
    /* transformers uses mscale / mscale_all_dim only as a pair (else the temperature of
     * mscale 1, mscale_all_dim 0, which Megatron's formula gives too) */
    double ms = get_real(r, sc, "mscale", 0.0), all = get_real(r, sc, "mscale_all_dim", 0.0);
    if ((ms != 0.0) != (all != 0.0) && !(ms == 1.0 && all == 0.0))
        fail(r, key, "give both mscale and mscale_all_dim, or neither",
             "has one of mscale and mscale_all_dim");
    m->mscale = ms != 0.0 && all != 0.0 ? ms : 1.0;
    m->mscale_all_dim = ms != 0.0 && all != 0.0 ? all : 0.0;
    if (tr_json_get(sc, "attention_factor"))
        fail(r, key, "Trestle derives YaRN's attention factor from mscale and mscale_all_dim",
             "sets attention_factor");
}

static tr_status apply(tr_config *c, reader *r) {
    const tr_json *arch = tr_json_get(r->root, "architectures");
    const char *name =
        arch && arch->type == TR_JSON_ARRAY && arch->n == 1 && arch->items[0].type == TR_JSON_STRING
            ? arch->items[0].str
            : NULL;
    if (name && strcmp(name, "GPT2LMHeadModel") == 0) return apply_gpt2(c, r);
    bool mixtral = name && strcmp(name, "MixtralForCausalLM") == 0;
    bool qwen3_moe = name && strcmp(name, "Qwen3MoeForCausalLM") == 0;
    bool qwen3 = name && (strcmp(name, "Qwen3ForCausalLM") == 0 || qwen3_moe);
    bool deepseek = name && strcmp(name, "DeepseekV3ForCausalLM") == 0;
    if (!name || (!qwen3 && !mixtral && !deepseek && strcmp(name, "LlamaForCausalLM") != 0)) {
        tr_origin o = tr_origin_make(TR_ORIGIN_FILE, r->file);
        return tr_diag_add(r->d, TR_SEV_ERROR, "hf.architecture", &o, NULL,
                           "Trestle imports LlamaForCausalLM (Llama 2, 3, 3.1, 3.2), "
                           "Qwen3ForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM, "
                           "GPT2LMHeadModel and DeepseekV3ForCausalLM so far",
                           "%s: architecture %s is not one Trestle maps", r->file,
                           name ? name : "(none given)");
    }
    const int64_t big = (int64_t)1 << 31;
    int64_t heads = get_int(r, "num_attention_heads", 1, big, -1);
    tr_hf_dims x = {.layers = get_int(r, "num_hidden_layers", 1, big, -1),
                    .hidden = get_int(r, "hidden_size", 1, big, -1),
                    .ffn = get_int(r, "intermediate_size", 1, big, -1),
                    .heads = heads,
                    .kv_heads = get_int(r, "num_key_value_heads", 1, big, heads),
                    /* transformers' Qwen3 defaults it to 128, not hidden / heads */
                    /* (DeepSeek's head_dim is the rotary part's: MLA has its own sizes) */
                    .head_dim = deepseek ? 0 : get_int(r, "head_dim", 1, big, qwen3 ? -1 : 0),
                    .vocab = get_int(r, "vocab_size", 1, big, -1),
                    .max_positions = get_int(r, "max_position_embeddings", 1, big, -1),
                    .norm_eps = get_num(r, r->root, "rms_norm_eps", 1e-6),
                    .tied = get_bool(r, "tie_word_embeddings", false),
                    .hf_id = r->file};
    check_llama(r, qwen3);
    if (r->bad) return TR_ERR_CONFIG;
    tr_model_config *m = &c->model;
    tr_provider_llama_layers(m);
    m->qk_layernorm = qwen3; /* Qwen3's per-head q_norm / k_norm */
    if (deepseek)
        apply_deepseek(r, m);
    else
        apply_rope(r, m);
    x.rope_theta = m->rotary_base;
    apply_dtype(r, m);
    if (r->bad) return TR_ERR_CONFIG;
    TR_TRY(tr_provider_set_hf_dims(c, &x));
    if (deepseek) return apply_deepseek_moe(c, r, x.layers);
    return mixtral || qwen3_moe ? apply_moe(c, r, qwen3_moe, x.layers) : TR_OK;
}

tr_status tr_hf_config_apply(tr_config *c, const char *dir, bool keep_schedule, tr_diags *d) {
    size_t n = strlen(dir) + sizeof "/config.json";
    char *path = malloc(n);
    if (!path) return TR_ERR_NOMEM;
    snprintf(path, n, "%s/config.json", dir);
    char *text = NULL;
    size_t len = 0;
    tr_json root = {0};
    tr_status st = tr_read_file(path, "hf.config", &text, &len, d);
    if (st == TR_OK) st = tr_json_parse(text, len, path, &root, d);
    tr_config *before = NULL;
    if (st == TR_OK && root.type != TR_JSON_OBJECT) {
        tr_origin o = tr_origin_make(TR_ORIGIN_FILE, path);
        st = tr_diag_add(d, TR_SEV_ERROR, "hf.config", &o, NULL, NULL,
                         "%s: the file is not a JSON object", path);
    }
    if (st == TR_OK && !(before = malloc(sizeof *before))) st = TR_ERR_NOMEM;
    if (st == TR_OK && (st = tr_config_copy(before, c)) != TR_OK) {
        free(before);
        before = NULL;
    }
    /* Origins point at the name, so the config keeps its own copy. */
    const char *file = st == TR_OK ? tr_config_intern(c, path) : NULL;
    if (st == TR_OK && !file) st = TR_ERR_NOMEM;
    if (st == TR_OK) {
        reader r = {.root = &root, .file = file, .d = d};
        st = apply(c, &r);
        if (st == TR_OK && keep_schedule) {
            c->model.seq_length = before->model.seq_length;
            c->model.params_dtype = before->model.params_dtype;
            c->model.bf16 = before->model.bf16;
            c->model.fp16 = before->model.fp16;
        }
        tr_origin o = tr_origin_make(TR_ORIGIN_FILE, file);
        if (st == TR_OK) st = tr_config_mark_changes(c, before, &o);
    }
    if (before) {
        tr_config_free(before);
        free(before);
    }
    tr_json_free(&root);
    free(text);
    free(path);
    return st;
}

bool tr_hf_is_model_dir(const char *dir) {
    char p[4096];
    struct stat sb;
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) return false;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (stat(p, &sb) == 0) return true;
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    return stat(p, &sb) == 0;
}

/* The model fields a checkpoint's weights and maths depend on. */
static const int checked_fields[] = {TR_FID_model_num_layers,
                                     TR_FID_model_hidden_size,
                                     TR_FID_model_ffn_hidden_size,
                                     TR_FID_model_num_attention_heads,
                                     TR_FID_model_num_query_groups,
                                     TR_FID_model_kv_channels,
                                     TR_FID_model_vocab_size,
                                     TR_FID_model_share_embeddings_and_output_weights,
                                     TR_FID_model_normalization,
                                     TR_FID_model_layernorm_epsilon,
                                     TR_FID_model_gated_linear_unit,
                                     TR_FID_model_activation_func,
                                     TR_FID_model_add_bias_linear,
                                     TR_FID_model_add_qkv_bias,
                                     TR_FID_model_position_embedding_type,
                                     TR_FID_model_rotary_base,
                                     TR_FID_model_rotary_percent,
                                     TR_FID_model_rope_scaling,
                                     TR_FID_model_rope_scaling_factor,
                                     TR_FID_model_rope_scaling_low_freq_factor,
                                     TR_FID_model_rope_scaling_high_freq_factor,
                                     TR_FID_model_rope_scaling_original_max_position_embeddings,
                                     TR_FID_model_layernorm_zero_centered_gamma,
                                     TR_FID_model_qk_layernorm,
                                     TR_FID_model_multi_latent_attention,
                                     TR_FID_model_q_lora_rank,
                                     TR_FID_model_kv_lora_rank,
                                     TR_FID_model_qk_head_dim,
                                     TR_FID_model_qk_pos_emb_head_dim,
                                     TR_FID_model_v_head_dim,
                                     TR_FID_model_rope_type,
                                     TR_FID_model_rotary_scaling_factor,
                                     TR_FID_model_original_max_position_embeddings,
                                     TR_FID_model_beta_fast,
                                     TR_FID_model_beta_slow,
                                     TR_FID_model_mscale,
                                     TR_FID_model_mscale_all_dim,
                                     TR_FID_model_num_moe_experts,
                                     TR_FID_model_moe_router_topk,
                                     TR_FID_model_moe_ffn_hidden_size,
                                     TR_FID_model_moe_shared_expert_intermediate_size,
                                     TR_FID_model_moe_layer_freq,
                                     TR_FID_model_moe_router_score_function,
                                     TR_FID_model_moe_router_pre_softmax,
                                     TR_FID_model_moe_router_enable_expert_bias,
                                     TR_FID_model_moe_router_num_groups,
                                     TR_FID_model_moe_router_group_topk,
                                     TR_FID_model_moe_router_topk_scaling_factor,
                                     TR_FID_model_mtp_num_layers};

/* The value finalize() gives a field whose null means "compute it": kv_channels (hidden /
 * heads), num_query_groups (the heads), ffn_hidden_size (4 x hidden). */
static bool resolved(const tr_model_config *m, int field, int64_t *out) {
    switch (field) {
    case TR_FID_model_kv_channels:
        *out = m->kv_channels != TR_NULL_INT ? m->kv_channels
                                             : m->hidden_size / m->num_attention_heads;
        return true;
    case TR_FID_model_num_query_groups:
        *out = m->num_query_groups != TR_NULL_INT ? m->num_query_groups : m->num_attention_heads;
        return true;
    case TR_FID_model_ffn_hidden_size:
        *out = m->ffn_hidden_size != TR_NULL_INT ? m->ffn_hidden_size : 4 * m->hidden_size;
        return true;
    default:
        return false;
    }
}

tr_status tr_hf_config_check(const tr_config *c, const char *dir, tr_diags *d) {
    tr_config *hf = malloc(sizeof *hf);
    if (!hf) return TR_ERR_NOMEM;
    tr_status st = tr_config_copy(hf, c);
    if (st != TR_OK) {
        free(hf);
        return st;
    }
    st = tr_hf_config_apply(hf, dir, true, d);
    bool bad = false; /* every disagreement is reported, not just the first */
    for (size_t i = 0; st == TR_OK && i < sizeof checked_fields / sizeof checked_fields[0]; i++) {
        const tr_field *f = &tr_fields[checked_fields[i]];
        const tr_model_config *a = &c->model, *b = &hf->model;
        /* A null that finalize() resolves compares as its resolved value. */
        int64_t ra, rb;
        if (resolved(a, checked_fields[i], &ra) && resolved(b, checked_fields[i], &rb)) {
            if (ra == rb) continue;
        } else if (tr_config_field_equal(c, hf, f)) {
            continue;
        }
        char va[128], vb[128], where[160];
        tr_config_field_format(c, f, va, sizeof va);
        tr_config_field_format(hf, f, vb, sizeof vb);
        tr_origin_format(&c->origin[f->id], where, sizeof where);
        bad = true;
        tr_diag_add(d, TR_SEV_ERROR, "hf.config_mismatch", &c->origin[f->id], f->path,
                    "remove the override, or use a checkpoint of the model you configure "
                    "(run_recipe --hf-model DIR takes the dimensions from it)",
                    "%s is %s (%s) but %s/config.json gives %s", f->path, va, where, dir, vb);
    }
    tr_config_free(hf);
    free(hf);
    return st == TR_OK && bad ? TR_ERR_CONFIG : st;
}
