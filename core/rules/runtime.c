/* What the training runtime can run, as rules of the config alone (docs/runtime.md, "Not
 * implemented yet"). A dry run reports these exactly as the launch does: tr_train_run calls
 * tr_runtime_check (core/validate.h), which runs these same functions, so the two cannot
 * disagree on a configuration. Each refusal names the key to change; none depends on files or
 * on the processes of a real launch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/pipeline_layout.h"
#include "core/rules/rule.h"

#define NOT_YET "the CPU training runtime does not implement %s yet"

static bool half_dtype_ok(const tr_model_config *m) {
    int half = m->bf16 ? TR_DTYPE_BF16 : m->fp16 ? TR_DTYPE_FP16 : TR_DTYPE_FP32;
    return m->params_dtype == TR_DTYPE_FP32 || m->params_dtype == half;
}

/* Context parallelism runs the p2p ring on pretraining sequences; what it does not run yet is
 * named here, each with its own key. */
TR_RULE_FN(tr_check_runtime_context_parallel) {
    const tr_model_config *m = &c->model;
    if (m->context_parallel_size <= 1) return;
    const tr_str_list *t = &m->cp_comm_type;
    for (int i = 0; !t->null && i < t->n; i++) {
        if (strcmp(t->v[i], "p2p") != 0 && strcmp(t->v[i], "allgather") != 0 &&
            strcmp(t->v[i], "a2a") != 0) {
            TR_FAIL("model.cp_comm_type", "set model.cp_comm_type=[p2p], [allgather] or [a2a]",
                    NOT_YET " (cp_comm_type '%s')", "that context-parallel exchange", t->v[i]);
            break;
        }
        if (strcmp(t->v[i], t->v[0]) != 0) {
            TR_FAIL("model.cp_comm_type", "give one exchange for every layer",
                    NOT_YET " (cp_comm_type '%s' and '%s')",
                    "different context-parallel exchanges per layer", t->v[0], t->v[i]);
            break;
        }
    }
    /* a2a gives each CP rank CP-th of the heads and of the query groups this TP rank holds. */
    if (t->null || t->n == 0 || strcmp(t->v[0], "a2a") != 0) return;
    int64_t tp = m->tensor_model_parallel_size > 0 ? m->tensor_model_parallel_size : 1;
    int64_t heads = m->num_attention_heads / tp, cp = m->context_parallel_size;
    int64_t groups =
        m->num_query_groups != TR_NULL_INT ? m->num_query_groups : m->num_attention_heads;
    groups = groups > tp ? groups / tp : 1;
    if (heads % cp || groups % cp)
        TR_FAIL("model.cp_comm_type,model.context_parallel_size,model.num_query_groups",
                "use model.cp_comm_type=[p2p], or a CP size dividing the heads and query groups "
                "of a TP rank",
                "cp_comm_type a2a splits the %lld heads and %lld query groups of a TP rank over "
                "context_parallel_size %lld, which does not divide them",
                tr_ll(heads), tr_ll(groups), tr_ll(cp));
}

/* Attention dropout and, on pretraining sequences, hidden dropout draw the single-rank run's
 * masks under CP (keyed by whole-sequence positions); the adapters' dropout and hidden dropout
 * on packed fine-tuning documents do not know those positions yet. */
TR_RULE_FN(tr_check_runtime_cp_dropout) {
    const tr_model_config *m = &c->model;
    if (m->context_parallel_size <= 1) return;
    const struct {
        const char *key;
        double p;
        const char *what;
    } rates[] = {{"model.hidden_dropout", c->dataset.type == TR_DS_SFT ? m->hidden_dropout : 0.0,
                  "hidden dropout on fine-tuning documents with context parallelism"},
                 {"peft.dropout", c->peft.scheme >= 0 ? c->peft.dropout : 0.0,
                  "adapter dropout with context parallelism"}};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (rates[i].p > 0.0)
            TR_FAIL(rates[i].key, "set it to 0 with context parallelism",
                    NOT_YET " (%s %g with context_parallel_size %lld)", rates[i].what, rates[i].key,
                    rates[i].p, (long long)m->context_parallel_size);
}

/* Fine-tuning under CP splits every document into 2 x CP pieces, so each must pad to that
 * multiple; finalize derives it unless the user set dataset.pad_seq_to_mult (packed datasets
 * have the same check among the data rules, dataset.pad_seq_to_mult). */
TR_RULE_FN(tr_check_runtime_cp_packed) {
    const tr_dataset_config *ds = &c->dataset;
    int64_t cp = c->model.context_parallel_size;
    if (cp <= 1 || ds->type != TR_DS_SFT || ds->enable_offline_packing) return;
    if (ds->pad_seq_to_mult % (2 * cp) == 0) return;
    char hint[96];
    TR_FAIL("dataset.pad_seq_to_mult,model.context_parallel_size",
            TR_FMT(hint, "set dataset.pad_seq_to_mult=%lld (or leave it unset)", tr_ll(2 * cp)),
            "dataset.pad_seq_to_mult (%lld) must be a multiple of 2 x context_parallel_size "
            "(%lld): each fine-tuning document is split into that many pieces",
            tr_ll(ds->pad_seq_to_mult), tr_ll(2 * cp));
}

/* The MoE layer runs on one expert rank (runtime/moe/): what it does not build yet is refused
 * by name, one rule each. */
static bool moe(const tr_config *c) {
    return c->model.num_moe_experts != TR_NULL_INT;
}

TR_RULE_FN(tr_check_runtime_moe_layers) {
    const tr_model_config *m = &c->model;
    if (!moe(c) || (m->num_moe_experts <= 1024 && m->num_layers <= 256)) return;
    TR_FAIL("model.num_moe_experts,model.num_layers", "use at most 1024 experts and 256 layers",
            NOT_YET, "MoE models with more than 1024 experts or 256 layers");
}

/* MoE layers under TP run with sequence parallelism (Megatron's rule, moe.tp_needs_sp): each TP
 * rank routes its sequence chunk, EP may fold onto TP, and expert TP splits every expert's ffn
 * over the expert-TP group (runtime/moe/etp.c), which must divide it; what would draw or drop
 * differently on a part of a sequence (TP or CP) than on the whole is refused. */
TR_RULE_FN(tr_check_runtime_moe_tp) {
    const tr_model_config *m = &c->model;
    if (!moe(c)) return;
    int64_t tp = m->tensor_model_parallel_size;
    int64_t etp = tr_or(m->expert_tensor_parallel_size, tp);
    int64_t ffn = tr_or(m->moe_ffn_hidden_size, tr_or(m->ffn_hidden_size, 0));
    bool split = tp > 1 || m->context_parallel_size > 1; /* each rank routes part of a sequence */
    char hint[96];
    if (etp > 1 && ffn % etp != 0)
        TR_FAIL("model.expert_tensor_parallel_size,model.moe_ffn_hidden_size",
                TR_FMT(hint, "choose an expert_tensor_parallel_size dividing %lld", tr_ll(ffn)),
                "expert TP %lld does not divide the experts' ffn width %lld", tr_ll(etp),
                tr_ll(ffn));
    else if (split && !tr_is_null_float(m->moe_input_jitter_eps))
        TR_FAIL("model.moe_input_jitter_eps,model.tensor_model_parallel_size,"
                "model.context_parallel_size",
                "set model.moe_input_jitter_eps=null with tensor or context parallelism", NOT_YET,
                "the router's input jitter on a part of each sequence (TP or CP)");
    else if (split && !tr_is_null_float(m->moe_expert_capacity_factor))
        TR_FAIL("model.moe_expert_capacity_factor,model.tensor_model_parallel_size,"
                "model.context_parallel_size",
                "set model.moe_expert_capacity_factor=null (dropless) with tensor or context "
                "parallelism",
                NOT_YET, "token dropping on a part of each sequence (TP or CP)");
}

/* The allgather dispatcher (runtime/moe/dispatch_ag.c) runs whole experts (expert TP 1) and
 * moves each rank's kept rows, never padded ones: expert TP and padding to the capacity under EP
 * run with the alltoall dispatcher. At EP 1 there is no dispatch: the expert-TP gather of the
 * routed rows and the reduce-scatter of their outputs (runtime/moe/etp.c) are what Megatron's
 * allgather dispatcher does over its TP x EP group. */
TR_RULE_FN(tr_check_runtime_moe_allgather) {
    const tr_model_config *m = &c->model;
    if (!moe(c) || m->moe_token_dispatcher_type != TR_DISPATCH_ALLGATHER) return;
    int64_t etp = tr_or(m->expert_tensor_parallel_size, m->tensor_model_parallel_size);
    char what[128];
    if (etp > 1 && m->expert_model_parallel_size > 1)
        TR_FAIL("model.moe_token_dispatcher_type,model.expert_tensor_parallel_size",
                "set model.moe_token_dispatcher_type=alltoall, or "
                "model.expert_tensor_parallel_size=1",
                NOT_YET,
                TR_FMT(what,
                       "the allgather MoE dispatcher with expert tensor parallelism (ETP %lld) "
                       "under EP",
                       tr_ll(etp)));
    else if (m->expert_model_parallel_size > 1 &&
             !tr_is_null_float(m->moe_expert_capacity_factor) &&
             m->moe_pad_expert_input_to_capacity)
        TR_FAIL("model.moe_token_dispatcher_type,model.moe_pad_expert_input_to_capacity",
                "set model.moe_token_dispatcher_type=alltoall, or "
                "model.moe_pad_expert_input_to_capacity=false",
                NOT_YET,
                TR_FMT(what,
                       "the allgather MoE dispatcher padding expert inputs to the capacity "
                       "(EP %lld)",
                       tr_ll(m->expert_model_parallel_size)));
}

/* LoRA on MoE layers adapts each expert's and the shared expert's fc1 / fc2 (runtime/moe/lora.c)
 * on one expert rank: DoRA's magnitudes there, the adapters under expert parallelism (whose
 * received rows the dropout keys cannot name) and on expert-TP shards are not built. */
TR_RULE_FN(tr_check_runtime_moe_peft) {
    if (!moe(c) || c->peft.scheme < 0) return;
    if (c->peft.scheme == TR_PEFT_DORA)
        TR_FAIL("peft.scheme,model.num_moe_experts", "set peft.scheme=lora", NOT_YET,
                "DoRA on MoE models (magnitudes on the experts)");
    if (c->model.expert_model_parallel_size > 1)
        TR_FAIL("peft.scheme,model.expert_model_parallel_size",
                "set model.expert_model_parallel_size=1 (use data or pipeline parallelism)",
                NOT_YET, "LoRA adapters with expert parallelism");
    else if (tr_or(c->model.expert_tensor_parallel_size, c->model.tensor_model_parallel_size) > 1)
        TR_FAIL("peft.scheme,model.expert_tensor_parallel_size",
                "set model.expert_tensor_parallel_size=1 (whole experts; TP still splits the "
                "dense layers)",
                NOT_YET, "LoRA adapters on expert-TP shards");
}

TR_RULE_FN(tr_check_runtime_moe_bias) {
    if (!moe(c) || !c->model.add_bias_linear) return;
    TR_FAIL("model.add_bias_linear,model.num_moe_experts", "set model.add_bias_linear=false",
            NOT_YET, "linear-layer biases in MoE models");
}

TR_RULE_FN(tr_check_runtime_moe_router) {
    const tr_model_config *m = &c->model;
    if (!moe(c)) return;
    if (m->moe_router_load_balancing_type == TR_MOELB_SINKHORN)
        TR_FAIL("model.moe_router_load_balancing_type",
                "use aux_loss, seq_aux_loss, global_aux_loss or none", NOT_YET,
                "sinkhorn load balancing");
    if (m->moe_router_dtype == TR_RDTYPE_FP64)
        TR_FAIL("model.moe_router_dtype", "set model.moe_router_dtype=fp32", NOT_YET,
                "an fp64 router");
}

/* global_aux_loss reduces its token counts over TP x DP x CP inside the forward. */
TR_RULE_FN(tr_check_runtime_moe_global_aux_dp) {
    if (!moe(c) || c->model.moe_router_load_balancing_type != TR_MOELB_GLOBAL_AUX_LOSS ||
        c->derived.data_parallel_size <= 1)
        return;
    char what[128];
    TR_FAIL("model.moe_router_load_balancing_type",
            "use aux_loss or seq_aux_loss with data parallelism", NOT_YET,
            TR_FMT(what, "global_aux_loss over %lld data-parallel ranks",
                   (long long)c->derived.data_parallel_size));
}

/* p = 1 drops everything (the 1/(1-p) scale is undefined); the dropout ops refuse it, so a
 * configuration reaching them with it would stop at launch. */
TR_RULE_FN(tr_check_runtime_dropout_below_one) {
    const struct {
        const char *key;
        double p;
    } rates[] = {{"model.hidden_dropout", c->model.hidden_dropout},
                 {"model.attention_dropout", c->model.attention_dropout},
                 {"peft.dropout", c->peft.scheme >= 0 ? c->peft.dropout : 0.0}};
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (rates[i].p >= 1.0)
            TR_FAIL(rates[i].key, "use a probability below 1 (e.g. 0.1), or 0 for none",
                    "%s is %g: a dropout probability of 1 keeps nothing, so nothing would train",
                    rates[i].key, rates[i].p);
}

TR_RULE_FN(tr_check_runtime_rotary_interleaved) {
    if (!c->model.rotary_interleaved) return;
    TR_FAIL("model.rotary_interleaved", "set model.rotary_interleaved=false", NOT_YET,
            "interleaved rotary embedding");
}

TR_RULE_FN(tr_check_runtime_yarn) {
    if (c->model.position_embedding_type != TR_POSEMB_YARN) return;
    TR_FAIL("model.position_embedding_type", "use position_embedding_type=rope", NOT_YET,
            "YaRN rotary scaling");
}

TR_RULE_FN(tr_check_runtime_sliding_window) {
    if (c->model.window_size.null) return;
    TR_FAIL("model.window_size", "set model.window_size=null", NOT_YET, "sliding-window attention");
}

/* What multi-latent attention (runtime/mla/) does not run with yet; each combination names
 * the key to change. */
#define MLA_NOT_YET "multi-latent attention does not run with %s yet"

TR_RULE_FN(tr_check_runtime_mla_context_parallel) {
    if (!c->model.multi_latent_attention || c->model.context_parallel_size <= 1) return;
    TR_FAIL("model.context_parallel_size,model.multi_latent_attention",
            "set model.context_parallel_size=1", MLA_NOT_YET, "context parallelism");
}

TR_RULE_FN(tr_check_runtime_mla_peft) {
    if (!c->model.multi_latent_attention || c->peft.scheme < 0) return;
    TR_FAIL("peft.scheme,model.multi_latent_attention", "set peft.scheme=null", MLA_NOT_YET,
            "LoRA or DoRA adapters");
}

TR_RULE_FN(tr_check_runtime_mla_layernorm) {
    if (!c->model.multi_latent_attention || c->model.normalization != TR_NORM_LAYERNORM) return;
    TR_FAIL("model.normalization,model.multi_latent_attention", "set model.normalization=RMSNorm",
            MLA_NOT_YET, "LayerNorm (its latent norms are RMSNorm)");
}

TR_RULE_FN(tr_check_runtime_mla_rope_dim) {
    if (!c->model.multi_latent_attention || c->model.qk_pos_emb_head_dim % 2 == 0) return;
    TR_FAIL("model.qk_pos_emb_head_dim", "use an even model.qk_pos_emb_head_dim",
            "the rotary part of an MLA head rotates pairs: qk_pos_emb_head_dim must be even");
}

/* Megatron-Bridge override files carry the FSDP switches; Trestle shards the optimizer state
 * (ZeRO-1) but never the parameters or gradients. */
TR_RULE_FN(tr_check_runtime_fsdp) {
    const char *key = c->dist.use_megatron_fsdp  ? "dist.use_megatron_fsdp"
                      : c->dist.use_torch_fsdp2  ? "dist.use_torch_fsdp2"
                      : c->ddp.use_megatron_fsdp ? "ddp.use_megatron_fsdp"
                                                 : NULL;
    if (!key) return;
    char fix[160];
    TR_FAIL(key,
            TR_FMT(fix,
                   "set %s=false and ddp.use_distributed_optimizer=true to shard the "
                   "optimizer state instead",
                   key),
            "FSDP is not supported (%s=true): Trestle shards only the optimizer state, with the "
            "distributed optimizer",
            key);
}

/* What multi-token prediction (runtime/mtp/, the model's loss stage) does not run with yet. */
#define MTP_NOT_YET "multi-token prediction does not run with %s yet"

static bool mtp_on(const tr_config *c) {
    return c->model.mtp_num_layers != TR_NULL_INT && c->model.mtp_num_layers > 0;
}

TR_RULE_FN(tr_check_runtime_mtp_context_parallel) {
    if (!mtp_on(c) || c->model.context_parallel_size <= 1) return;
    TR_FAIL("model.context_parallel_size,model.mtp_num_layers", "set model.context_parallel_size=1",
            MTP_NOT_YET, "context parallelism");
}

TR_RULE_FN(tr_check_runtime_mtp_peft) {
    if (!mtp_on(c) || c->peft.scheme < 0) return;
    TR_FAIL("peft.scheme,model.mtp_num_layers", "set peft.scheme=null", MTP_NOT_YET,
            "LoRA or DoRA adapters");
}

/* The output layer serves the main loss and every depth: its weight gradient is not deferred. */
TR_RULE_FN(tr_check_runtime_mtp_defer_wgrad) {
    if (!mtp_on(c) || !c->model.defer_embedding_wgrad_compute) return;
    TR_FAIL("model.defer_embedding_wgrad_compute,model.mtp_num_layers",
            "set model.defer_embedding_wgrad_compute=false", MTP_NOT_YET,
            "the deferred output-layer weight gradient");
}

TR_RULE_FN(tr_check_runtime_mtp_positions) {
    if (!mtp_on(c) || c->model.position_embedding_type != TR_POSEMB_LEARNED_ABSOLUTE) return;
    TR_FAIL("model.position_embedding_type,model.mtp_num_layers",
            "use rotary positions (model.position_embedding_type=rope)", MTP_NOT_YET,
            "learned absolute positions");
}

/* Megatron shifts within each packed document; the runtime shifts whole rows. */
TR_RULE_FN(tr_check_runtime_mtp_packing) {
    if (!mtp_on(c) ||
        (!c->dataset.enable_offline_packing && c->dataset.packed_sequence_size == TR_NULL_INT))
        return;
    TR_FAIL("dataset.enable_offline_packing,dataset.packed_sequence_size,model.mtp_num_layers",
            "train on unpacked sequences (dataset.enable_offline_packing=false, "
            "dataset.packed_sequence_size=null)",
            MTP_NOT_YET, "packed sequences");
}

/* The depths run on the loss stage (Megatron's rule without a custom layout, and the only
 * placement its custom layouts accept too): a layout's 'm' must sit in its last stage. */
TR_RULE_FN(tr_check_runtime_mtp_layout) {
    const char *layout = c->model.pipeline_model_parallel_layout;
    if (!mtp_on(c) || !layout) return;
    char *flat;
    size_t n;
    const char *err;
    if (tr_pipeline_layout_expand(layout, &flat, &n, &err) != TR_OK) return; /* its own rule */
    size_t last_bar = 0, first_m = n;
    for (size_t i = 0; i < n; i++) {
        if (flat[i] == '|') last_bar = i + 1;
        if (flat[i] == 'm' && first_m == n) first_m = i;
    }
    free(flat);
    if (first_m < last_bar)
        TR_FAIL("model.pipeline_model_parallel_layout,model.mtp_num_layers",
                "put every 'm' in the last stage, with the loss", MTP_NOT_YET,
                "depths outside the loss stage");
}

/* Mixed precision keeps fp32 main parameters and rounds the GEMM operands: half-precision
 * parameters are the working copy of an fp32 master, so params_dtype may name the training dtype
 * (Megatron-Bridge's presets do) or fp32. */
TR_RULE_FN(tr_check_runtime_params_dtype) {
    const tr_model_config *m = &c->model;
    if (half_dtype_ok(m)) return;
    if (!m->bf16 && !m->fp16)
        TR_FAIL("model.params_dtype",
                "train in mixed precision (mixed_precision.preset=bf16_mixed or fp16_mixed) or "
                "set model.params_dtype=fp32",
                NOT_YET, "half-precision parameters without fp32 main parameters");
    else
        TR_FAIL("model.params_dtype", "set model.params_dtype to fp32 or to the dtype trained in",
                NOT_YET, "parameters in a dtype other than the mixed-precision dtype");
}

TR_RULE_FN(tr_check_runtime_fp16_cross_entropy) {
    if (!c->model.fp16_lm_cross_entropy) return;
    TR_FAIL("model.fp16_lm_cross_entropy", "set model.fp16_lm_cross_entropy=false", NOT_YET,
            "a half-precision cross entropy (it is computed in fp32)");
}

TR_RULE_FN(tr_check_runtime_activation) {
    const tr_model_config *m = &c->model;
    int act = m->activation_func;
    if (m->gated_linear_unit && act != TR_ACT_SILU)
        TR_FAIL("model.activation_func",
                "use activation_func=silu with gated_linear_unit=true (SwiGLU)", NOT_YET,
                "this gated activation");
    if (!m->gated_linear_unit && act != TR_ACT_GELU && act != TR_ACT_FAST_GELU)
        TR_FAIL("model.activation_func", "use gelu, fast_gelu, or silu with gated_linear_unit=true",
                NOT_YET, "this MLP activation");
}

/* The runtime splits the attention heads, the MLP width, the padded vocabulary and (with SP) the
 * sequence evenly over TP; query groups split too, or, with more TP ranks than groups, each
 * group's key and value heads are copied to the TP/groups ranks sharing it (the groups' rule,
 * parallel.query_groups_compatible_with_tp, asks them to be a divisor or multiple of TP).
 * finalize() has filled the null-means-computed sizes. */
TR_RULE_FN(tr_check_runtime_tp_split) {
    const tr_model_config *m = &c->model;
    int64_t tp = m->tensor_model_parallel_size;
    if (tp <= 1 || m->num_attention_heads == TR_NULL_INT || m->num_attention_heads < 1) return;
    int64_t heads = m->num_attention_heads;
    int64_t ffn = m->ffn_hidden_size != TR_NULL_INT ? m->ffn_hidden_size
                  : m->hidden_size != TR_NULL_INT   ? 4 * m->hidden_size
                                                    : 0;
    int64_t vocab =
        c->derived.padded_vocab_size != TR_NULL_INT ? c->derived.padded_vocab_size : m->vocab_size;
    if (vocab == TR_NULL_INT) vocab = 0;
    int64_t sp_seq = m->sequence_parallel ? m->seq_length : tp;
    if (heads % tp == 0 && ffn % tp == 0 && vocab % tp == 0 && sp_seq % tp == 0) return;
    TR_FAIL("model.tensor_model_parallel_size",
            "choose a TP size dividing the attention heads, the MLP width, the padded vocabulary "
            "and (sequence parallel) the sequence length",
            "TP %lld does not divide attention heads %lld, ffn %lld, padded vocabulary %lld or "
            "sequence %lld",
            (long long)tp, (long long)heads, (long long)ffn, (long long)vocab,
            (long long)m->seq_length);
}

/* The embedding needs a size; byte-level text needs its 256 ids, mock documents two. */
TR_RULE_FN(tr_check_runtime_vocab) {
    const tr_dataset_config *dc = &c->dataset;
    int64_t padded = c->derived.padded_vocab_size, v = c->model.vocab_size;
    int64_t size = padded != TR_NULL_INT ? padded : v;
    if (size == TR_NULL_INT || size <= 0) {
        TR_FAIL("model.vocab_size", "set model.vocab_size or a tokenizer that defines one",
                "the model has no vocabulary size");
        return;
    }
    if (dc->type == TR_DS_TEXT && size < 256)
        TR_FAIL("model.vocab_size",
                "use a model with at least 256 token ids (the tiny recipes have 256)",
                "byte-level text needs 256 token ids, the model has %lld", (long long)size);
    bool mock = dc->type == TR_DS_GPT && dc->data_path.null && dc->train_data_path.null &&
                dc->valid_data_path.null && dc->test_data_path.null;
    if (mock && (v != TR_NULL_INT ? v : size) < 2)
        TR_FAIL("model.vocab_size", "set model.vocab_size", "mock data needs a vocabulary size");
}

TR_RULE_FN(tr_check_runtime_train_iters) {
    const tr_train_config *t = &c->train;
    if (t->train_iters != TR_NULL_INT && t->micro_batch_size != TR_NULL_INT &&
        t->global_batch_size != TR_NULL_INT)
        return;
    TR_FAIL("train.train_iters,train.micro_batch_size,train.global_batch_size",
            "set train.train_iters, train.micro_batch_size and train.global_batch_size",
            "training needs an iteration count and batch sizes");
}

TR_RULE_FN(tr_check_runtime_batch_rampup) {
    if (c->train.rampup_batch_size.null) return;
    TR_FAIL("train.rampup_batch_size", "set train.rampup_batch_size=null", NOT_YET,
            "batch-size ramp-up");
}

TR_RULE_FN(tr_check_runtime_document_resets) {
    if (c->dataset.reset_position_ids == 1)
        TR_FAIL("dataset.reset_position_ids", "set dataset.reset_position_ids=false", NOT_YET,
                "position ids restarting at document boundaries");
    if (c->dataset.reset_attention_mask == 1)
        TR_FAIL("dataset.reset_attention_mask", "set dataset.reset_attention_mask=false", NOT_YET,
                "attention masks cut at document boundaries");
}

TR_RULE_FN(tr_check_runtime_not_logged) {
    if (c->logger.log_num_zeros_in_grad || c->optimizer.log_num_zeros_in_grad)
        TR_FAIL("logger.log_num_zeros_in_grad", "set it to false",
                "the number of zero gradients is not logged by the CPU training runtime yet");
    if (c->logger.log_memory)
        TR_FAIL("logger.log_memory", "set it to false",
                "device memory is not logged by the CPU training runtime yet");
}

static bool indexed_data(const tr_dataset_config *dc) {
    return dc->type == TR_DS_GPT && (!dc->data_path.null || !dc->train_data_path.null ||
                                     !dc->valid_data_path.null || !dc->test_data_path.null);
}

/* Megatron honours these through loss masks and position ids, which the loop cannot receive
 * from a GPT token dataset (indexed data, and mock data, megatron-core's MockGPTDataset) yet:
 * refusing beats silently training something else. */
TR_RULE_FN(tr_check_runtime_indexed_masks) {
    const tr_dataset_config *dc = &c->dataset;
    if (dc->type != TR_DS_GPT) return;
    if (indexed_data(dc) && dc->eod_mask_loss == 1)
        TR_FAIL("dataset.eod_mask_loss", "set dataset.eod_mask_loss=false",
                "indexed datasets carry tokens only, not Megatron's loss mask (zero where the "
                "input token is end-of-document)");
    if (!dc->add_extra_token_to_sequence)
        TR_FAIL("dataset.add_extra_token_to_sequence",
                "set dataset.add_extra_token_to_sequence=true",
                "GPT datasets (indexed and mock) carry tokens only, not the masked last label of "
                "a seq_length-token sample");
    if (!dc->drop_last_partial_validation_sequence)
        TR_FAIL("dataset.drop_last_partial_validation_sequence",
                "set dataset.drop_last_partial_validation_sequence=true",
                "GPT datasets (indexed and mock) carry tokens only, not the loss mask of a padded "
                "final validation sample");
}

TR_RULE_FN(tr_check_runtime_optimizer) {
    const tr_optimizer_config *o = &c->optimizer;
    if (o->optimizer == TR_OPTIM_ADAM && !o->decoupled_weight_decay)
        TR_FAIL("optimizer.decoupled_weight_decay",
                "set optimizer.decoupled_weight_decay=true (AdamW)", NOT_YET,
                "Adam with L2-coupled weight decay");
    if (!tr_is_null_float(o->decoupled_lr) || !tr_is_null_float(o->decoupled_min_lr))
        TR_FAIL("optimizer.decoupled_lr",
                "unset optimizer.decoupled_lr and optimizer.decoupled_min_lr", NOT_YET,
                "a separate embedding learning rate");
}

/* The optimizer's flags follow the model's; the precision-aware optimizer's state dtypes are
 * honoured (runtime/optimizer/optimizer.h: state stored rounded to them). */
TR_RULE_FN(tr_check_runtime_optimizer_precision) {
    const tr_optimizer_config *o = &c->optimizer;
    const tr_model_config *m = &c->model;
    if (o->bf16 != m->bf16 || o->fp16 != m->fp16)
        TR_FAIL("optimizer.bf16,optimizer.fp16,model.bf16,model.fp16",
                "set the precision through mixed_precision.preset, which sets both",
                "the optimizer's bf16/fp16 flags must match the model's");
}

/* Megatron keeps a grad scaler only in its mixed-precision optimizer: a static scale when one
 * is given, else a dynamic one with fp16. */
TR_RULE_FN(tr_check_runtime_loss_scale) {
    const tr_optimizer_config *o = &c->optimizer;
    if (!o->fp16 && !o->bf16) return;
    if (!tr_is_null_float(o->loss_scale)) {
        if (!(o->loss_scale > 0) || !isfinite(o->loss_scale))
            TR_FAIL(
                "optimizer.loss_scale", "give a positive static scale, or null for dynamic scaling",
                "the static loss scale must be a positive finite number (got %g)", o->loss_scale);
        return;
    }
    if (!o->fp16) return;
    if (!(o->initial_loss_scale > 0) || !isfinite(o->initial_loss_scale))
        TR_FAIL("optimizer.initial_loss_scale", "use e.g. 4294967296 (2^32)",
                "the initial loss scale must be positive and finite (got %g)",
                o->initial_loss_scale);
    if (!(o->min_loss_scale > 0) || o->min_loss_scale > o->initial_loss_scale)
        TR_FAIL("optimizer.min_loss_scale,optimizer.initial_loss_scale",
                "use a positive minimum no larger than the initial scale, e.g. 1",
                "the minimum loss scale must be positive and at most the initial scale (got %g)",
                o->min_loss_scale);
    if (!(o->loss_scale_window >= 1))
        TR_FAIL("optimizer.loss_scale_window", "use e.g. 1000",
                "the loss scale window must be at least one iteration (got %g)",
                (double)o->loss_scale_window);
}

TR_RULE_FN(tr_check_runtime_autocast) {
    if (!c->mixed_precision.autocast_enabled) return;
    TR_FAIL("mixed_precision.autocast_enabled",
            "set it to false; mixed_precision.preset=bf16_mixed gives bf16 GEMMs over fp32 main "
            "parameters",
            NOT_YET, "autocast regions");
}

TR_RULE_FN(tr_check_runtime_distopt_instances) {
    int64_t n = c->ddp.num_distributed_optimizer_instances;
    if (n <= 1) return;
    TR_FAIL("ddp.num_distributed_optimizer_instances",
            "set ddp.num_distributed_optimizer_instances=1",
            NOT_YET " (%lld instances): the distributed optimizer shards over the whole "
                    "data-parallel group",
            "several distributed-optimizer instances", (long long)n);
}

TR_RULE_FN(tr_check_runtime_lora) {
    const tr_peft_config *p = &c->peft;
    if (p->scheme < 0) return;
    if (p->scheme == TR_PEFT_DORA && p->dropout > 0.0)
        TR_FAIL("peft.dropout", "set peft.dropout=0 with peft.scheme=dora", NOT_YET,
                "DoRA with adapter dropout (its dropout correction term)");
    if (p->dropout > 0.0 && p->dropout_position != TR_LORADROP_PRE)
        TR_FAIL("peft.dropout_position", "set peft.dropout_position=pre", NOT_YET,
                "LoRA dropout after the low-rank projection");
}

/* The runtime adapts the four linear layers by name; wildcard patterns are Megatron-Bridge's. */
TR_RULE_FN(tr_check_runtime_lora_modules) {
    static const char *const known[] = {"linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"};
    const tr_peft_config *p = &c->peft;
    if (p->scheme < 0) return;
    bool exclude = p->target_modules.null || p->target_modules.n == 0;
    const tr_str_list *l = exclude ? &p->exclude_modules : &p->target_modules;
    const char *key = exclude ? "peft.exclude_modules" : "peft.target_modules";
    unsigned named = 0;
    for (int i = 0; !l->null && i < l->n; i++) {
        int t = 0;
        while (t < 4 && strcmp(l->v[i], known[t]) != 0) t++;
        if (t == 4) {
            TR_FAIL(key, "name modules among linear_qkv, linear_proj, linear_fc1, linear_fc2",
                    "LoRA in the training runtime does not support the module pattern \"%s\" yet",
                    l->v[i]);
            return;
        }
        named |= 1u << t;
    }
    if (exclude ? named == 15u : named == 0u)
        TR_FAIL("peft.target_modules,peft.exclude_modules",
                "adapt at least one of linear_qkv, linear_proj, linear_fc1, linear_fc2",
                "LoRA adapts no linear layer: nothing would train");
}

/* Trestle writes its own sharded format; torch_dist is its alias, and the PyTorch formats
 * cannot be produced without PyTorch. */
TR_RULE_FN(tr_check_runtime_ckpt_format) {
    const tr_checkpoint_config *cc = &c->checkpoint;
    if (!cc->save && !cc->load && !cc->pretrained_checkpoint) return;
    if (cc->ckpt_format == TR_CKPTFMT_TORCH_DIST || cc->ckpt_format == TR_CKPTFMT_TRESTLE) return;
    TR_FAIL("checkpoint.ckpt_format",
            "set checkpoint.ckpt_format=trestle (or torch_dist, its alias)",
            "the runtime reads and writes only Trestle's sharded checkpoints, not ckpt_format %s",
            cc->ckpt_format == TR_CKPTFMT_TORCH ? "torch" : "torch_dcp");
}
