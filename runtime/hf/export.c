/* A whole Trestle Llama, Qwen3, GPT-2, Mixtral, Qwen3-MoE or DeepSeek-V3 model to a Hugging Face
 * directory (runtime/hf/hf.h): config.json from the model section, model.safetensors with the
 * tensors under transformers' names. The tensors are filled through the import's own map
 * (runtime/hf/llama.c, gpt2.c, moe.c, deepseek.c), run the other way: the fused QKV, fc1 and
 * the experts' [gate; up] split back (GPT-2: c_attn refused, Conv1D weights
 * transposed back), the vocabulary padding dropped. A model with LoRA or DoRA adapters is merged
 * into a model without them first (runtime/peft/lora.h), as Megatron-Bridge exports it. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/common/lowp_bits.h"
#include "runtime/device/device.h"
#include "runtime/hf/internal.h"
#include "runtime/peft/lora.h"

typedef struct out_tensor {
    char name[128];
    int64_t rows, cols; /* cols 0: a vector */
} out_tensor;

static tr_status export_error(tr_diags *d, const char *dir, const char *what) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, dir);
    return tr_diag_add(d, TR_SEV_ERROR, "hf.export", &o, NULL,
                       "export a whole model (one rank, every layer) of a Llama, Qwen3, GPT-2, "
                       "Mixtral, Qwen3-MoE or DeepSeek-V3 spec",
                       "%s: %s", dir, what);
}

/* DeepseekV3ForCausalLM's attention tensors of layer i (after its input norm), from o[n]. */
static int list_mla(const tr_model_spec *s, int i, out_tensor *o, int n) {
    const tr_mla_spec *a = &s->mla;
    int64_t C = s->hidden, H = s->heads, qd = a->qk_dim + a->rope_dim, qr = a->q_lora_rank;
    int64_t kr = a->kv_lora_rank;
    const struct {
        const char *suffix;
        int64_t rows, cols;
        bool on;
    } t[] = {{"self_attn.q_a_proj.weight", qr, C, qr > 0},
             {"self_attn.q_a_layernorm.weight", qr, 0, qr > 0},
             {"self_attn.q_b_proj.weight", H * qd, qr, qr > 0},
             {"self_attn.q_proj.weight", H * qd, C, qr == 0},
             {"self_attn.kv_a_proj_with_mqa.weight", kr + a->rope_dim, C, true},
             {"self_attn.kv_a_layernorm.weight", kr, 0, true},
             {"self_attn.kv_b_proj.weight", H * (a->qk_dim + a->v_dim), kr, true}};
    o[n] = (out_tensor){"", C, 0};
    snprintf(o[n].name, sizeof o[n].name, "model.layers.%d.input_layernorm.weight", i);
    n++;
    for (size_t j = 0; j < sizeof t / sizeof t[0]; j++) {
        if (!t[j].on) continue;
        o[n] = (out_tensor){"", t[j].rows, t[j].cols};
        snprintf(o[n].name, sizeof o[n].name, "model.layers.%d.%s", i, t[j].suffix);
        n++;
    }
    return n;
}

static int add(out_tensor *o, int n, int64_t rows, int64_t cols, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* o[n] named by fmt, of rows x cols; the next free index. */
static int add(out_tensor *o, int n, int64_t rows, int64_t cols, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o[n].name, sizeof o[n].name, fmt, ap);
    va_end(ap);
    o[n].rows = rows;
    o[n].cols = cols;
    return n + 1;
}

/* The MoE block of HF layer i: router (DeepSeek: and its bias), the experts, the shared experts. */
static int list_moe(const tr_model_spec *s, const tr_hf_moe_names *nm, int i, out_tensor *o,
                    int n) {
    int64_t C = s->hidden, F = s->moe.ffn, S = s->moe.shared_ffn;
    const char *b = nm->block;
    n = add(o, n, s->moe.experts, C, "model.layers.%d.%s.gate.weight", i, b);
    if (nm->deepseek)
        n = add(o, n, s->moe.experts, 0, "model.layers.%d.%s.gate.e_score_correction_bias", i, b);
    for (int e = 0; e < s->moe.experts; e++) {
        n = add(o, n, F, C, "model.layers.%d.%s.experts.%d.%s.weight", i, b, e, nm->gate);
        n = add(o, n, F, C, "model.layers.%d.%s.experts.%d.%s.weight", i, b, e, nm->up);
        n = add(o, n, C, F, "model.layers.%d.%s.experts.%d.%s.weight", i, b, e, nm->down);
    }
    if (nm->deepseek && S > 0) {
        n = add(o, n, S, C, "model.layers.%d.%s.shared_experts.%s.weight", i, b, nm->gate);
        n = add(o, n, S, C, "model.layers.%d.%s.shared_experts.%s.weight", i, b, nm->up);
        n = add(o, n, C, S, "model.layers.%d.%s.shared_experts.%s.weight", i, b, nm->down);
    }
    return n;
}

/* transformers' order and shapes: embedding, each layer's modules, the final norm, the head.
 * DeepSeek-V3's MTP depths follow as layers num_layers.. (enorm, hnorm, eh_proj, the layer,
 * shared_head.norm, and the copies of the embedding and the output layer), as DeepSeek's
 * checkpoints hold them. */
static int list_tensors(const tr_model_spec *s, int64_t vocab, const tr_hf_moe_names *nm,
                        out_tensor *o) {
    int n = 0;
    int64_t C = s->hidden, q = (int64_t)s->heads * s->head_dim,
            kv = (int64_t)s->groups * s->head_dim, F = s->ffn;
    tr_hf_shape k = tr_hf_shape_of(s);
    o[n++] = (out_tensor){"model.embed_tokens.weight", vocab, C};
    for (int i = 0; i < s->num_layers + s->mtp_layers; i++) {
        const struct {
            const char *suffix;
            int64_t rows, cols;
        } mods[] = {{"input_layernorm.weight", C, 0},   {"self_attn.q_proj.weight", q, C},
                    {"self_attn.k_proj.weight", kv, C}, {"self_attn.v_proj.weight", kv, C},
                    {"self_attn.o_proj.weight", C, q},  {"post_attention_layernorm.weight", C, 0},
                    {"mlp.gate_proj.weight", F, C},     {"mlp.up_proj.weight", F, C},
                    {"mlp.down_proj.weight", C, F}};
        const size_t n_mods = sizeof mods / sizeof mods[0];
        bool moe = nm && tr_hf_is_moe_layer(&k, i), mtp = i >= s->num_layers;
        if (mtp) {
            n = add(o, n, C, 0, "model.layers.%d.enorm.weight", i);
            n = add(o, n, C, 0, "model.layers.%d.hnorm.weight", i);
            n = add(o, n, C, 2 * C, "model.layers.%d.eh_proj.weight", i);
        }
        size_t from = 0;
        if (s->mla.on) { /* DeepSeek-V3's attention tensors instead of q/k/v */
            n = list_mla(s, i, o, n);
            from = 4;
        }
        for (size_t j = from; j < n_mods; j++) {
            if (moe && j >= 6) break; /* the MoE block instead of the MLP */
            n = add(o, n, mods[j].rows, mods[j].cols, "model.layers.%d.%s", i, mods[j].suffix);
        }
        if (moe) n = list_moe(s, nm, i, o, n);
        if (s->qk_norm && !s->mla.on) { /* Qwen3's q_norm / k_norm */
            n = add(o, n, s->head_dim, 0, "model.layers.%d.self_attn.q_norm.weight", i);
            n = add(o, n, s->head_dim, 0, "model.layers.%d.self_attn.k_norm.weight", i);
        }
        if (mtp) {
            n = add(o, n, vocab, C, "model.layers.%d.embed_tokens.weight", i);
            n = add(o, n, C, 0, "model.layers.%d.shared_head.norm.weight", i);
            n = add(o, n, vocab, C, "model.layers.%d.shared_head.head.weight", i);
        }
    }
    o[n++] = (out_tensor){"model.norm.weight", C, 0};
    if (!s->tied) o[n++] = (out_tensor){"lm_head.weight", vocab, C};
    return n;
}

/* GPT2LMHeadModel as save_pretrained writes it ("transformer." names, Conv1D weights [in, out]);
 * a tied model has no lm_head. */
static int list_gpt2(const tr_model_spec *s, int64_t vocab, out_tensor *o) {
    int n = 0;
    int64_t C = s->hidden, F = s->ffn;
    o[n++] = (out_tensor){"transformer.wte.weight", vocab, C};
    o[n++] = (out_tensor){"transformer.wpe.weight", s->seq, C};
    const struct {
        const char *suffix;
        int64_t rows, cols;
    } mods[] = {{"ln_1.weight", C, 0},
                {"ln_1.bias", C, 0},
                {"attn.c_attn.weight", C, 3 * C},
                {"attn.c_attn.bias", 3 * C, 0},
                {"attn.c_proj.weight", C, C},
                {"attn.c_proj.bias", C, 0},
                {"ln_2.weight", C, 0},
                {"ln_2.bias", C, 0},
                {"mlp.c_fc.weight", C, F},
                {"mlp.c_fc.bias", F, 0},
                {"mlp.c_proj.weight", F, C},
                {"mlp.c_proj.bias", C, 0}};
    for (int i = 0; i < s->num_layers; i++)
        for (size_t j = 0; j < sizeof mods / sizeof mods[0]; j++) {
            o[n] = (out_tensor){"", mods[j].rows, mods[j].cols};
            snprintf(o[n].name, sizeof o[n].name, "transformer.h.%d.%s", i, mods[j].suffix);
            n++;
        }
    o[n++] = (out_tensor){"transformer.ln_f.weight", C, 0};
    o[n++] = (out_tensor){"transformer.ln_f.bias", C, 0};
    if (!s->tied) o[n++] = (out_tensor){"lm_head.weight", vocab, C};
    return n;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const tr_st_tensor *)a)->name, ((const tr_st_tensor *)b)->name);
}

/* The shortest decimal that reads back as the same float: 1e-05, not 9.99999975e-06. */
static void float_text(float x, char *buf, size_t cap) {
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, cap, "%.*g", p, (double)x);
        if ((float)strtod(buf, NULL) == x) return;
    }
}

/* config.json is written as a temporary file beside it and renamed into place once synced, as
 * the tensors are (runtime/hf/safetensors_write.c): a crash never leaves a half-written config. */
static tr_status config_open(const char *dir, char *tmp, size_t cap, FILE **f, tr_diags *d) {
    snprintf(tmp, cap, "%s/config.json.tmp-%ld", dir, (long)getpid());
    *f = fopen(tmp, "wx");
    return *f ? TR_OK : export_error(d, dir, "cannot create config.json");
}

static tr_status config_commit(FILE *f, const char *tmp, const char *dir, tr_diags *d) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) == 0) return TR_OK;
    unlink(tmp);
    return export_error(d, dir, "cannot write config.json");
}

/* The MoE keys of Mixtral / Qwen3-MoE (apply_moe, config.c, reads them back). */
static void write_moe_keys(FILE *f, const tr_model_spec *s) {
    const tr_moe_spec *e = &s->moe;
    char aux[32];
    float_text(e->aux_coeff, aux, sizeof aux);
    fprintf(f,
            "  \"num_local_experts\": %d,\n  \"num_experts_per_tok\": %d,\n"
            "  \"router_aux_loss_coef\": %s,\n  \"output_router_logits\": false,\n",
            e->experts, e->topk, aux);
    if (!s->qk_norm) {
        fputs("  \"router_jitter_noise\": 0.0,\n  \"sliding_window\": null,\n", f);
        return;
    }
    /* Qwen3-MoE: num_experts is its name before transformers 5; the dense layers listed */
    fprintf(f,
            "  \"num_experts\": %d,\n  \"moe_intermediate_size\": %d,\n"
            "  \"norm_topk_prob\": %s,\n  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [",
            e->experts, e->ffn, e->pre_softmax ? "false" : "true");
    for (int i = 0, first = 1; i < s->num_layers; i++)
        if (!tr_moe_is_layer(e, i)) {
            fprintf(f, first ? "%d" : ", %d", i);
            first = 0;
        }
    fputs("],\n", f);
}

/* config.json for a Llama / Qwen3 / Mixtral / Qwen3-MoE spec, in transformers' key names. */
static tr_status write_llama_config(const char *dir, const tr_model_spec *s, int64_t vocab,
                                    const char *dtype, tr_diags *d) {
    bool moe = s->moe.experts > 0;
    char tmp[4096];
    FILE *f = NULL;
    TR_TRY(config_open(dir, tmp, sizeof tmp, &f, d));
    char eps[32];
    float_text(s->eps, eps, sizeof eps);
    fprintf(f,
            "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
            "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
            "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
            "  \"vocab_size\": %lld,\n  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %s,\n"
            "  \"rope_theta\": %.17g,\n",
            moe          ? (s->qk_norm ? "Qwen3MoeForCausalLM" : "MixtralForCausalLM")
            : s->qk_norm ? "Qwen3ForCausalLM"
                         : "LlamaForCausalLM",
            moe          ? (s->qk_norm ? "qwen3_moe" : "mixtral")
            : s->qk_norm ? "qwen3"
                         : "llama",
            s->hidden, s->ffn, s->num_layers, s->heads, s->groups, s->head_dim, (long long)vocab,
            s->seq, eps, s->rope_p.base);
    if (s->rope_p.llama3)
        fprintf(f,
                "  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": %.17g, "
                "\"low_freq_factor\": %.17g, \"high_freq_factor\": %.17g, "
                "\"original_max_position_embeddings\": %.17g},\n",
                s->rope_p.factor, s->rope_p.low_freq_factor, s->rope_p.high_freq_factor,
                s->rope_p.original_max_position);
    else
        fputs("  \"rope_scaling\": null,\n", f);
    if (moe) write_moe_keys(f, s);
    fprintf(f,
            "  \"tie_word_embeddings\": %s,\n  \"hidden_act\": \"silu\",\n  \"attention_bias\": "
            "false,\n  %s,\n  \"torch_dtype\": \"%s\"\n}\n",
            s->tied ? "true" : "false",
            s->qk_norm ? "\"use_sliding_window\": false" : "\"mlp_bias\": false", dtype);
    return config_commit(f, tmp, dir, d);
}

/* config.json of a DeepseekV3ForCausalLM: the keys apply_deepseek and apply_deepseek_moe
 * (config.c) read. A dense model has first_k_dense_replace = the layers, so the one routed
 * expert transformers' config requires is never built. */
static tr_status write_deepseek_config(const char *dir, const tr_model_spec *s, int64_t vocab,
                                       const char *dtype, tr_diags *d) {
    char tmp[4096], q[32], eps[32], scale[32];
    FILE *f = NULL;
    TR_TRY(config_open(dir, tmp, sizeof tmp, &f, d));
    const tr_mla_spec *a = &s->mla;
    const tr_moe_spec *e = &s->moe;
    float_text(s->eps, eps, sizeof eps);
    if (a->q_lora_rank > 0)
        snprintf(q, sizeof q, "%d", a->q_lora_rank);
    else
        snprintf(q, sizeof q, "null");
    int first = 0;
    while (first < s->num_layers && (e->experts <= 0 || !tr_moe_is_layer(e, first))) first++;
    float_text(e->experts > 0 ? e->topk_scale : 1.0f, scale, sizeof scale);
    fprintf(f,
            "{\n  \"architectures\": [\"DeepseekV3ForCausalLM\"],\n  \"model_type\": "
            "\"deepseek_v3\",\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
            "  \"num_hidden_layers\": %d,\n  \"first_k_dense_replace\": %d,\n"
            "  \"num_attention_heads\": %d,\n"
            "  \"num_key_value_heads\": %d,\n  \"q_lora_rank\": %s,\n  \"kv_lora_rank\": %d,\n"
            "  \"qk_nope_head_dim\": %d,\n  \"qk_rope_head_dim\": %d,\n  \"v_head_dim\": %d,\n"
            "  \"head_dim\": %d,\n  \"vocab_size\": %lld,\n  \"max_position_embeddings\": %d,\n"
            "  \"rms_norm_eps\": %s,\n  \"rope_interleave\": true,\n",
            s->hidden, s->ffn, s->num_layers, first, s->heads, s->heads, q, a->kv_lora_rank,
            a->qk_dim, a->rope_dim, a->v_dim, a->rope_dim, (long long)vocab, s->seq, eps);
    if (e->experts > 0)
        fprintf(f,
                "  \"n_routed_experts\": %d,\n  \"num_experts_per_tok\": %d,\n"
                "  \"moe_intermediate_size\": %d,\n  \"n_shared_experts\": %d,\n"
                "  \"n_group\": %d,\n  \"topk_group\": %d,\n  \"routed_scaling_factor\": %s,\n"
                "  \"norm_topk_prob\": true,\n  \"scoring_func\": \"sigmoid\",\n"
                "  \"topk_method\": \"noaux_tc\",\n",
                e->experts, e->topk, e->ffn, e->shared_ffn / e->ffn, e->groups > 1 ? e->groups : 1,
                e->groups > 1 ? e->group_topk : 1, scale);
    else
        fputs("  \"n_routed_experts\": 1,\n  \"num_experts_per_tok\": 1,\n  \"n_group\": 1,\n"
              "  \"topk_group\": 1,\n",
              f);
    fprintf(f, "  \"num_nextn_predict_layers\": %d,\n", s->mtp_layers);
    if (a->yarn)
        fprintf(f,
                "  \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": %.17g, "
                "\"factor\": %.17g, \"mscale\": %.17g, \"mscale_all_dim\": %.17g, "
                "\"original_max_position_embeddings\": %.17g, \"beta_fast\": %.17g, "
                "\"beta_slow\": %.17g},\n",
                a->rope_base, a->factor, a->mscale, a->mscale_all_dim, a->original_max_position,
                a->beta_fast, a->beta_slow);
    else
        fprintf(f, "  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": %.17g},\n",
                a->rope_base);
    fprintf(f,
            "  \"tie_word_embeddings\": %s,\n  \"hidden_act\": \"silu\",\n  \"attention_bias\": "
            "false,\n  \"torch_dtype\": \"%s\"\n}\n",
            s->tied ? "true" : "false", dtype);
    return config_commit(f, tmp, dir, d);
}

/* config.json of a GPT2LMHeadModel: the keys apply_gpt2 (config.c) reads. */
static tr_status write_gpt2_config(const char *dir, const tr_model_spec *s, int64_t vocab,
                                   const char *dtype, tr_diags *d) {
    char tmp[4096];
    FILE *f = NULL;
    TR_TRY(config_open(dir, tmp, sizeof tmp, &f, d));
    char eps[32], resid[32], attn[32];
    float_text(s->eps, eps, sizeof eps);
    float_text(s->hidden_dropout, resid, sizeof resid);
    float_text(s->attention_dropout, attn, sizeof attn);
    fprintf(f,
            "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
            "  \"n_embd\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": %d,\n"
            "  \"vocab_size\": %lld,\n  \"n_positions\": %d,\n  \"layer_norm_epsilon\": %s,\n"
            "  \"activation_function\": \"%s\",\n  \"resid_pdrop\": %s,\n"
            "  \"embd_pdrop\": %s,\n  \"attn_pdrop\": %s,\n  \"scale_attn_weights\": true,\n"
            "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"%s\"\n}\n",
            s->hidden, s->num_layers, s->heads, s->ffn, (long long)vocab, s->seq, eps,
            s->gelu_tanh ? "gelu_new" : "gelu", resid, resid, attn, s->tied ? "true" : "false",
            dtype);
    return config_commit(f, tmp, dir, d);
}

/* GPT-2's layers: LayerNorm, learned positions, biases everywhere, a GeLU MLP, one group per
 * head (c_attn has no grouped-query form). */
static bool is_gpt2(const tr_model_spec *s) {
    return s->layernorm && s->learned_pos && s->bias_linear && !s->swiglu && !s->rope &&
           !s->qk_norm && !s->zero_centered && s->groups == s->heads &&
           (int64_t)s->heads * s->head_dim == s->hidden;
}

static bool is_llama(const tr_model_spec *s) {
    return s->swiglu && s->rope && !s->layernorm && !s->bias_linear && !s->bias_qkv &&
           !s->learned_pos;
}

/* DeepSeek-V3: Llama's layers with MLA (and its latent norms) for attention. */
static bool is_deepseek(const tr_model_spec *s) {
    return s->mla.on && s->mla.norms && s->swiglu && !s->layernorm && !s->bias_linear &&
           !s->bias_qkv && !s->learned_pos;
}

/* The MoE names of the architecture a spec exports as; NULL for a dense model. */
static const tr_hf_moe_names *moe_names(const tr_model_spec *s) {
    if (s->moe.experts <= 0) return NULL;
    return s->mla.on ? &tr_hf_moe_deepseek : s->qk_norm ? &tr_hf_moe_qwen3 : &tr_hf_moe_mixtral;
}

/* Why the MoE layers of spec s have no form in its architecture's config.json; NULL when they
 * do (the routing each architecture computes, runtime/hf/config.c's map read backwards). */
static const char *moe_refusal(const tr_model_spec *s) {
    const tr_moe_spec *e = &s->moe;
    if (s->mtp_layers && !s->mla.on) return "only DeepseekV3ForCausalLM holds MTP layers";
    if (e->experts <= 0) return NULL;
    if (e->shared_gate) return "a gated shared expert has no place in these architectures";
    if (e->jitter != 0.0f) return "the router's input jitter has no place in config.json";
    bool dense_first = true; /* DeepSeek: first_k_dense_replace dense layers, then MoE */
    int first = 0;
    while (first < s->num_layers && !tr_moe_is_layer(e, first)) first++;
    for (int i = first; i < s->num_layers; i++) dense_first &= tr_moe_is_layer(e, i);
    if (s->mla.on) {
        if (e->score != TR_MOE_SIGMOID) return "DeepseekV3ForCausalLM routes by sigmoid scores";
        if (!dense_first) return "DeepseekV3ForCausalLM has its dense layers first, then MoE";
        if (e->shared_ffn % e->ffn) return "the shared experts' width is not n x the experts'";
        if (e->groups > 1 && e->topk / e->group_topk != 2)
            return "transformers scores a routing group by its top 2 experts (topk / "
                   "group_topk must be 2)";
        return NULL;
    }
    if (e->score != TR_MOE_SOFTMAX || e->groups > 0 || e->expert_bias || e->topk_scale != 1.0f ||
        e->shared_ffn > 0)
        return "Mixtral and Qwen3-MoE route by a softmax over all experts, without groups, "
               "expert bias, scaling or shared experts";
    if (!s->qk_norm) {
        if (first != 0 || !dense_first) return "every layer of a Mixtral model is MoE";
        if (e->ffn != s->ffn) return "Mixtral's intermediate_size is the experts' width";
        if (e->pre_softmax) return "Mixtral renormalises its top-k probabilities";
    }
    return NULL;
}

typedef struct progress {
    tr_hf_progress_fn fn;
    void *ctx;
    int done, n;
    uint64_t bytes, total;
    /* The buffers of tensors written, kept for the next ones: freeing a large buffer unmaps it,
     * and a fresh one costs a page fault per 4 KiB, the export's largest cost once. Three at
     * most (a layer's q, k and v are pending at once), so the export holds a few tensors. */
    void *spare[3];
    size_t spare_cap[3];
} progress;

/* A buffer of `bytes` (at least one), a spare one when one is large enough; zeroed on request
 * (a tensor no parameter feeds), else left as it is (the feeds fill every byte). */
static void *take(progress *pr, size_t bytes, bool zero) {
    if (bytes < 1) bytes = 1;
    int best = -1;
    for (int i = 0; i < 3; i++)
        if (pr->spare[i] && pr->spare_cap[i] >= bytes &&
            (best < 0 || pr->spare_cap[i] < pr->spare_cap[best]))
            best = i;
    if (best < 0) return zero ? calloc(bytes, 1) : malloc(bytes);
    void *v = pr->spare[best];
    pr->spare[best] = NULL;
    if (zero) memset(v, 0, bytes);
    return v;
}

/* v (of cap bytes) kept as a spare in place of the smallest (an empty slot first), or freed. */
static void give(progress *pr, void *v, size_t cap) {
    int slot = 0;
    for (int i = 1; i < 3; i++)
        if (pr->spare[slot] && (!pr->spare[i] || pr->spare_cap[i] < pr->spare_cap[slot])) slot = i;
    if (pr->spare[slot] && pr->spare_cap[slot] >= cap) {
        free(v);
        return;
    }
    free(pr->spare[slot]);
    pr->spare[slot] = v;
    pr->spare_cap[slot] = cap;
}

/* Where export_plain takes each parameter's host values from. */
typedef struct param_src {
    tr_hf_param_fn get;
    void *ctx;
} param_src;

static tr_status export_plain(const tr_model *m, const char *dir, tr_st_dtype dtype, param_src src,
                              progress *pr, tr_diags *d);

/* An in-memory model's parameter i: its own values on the host, or (a device model) a copy in
 * a buffer of one parameter. */
typedef struct model_params {
    float *host;
} model_params;

static tr_status model_param(void *ctx, const tr_model *m, int i, const float **vals, tr_diags *d) {
    (void)d;
    model_params *mp = ctx;
    const tr_param_info *p = &m->info[i];
    const float *from = m->params + p->offset;
    *vals = from;
    if (tr_device_host_visible(m->dev)) return TR_OK;
    free(mp->host);
    mp->host = malloc((size_t)(p->numel ? p->numel : 1) * sizeof *mp->host);
    if (!mp->host) return TR_ERR_NOMEM;
    *vals = mp->host;
    return tr_device_to_host(m->dev, mp->host, from, (size_t)p->numel * sizeof *mp->host);
}

/* An in-memory model exported through model_param. */
static tr_status export_model(const tr_model *m, const char *dir, tr_st_dtype dtype, progress *pr,
                              tr_diags *d) {
    model_params mp = {0};
    tr_status st = export_plain(m, dir, dtype, (param_src){model_param, &mp}, pr, d);
    free(mp.host);
    return st;
}

/* The adapters merged into a model without them (the merged model computes the adapted one's
 * forward), which is then exported: writing the base weights alone would drop what the
 * fine-tune learned. */
static tr_status export_merged(const tr_model *m, const char *dir, tr_st_dtype dtype, progress *pr,
                               tr_diags *d) {
    if (!tr_device_host_visible(m->dev))
        return export_error(d, dir,
                            "merging LoRA adapters runs on a host model; load the checkpoint on "
                            "the CPU to export it");
    tr_model_spec bs = m->full;
    bs.lora_rank = 0;
    bs.lora_targets = 0;
    bs.lora_dora = 0;
    bs.lora_dropout = 0.0f;
    bs.moe.lora_rank = 0;
    tr_model base;
    TR_TRY(tr_model_create(&base, &bs, (tr_tp_shard){0, 1}, m->ops, 1));
    tr_status st = tr_lora_merge(m, &base);
    if (st != TR_OK) st = export_error(d, dir, "the adapters could not be merged into the weights");
    if (st == TR_OK) st = export_model(&base, dir, dtype, pr, d);
    tr_model_free(&base);
    return st;
}

tr_status tr_hf_export(const tr_model *m, const char *dir, tr_st_dtype dtype, tr_diags *d) {
    return tr_hf_export_progress(m, dir, dtype, NULL, NULL, d);
}

/* What every export refuses: a model that is not whole on one rank, of an architecture or a
 * routing config.json cannot express, or another dtype. */
static tr_status check_exportable(const tr_model *m, const char *dir, tr_st_dtype dtype,
                                  tr_diags *d) {
    const tr_model_spec *s = &m->full;
    if (m->tp.size != 1 || m->n_parts != 1 || m->parts[0].num_layers != s->num_layers ||
        (!is_llama(s) && !is_gpt2(s) && !is_deepseek(s)))
        return export_error(
            d, dir,
            "the model is not a whole model of an architecture Trestle exports, on one rank");
    const char *why = moe_refusal(s);
    if (why) return export_error(d, dir, why);
    if (dtype != TR_ST_F32 && dtype != TR_ST_BF16 && dtype != TR_ST_F16)
        return export_error(d, dir, "export writes F32, BF16 or F16");
    return TR_OK;
}

tr_status tr_hf_export_progress(const tr_model *m, const char *dir, tr_st_dtype dtype,
                                tr_hf_progress_fn fn, void *ctx, tr_diags *d) {
    TR_TRY(check_exportable(m, dir, dtype, d));
    progress pr = {.fn = fn, .ctx = ctx};
    return m->full.lora_rank ? export_merged(m, dir, dtype, &pr, d)
                             : export_model(m, dir, dtype, &pr, d);
}

tr_status tr_hf_export_stream(const tr_model *m, tr_hf_param_fn get, void *get_ctx, const char *dir,
                              tr_st_dtype dtype, tr_hf_progress_fn fn, void *ctx, tr_diags *d) {
    TR_TRY(check_exportable(m, dir, dtype, d));
    if (m->full.lora_rank)
        return export_error(d, dir,
                            "merging LoRA adapters needs the whole model: export it with "
                            "tr_hf_export");
    progress pr = {.fn = fn, .ctx = ctx};
    return export_plain(m, dir, dtype, (param_src){get, get_ctx}, &pr, d);
}

/* One output tensor's values, already in the file's dtype, while the parameters that feed it
 * are read (each run converted as it comes: no fp32 copy of the tensor); written out and its
 * buffer kept for the next once every element has come, so the export holds a few tensors, not
 * a second copy of the model. */
typedef struct pending {
    void *vals;
    int64_t filled, numel;
    int out; /* its index in the file (transformers' order) */
    bool written;
} pending;

static tr_status flush(pending *q, tr_st_dtype dtype, tr_st_stream *w, progress *pr, tr_diags *d) {
    if (q->written) return TR_OK;
    size_t bytes = (size_t)q->numel * tr_st_dtype_size(dtype);
    /* What no parameter fed (none in these maps) is written as zeros, as before; a tensor fed in
     * part would hold stale bytes: the map is broken, say so rather than write them. */
    if (q->vals && q->filled < q->numel)
        return export_error(d, "model.safetensors", "a tensor was fed only in part");
    if (!q->vals && !(q->vals = take(pr, bytes, true))) return TR_ERR_NOMEM;
    tr_status st = tr_st_stream_put(w, q->out, q->vals, d);
    give(pr, q->vals, bytes ? bytes : 1);
    q->vals = NULL;
    q->written = true;
    pr->done++;
    pr->bytes += bytes;
    if (pr->fn && st == TR_OK) pr->fn(pr->ctx, pr->done, pr->n, pr->bytes, pr->total);
    return st;
}

/* n fp32 values to the file's dtype at element idx of buffer v (rounded to nearest even). */
static void put_values(void *v, int64_t idx, const float *x, int64_t n, tr_st_dtype dtype) {
    if (dtype == TR_ST_F32) {
        memcpy((float *)v + idx, x, (size_t)n * sizeof *x);
    } else if (dtype == TR_ST_BF16) {
        tr_hf_bf16_from_f32((uint16_t *)v + idx, x, n);
    } else {
        uint16_t *h = (uint16_t *)v + idx;
        for (int64_t j = 0; j < n; j++) h[j] = tr_f16_bits(x[j]);
    }
}

/* Parameter p's elements (host values `from`) into the output tensors src names, each flushed
 * once complete. */
static tr_status feed(const tr_model *m, const tr_param_info *p, const float *from,
                      const tr_hf_arch *arch, const tr_hf_shape *k, const tr_hf_source *src,
                      pending *q, const tr_st_tensor *sorted, tr_st_dtype dtype, tr_st_stream *out,
                      progress *pr, tr_diags *d) {
    for (int64_t x = 0, n; x < p->numel; x += n) {
        int64_t at = tr_model_logical_index(m, p, x), idx = 0;
        n = tr_hf_row_run(arch, src, tr_model_logical_run(p, x));
        int which = arch->locate(src, k, at / p->full_cols, at % p->full_cols, &idx);
        if (which < 0) continue;
        pending *t = &q[src->t[which] - sorted];
        if (t->written) continue;
        if (!t->vals && !(t->vals = take(pr, (size_t)t->numel * tr_st_dtype_size(dtype), false)))
            return TR_ERR_NOMEM;
        put_values(t->vals, idx, from + x, n, dtype);
        t->filled += n;
    }
    tr_status st = TR_OK;
    for (int j = 0; st == TR_OK && j < 3; j++)
        if (src->t[j] && q[src->t[j] - sorted].filled >= q[src->t[j] - sorted].numel)
            st = flush(&q[src->t[j] - sorted], dtype, out, pr, d);
    return st;
}

static tr_status export_plain(const tr_model *m, const char *dir, tr_st_dtype dtype, param_src ps,
                              progress *pr, tr_diags *d) {
    const tr_model_spec *s = &m->full;
    bool gpt2 = is_gpt2(s);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return export_error(d, dir, "cannot create the directory");
    int64_t vocab = s->vocab_real ? s->vocab_real : s->vocab;
    int max = 6 + (s->num_layers + s->mtp_layers) * (24 + 3 * s->moe.experts);
    out_tensor *o = calloc((size_t)max, sizeof *o);
    tr_st_entry *e = calloc((size_t)max, sizeof *e);
    int64_t(*shape)[2] = calloc((size_t)max, sizeof *shape);
    if (!o || !e || !shape) {
        free(o), free(e), free(shape);
        return TR_ERR_NOMEM;
    }
    int n = gpt2 ? list_gpt2(s, vocab, o) : list_tensors(s, vocab, moe_names(s), o);
    /* The output tensors as a checkpoint of fp32 views (sorted for lookup) that the import's own
     * map is run against: each model element goes where the import would read it from. */
    tr_st_tensor *sorted = calloc((size_t)n, sizeof *sorted);
    pending *q = calloc((size_t)n, sizeof *q);
    tr_status st = sorted && q ? TR_OK : TR_ERR_NOMEM;
    for (int i = 0; st == TR_OK && i < n; i++) {
        int64_t numel = o[i].rows * (o[i].cols ? o[i].cols : 1);
        sorted[i] = (tr_st_tensor){.name = o[i].name,
                                   .dtype = TR_ST_F32,
                                   .ndim = o[i].cols ? 2 : 1,
                                   .shape = {o[i].rows, o[i].cols},
                                   .end = (uint64_t)numel * 4};
        shape[i][0] = o[i].rows;
        shape[i][1] = o[i].cols;
        e[i] = (tr_st_entry){o[i].name, dtype, o[i].cols ? 2 : 1, shape[i], NULL};
        pr->total += (uint64_t)numel * tr_st_dtype_size(dtype);
    }
    pr->n = n;
    if (st == TR_OK) {
        qsort(sorted, (size_t)n, sizeof *sorted, by_name);
        for (int j = 0; j < n; j++)
            q[j] =
                (pending){.numel = tr_st_numel(&sorted[j]),
                          .out = (int)((const out_tensor *)(uintptr_t)(sorted[j].name -
                                                                       offsetof(out_tensor, name)) -
                                       o)};
    }
    tr_st_file file = {.t = sorted, .n = n};
    const tr_hf_moe_names *moe = moe_names(s);
    const tr_hf_arch *arch = gpt2                        ? &tr_hf_arch_gpt2
                             : s->mla.on                 ? &tr_hf_arch_deepseek_v3
                             : moe == &tr_hf_moe_qwen3   ? &tr_hf_arch_qwen3_moe
                             : moe == &tr_hf_moe_mixtral ? &tr_hf_arch_mixtral
                             : s->qk_norm                ? &tr_hf_arch_qwen3
                                                         : &tr_hf_arch_llama;
    tr_hf_weights w = {.files = &file, .n = 1, .architecture = (char *)(uintptr_t)arch->name};
    tr_hf_shape k = tr_hf_shape_of(s);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *keys[] = {"format"}, *values[] = {"pt"};
    tr_st_stream out = {.fd = -1};
    bool open_ = false;
    if (st == TR_OK)
        open_ = (st = tr_st_stream_open(&out, path, e, n, keys, values, 1, d)) == TR_OK;
    for (int i = 0; st == TR_OK && i < m->n_info; i++) {
        const tr_param_info *p = &m->info[i];
        tr_hf_source src = {0};
        st = arch->source(p->name, &k, &w, &src, d);
        const float *from = NULL;
        if (st == TR_OK) st = ps.get(ps.ctx, m, i, &from, d);
        if (st == TR_OK) st = feed(m, p, from, arch, &k, &src, q, sorted, dtype, &out, pr, d);
        /* DeepSeek's MTP layers hold copies of the embedding and the output layer, which
         * Megatron shares with the main model: each depth's copy is fed the same elements. */
        const char *copy = strcmp(p->name, "embedding.word_embeddings.weight") == 0 ? "embed_tokens"
                           : strcmp(p->name, "output_layer.weight") == 0 ? "shared_head.head"
                                                                         : NULL;
        for (int c = 0; copy && st == TR_OK && c < (s->tied ? 2 : 1); c++) {
            if (c) copy = "shared_head.head"; /* tied: the embedding is the output layer too */
            for (int dep = 0; st == TR_OK && dep < s->mtp_layers; dep++) {
                char name[128];
                snprintf(name, sizeof name, "model.layers.%d.%s.weight", s->num_layers + dep, copy);
                tr_st_tensor key = {.name = name};
                const tr_st_tensor *t = bsearch(&key, sorted, (size_t)n, sizeof *sorted, by_name);
                tr_hf_source mirror = src;
                mirror.t[0] = t;
                if (t) st = feed(m, p, from, arch, &k, &mirror, q, sorted, dtype, &out, pr, d);
            }
        }
    }
    /* What no parameter fed (none in these maps) is written as zeros, as before. */
    for (int j = 0; st == TR_OK && j < n; j++) st = flush(&q[j], dtype, &out, pr, d);
    if (open_) {
        if (st == TR_OK)
            st = tr_st_stream_commit(&out, d);
        else
            tr_st_stream_abort(&out);
    }
    const char *dt = dtype == TR_ST_F32 ? "float32" : dtype == TR_ST_BF16 ? "bfloat16" : "float16";
    if (st == TR_OK)
        st = gpt2        ? write_gpt2_config(dir, s, vocab, dt, d)
             : s->mla.on ? write_deepseek_config(dir, s, vocab, dt, d)
                         : write_llama_config(dir, s, vocab, dt, d);
    for (int j = 0; q && j < n; j++) free(q[j].vals);
    free(sorted), free(q);
    for (int j = 0; j < 3; j++) free(pr->spare[j]);
    memset(pr->spare, 0, sizeof pr->spare);
    free(o), free(e), free(shape);
    return st;
}
