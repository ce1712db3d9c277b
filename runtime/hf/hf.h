/* Hugging Face model directories (config.json + *.safetensors) to Trestle, as Megatron-Bridge's
 * AutoBridge does it: the config's dimensions become the model section (through the same
 * provider helpers the named Llama providers use), and the weights fill a model built from it,
 * each rank reading only the elements of its own shard. Architectures: LlamaForCausalLM,
 * Qwen3ForCausalLM (dense), GPT2LMHeadModel. */
#ifndef TR_HF_HF_H
#define TR_HF_HF_H

#include "core/config.h"
#include "core/diag.h"
#include "runtime/hf/safetensors.h"
#include "runtime/model/model.h"

/* Reads DIR/config.json and writes the model section from it, every change recorded with the
 * file as its origin. With keep_schedule the recipe's sequence length and dtypes stay (as
 * Megatron-Bridge keeps a recipe's layout and schedule and takes the checkpoint's dimensions).
 * Diagnostics: "hf.config" (unreadable, not an object, a missing or contradictory key),
 * "hf.architecture" (an architecture Trestle does not map). */
tr_status tr_hf_config_apply(tr_config *c, const char *dir, bool keep_schedule, tr_diags *d);

/* true when DIR holds config.json and model.safetensors or its index: a Hugging Face model. */
bool tr_hf_is_model_dir(const char *dir);

/* Every model field that shapes the weights or the maths (dimensions, norms, activation,
 * rotary settings, tying, biases) must agree between c and DIR/config.json: a disagreement is
 * one "hf.config_mismatch" per field, naming the key, both values and where c's came from. */
tr_status tr_hf_config_check(const tr_config *c, const char *dir, tr_diags *d);

/* The checkpoint's weight files: DIR/model.safetensors, or the files DIR/model.safetensors.
 * index.json names ("hf.index" when it is malformed), and the architecture DIR/config.json
 * names. Free with tr_hf_weights_close. */
typedef struct tr_hf_weights {
    tr_st_file *files;
    int n;
    char *architecture; /* "LlamaForCausalLM", ...; NULL when config.json names none */
} tr_hf_weights;
tr_status tr_hf_weights_open(tr_hf_weights *w, const char *dir, tr_diags *d);
void tr_hf_weights_close(tr_hf_weights *w);
/* The tensor of that name in any of the files, or NULL. */
const tr_st_tensor *tr_hf_weights_find(const tr_hf_weights *w, const char *name);

/* Fills every parameter of m (its TP shard and pipeline stages; adapters excepted) from the
 * checkpoint, mapped as its architecture lays the tensors out: LlamaForCausalLM (q/k/v into
 * Megatron's grouped QKV rows, gate and up into fc1), Qwen3ForCausalLM (the same, with q_norm /
 * k_norm as q_layernorm / k_layernorm) and GPT2LMHeadModel (Conv1D weights
 * transposed, c_attn split into the grouped rows, learned positions); the vocabulary padding is
 * zero. F32, BF16 and F16 files. A missing tensor, a wrong shape or a tensor the model has no
 * place for is "hf.tensor", naming it; another architecture "hf.architecture". */
tr_status tr_hf_import(tr_model *m, const tr_hf_weights *w, tr_diags *d);
/* Whether Trestle maps an architecture name. */
bool tr_hf_architecture_known(const char *name);

/* Writes a whole model (one rank, every layer) as DIR/config.json and DIR/model.safetensors of a
 * LlamaForCausalLM, a Qwen3ForCausalLM when it has qk_layernorm, or a GPT2LMHeadModel (GPT
 * layers: LayerNorm, learned positions, biases, one group per head), tensors in dtype (F32, BF16
 * or F16: rounded to nearest even); DIR is made when missing. A model with LoRA or DoRA adapters
 * (on the host) is written merged: the weights of a model without adapters that computes the
 * same forward (tr_lora_merge). "hf.export" when the model is none of those, not whole, or
 * carries adapters on a device. */
tr_status tr_hf_export(const tr_model *m, const char *dir, tr_st_dtype dtype, tr_diags *d);
/* The same, told after each tensor written how many of n tensors and of total bytes are out
 * (a converter's progress bar); fn may be NULL. The tensors are streamed: each is written (to
 * the temporary file) and freed as soon as the parameters that feed it are read. */
typedef void (*tr_hf_progress_fn)(void *ctx, int done, int n, uint64_t bytes, uint64_t total);
tr_status tr_hf_export_progress(const tr_model *m, const char *dir, tr_st_dtype dtype,
                                tr_hf_progress_fn fn, void *ctx, tr_diags *d);
/* The same export of a model whose parameters are not in memory: m gives the spec and the
 * parameter list (tr_model_shape and tr_model_param_list make one without buffers), and `get`
 * hands over each parameter in turn (index i of m->info, in order, each once): its numel fp32
 * values at *vals, valid until the next call. The export then holds the few tensors it is
 * writing, not the model. The bytes are tr_hf_export_progress's for the same values. A model
 * with adapters is "hf.export": merging them needs the whole model (tr_hf_export). */
typedef tr_status (*tr_hf_param_fn)(void *ctx, const tr_model *m, int i, const float **vals,
                                    tr_diags *d);
tr_status tr_hf_export_stream(const tr_model *m, tr_hf_param_fn get, void *get_ctx, const char *dir,
                              tr_st_dtype dtype, tr_hf_progress_fn fn, void *ctx, tr_diags *d);

/* LoRA adapters alone, as PEFT saves them (runtime/hf/adapter.c): DIR/adapter_config.json
 * (peft_type LORA, r, lora_alpha, target_modules, base_model_name_or_path: base_model, or
 * null) and DIR/adapter_model.safetensors with PEFT's names
 * (base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight, ...), each written to a
 * temporary name and renamed. The fused linear_qkv / linear_fc1 adapters become q/k/v_proj
 * (gate/up_proj) adapters sharing one lora_A, B's rows split as the weights' are. A whole
 * one-rank LoRA (not DoRA) Llama or Qwen3 model; else "hf.adapter". */
tr_status tr_hf_adapter_export(const tr_model *m, const char *dir, const char *base_model,
                               tr_st_dtype dtype, tr_diags *d);
/* Reads such a directory into m's adapters (its TP shard): adapter_config.json must give the
 * model's rank, scale (lora_alpha / r) and targets ("hf.adapter" otherwise), the projections of
 * a fused layer one shared lora_A, every tensor present, of its shape, and placed ("hf.tensor"
 * naming it). */
tr_status tr_hf_adapter_import(tr_model *m, const char *dir, tr_diags *d);
/* true when DIR holds adapter_config.json and adapter_model.safetensors. */
bool tr_hf_is_adapter_dir(const char *dir);

#endif
