/* LoRA fine-tuning (Megatron-Bridge's peft LoRA, reference megatron-bridge-config.md §9.1): every
 * targeted linear layer y = x W^T + b gets an adapter, y += (alpha / dim) (x A^T) B^T with
 * A = adapter.linear_in [dim, in] and B = adapter.linear_out [out, dim]; A starts from
 * peft.lora_A_init_method (xavier: normal with std sqrt(2 / (in + dim))), B from
 * lora_B_init_method (zero), so the model starts exactly as the base model. Every other tensor
 * is frozen: no gradient, no update, no weight decay. The adapters live in the model's flat
 * buffers like any parameter, so data parallelism, gradient clipping and checkpoints handle them
 * unchanged; under TP the adapters split as Megatron's ParallelLinearAdapter
 * (runtime/model/linear.c). peft.scheme=dora adds DoRA's magnitudes
 * (runtime/model/adapters/dora.h). See docs/runtime.md "LoRA". */
#ifndef TR_RUNTIME_LORA_H
#define TR_RUNTIME_LORA_H

#include "core/config.h"
#include "core/diag.h"
#include "runtime/model/model.h"

/* Fills the spec's lora_* fields from peft.* (nothing when peft.scheme is null); what the runtime
 * does not implement (DoRA, dropout after the projection, wildcard target patterns) is refused
 * before this by the capability rules runtime.lora and runtime.lora_modules. */
tr_status tr_lora_spec_from_config(const tr_config *c, tr_model_spec *s, tr_diags *d);

/* Writes the merged weights W + (alpha / dim) B A of a LoRA model `lora` into `base`, a model of
 * the same spec without adapters (lora_rank 0), and copies every other tensor: the merged model
 * computes the adapter model's forward. Both whole (one part, TP 1). */
tr_status tr_lora_merge(const tr_model *lora, tr_model *base);

/* true for an adapter tensor's name (a pretrained checkpoint has none of them). */
bool tr_lora_is_adapter(const char *name);

#endif
