/* Internal to the files of runtime/model/: the pieces forward and backward share. */
#ifndef TR_RUNTIME_MODEL_INTERNAL_H
#define TR_RUNTIME_MODEL_INTERNAL_H

#include <math.h>

#include "runtime/model/model.h"
#include "runtime/model/linear.h"

/* Each tensor and activation buffer starts on a 64-byte boundary (16 floats), so vector loads
 * never straddle two of them. */
#define TR_PARAM_ALIGN 16

/* Where the forward is about to read parameters / the backward has finished gradients: a layer
 * index, or one of these (AT_OUTPUT: the output weight alone, after a deferred-wgrad drain; with
 * deferral AT_HEAD leaves it out). before_params also brings those linear weights'
 * half-precision copy up to date, after the hook (a pending parameter all-gather) has returned. */
enum { TR_MODEL_AT_EMBEDDING = -1, TR_MODEL_AT_HEAD = -2, TR_MODEL_AT_OUTPUT = -3 };
tr_status tr_model_before_params(const tr_model *m, int where);
tr_status tr_model_grads_done(const tr_model *m, int where);
/* The half-precision weight copy (runtime/model/wcopy.c): laid out and allocated after the
 * parameters' views are bound (nothing without spec.lowp or with spec.no_weight_copy), freed;
 * the copy of the linear weight w refreshed when stale (the model is const because the forward
 * holds it so; only the copy and its versions change); and the copy the GEMMs read, NULL when
 * the model keeps none, TR_ERR_INTERNAL when it is stale. */
tr_status tr_model_wcopy_create(tr_model *m);
void tr_model_wcopy_free(tr_model *m);
tr_status tr_model_wcopy_refresh(const tr_model *m, const float *w);
tr_status tr_model_wcopy_of(const tr_model *m, const float *w, const uint16_t **out);
/* Points the current activation fields (acts of the part's layers, head, ids, targets) at the
 * storage of (part, slot). */
tr_status tr_model_select_slot(tr_model *m, int part, int slot);
/* The activation buffers of every (part, slot) and the shared scratch (runtime/model/acts.c), in
 * device memory of kind activations; freed with the device they were allocated on. */
tr_status tr_model_alloc_acts(tr_model *m);
void tr_model_free_acts(tr_model *m, struct tr_device *dev);
tr_status tr_model_bind_views(tr_model *m, float *base, tr_model_views *v);

/* true when the input of linear `id` (a tr_model_linear_id, or TR_MODEL_AT_HEAD for the output
 * layer) is saved in half precision: mixed precision, not switched off (spec.no_half_acts), and
 * no LoRA adapter on that layer, which reads its input in fp32. The layout and both passes ask
 * this one function, so they agree on which buffers exist. */
bool tr_model_half_input(const tr_model *m, int id);
tr_status tr_model_norm_fwd(const tr_model *m, float *y, float *mean, float *rstd, const float *x,
                            const float *w, const float *b, int rows);
tr_status tr_model_qkv_split(const tr_model *m, const float *qkv, float *q, float *k, float *v,
                             int64_t rows);
tr_status tr_model_qkv_merge(const tr_model *m, float *qkv, const float *q, const float *k,
                             const float *v, int64_t rows);
/* dst = src (n floats, device memory; a no-op when they are the same). */
tr_status tr_model_copy(const tr_model *m, float *dst, const float *src, int64_t n);
tr_attn_desc tr_model_attn_desc(const tr_model *m);
/* The same for layer `layer` (global number), with its attention-dropout mask in training. */
tr_attn_desc tr_model_layer_attn_desc(const tr_model *m, int layer);
/* The MTP projection's call (runtime/mtp/mtp.h): op table, TP group, sizes, scratch. */
tr_mtp_run tr_model_mtp_run(const tr_model *m);
/* Where layer `layer`'s tensor names start: "decoder.layers.<i>", or for the transformer layer of
 * MTP depth d (layer num_layers + d) "mtp.layers.<d>.mtp_model_layer". */
void tr_model_layer_base(char *out, size_t n, const tr_model_spec *s, int layer);
/* Multi-latent attention's call for layer `layer` (runtime/mla/mla.h): the op table, this rank's
 * heads and TP group, the layer's attention descriptor, the packed-sequence positions. */
tr_mla_run tr_model_mla_run(const tr_model *m, int layer);
/* Dropout of the hidden activations at `site` (y = x allowed): the rows this rank holds (its
 * sequence chunks with sequence parallelism) with the mask the whole microbatch would draw. */
tr_status tr_model_dropout(const tr_model *m, float *y, const float *x, int site, bool forward);
/* Philox counter offset of dropout site `site` (0 embedding, 1 + 2i attention, 2 + 2i MLP). */
uint64_t tr_model_dropout_offset(const tr_model *m, int site);
/* Makes the packed-sequence layout of (part, slot) current: a forward first stores the layout
 * set by tr_model_set_sequences into the slot, a backward takes the one its forward stored. */
tr_status tr_model_slot_sequences(tr_model *m, int part, int slot, bool forward);
/* RoPE on x [batch, seq, heads, head_dim] in place (the inverse rotation when !forward), at
 * positions 0..seq-1 or at the tokens' position ids. */
tr_status tr_model_rope(const tr_model *m, float *x, int heads, bool forward);
/* qk_norm (runtime/model/qk_norm.c) of layer `layer`: forward from the saved q_raw / k_raw into
 * its q and k; backward from m->dq / m->dk (the gradients after RoPE's inverse) into the
 * gradients of q_raw / k_raw (*dq, *dk: scratch of the model), accumulating the weights'. */
tr_status tr_model_qk_norm_fwd(const tr_model *m, int layer);
tr_status tr_model_qk_norm_bwd(const tr_model *m, int layer, const float **dq, const float **dk);
/* Learned positions of this rank's rows: added to x0 (forward) or their gradient accumulated
 * from dx (backward). */
tr_status tr_model_pos_embedding(tr_model *m, float *x, bool forward);
/* true when the adapters' input dropout is active (peft.dropout > 0, training). */
bool tr_lora_dropout_on(const tr_model *m);
/* The adapter dropout of linear l on its input x [rows, in] (forward: y = the dropped-out input;
 * backward: y = the gradient through the same mask), drawn per logical element, so a
 * row-parallel shard draws its columns of the unsharded layer's mask. y == x allowed. */
tr_status tr_lora_dropout(const tr_linear *l, float *y, const float *x, int rows, bool forward);

/* Activation recomputation (the plan in runtime/model/acts.c, the rerun in recompute.c). A layer's
 * saved tensors in groups: its input, the norm outputs and statistics, the attention output and
 * lse, fc1 and the MLP activation, the rest (q, k, v, x_mid; MLA's latents), MLA's q, k, v. */
enum {
    TR_RC_X_IN = 1,
    TR_RC_NORMS = 2,
    TR_RC_ATTN = 4,
    TR_RC_MLP = 8,
    TR_RC_REST = 16,
    TR_RC_MLA_UP = 32
};
#define TR_RC_ALL 63u
/* The groups global layer `layer` of part `part` does not keep per slot: they live in recompute
 * set *set (m->rc_sets) and its backward recomputes them. */
unsigned tr_model_rc_dropped(const tr_model *m, int part, int layer, int *set);
/* How many recompute sets the model's spec and parts need (0 without recomputation). */
int tr_model_rc_sets(const tr_model *m);
/* Full recomputation: the run of layers recomputed together that `layer` of part `part`
 * belongs to, as [*first, returned end); 0 when the layer keeps everything. */
int tr_model_rc_run(const tr_model *m, int part, int layer, int *first);
/* Before the backward of `layer` of the current (part, slot): what it dropped, recomputed from
 * what it kept, with the slot's dropout round and sequence layout (full: the forward of the
 * layer's whole run once its last layer is reached). */
tr_status tr_model_recompute(tr_model *m, int part, int layer);
/* The pieces of the forward (forward.c) the recomputation reruns. tr_model_layer_fwd with
 * x_out NULL stops after the MLP activation (the rest is not needed by the backward). */
tr_status tr_model_layer_fwd(tr_model *m, int i, const float *x_in, float *x_out);
/* A norm output feeding a column-parallel linear as the layer saves it: fp32 y (and y_full, the
 * gathered rows with sequence parallelism; *in is then the linear's input), or half (through
 * the scratch dtmp; *in NULL). */
tr_status tr_model_norm_input(const tr_model *m, float *y, float *y_full, uint16_t *half,
                              float *mean, float *rstd, const float *x, const float *w,
                              const float *b, const float **in);
tr_status tr_model_core_attn_fwd(const tr_model *m, int layer, const tr_layer_acts *a);
tr_status tr_model_mlp_act_fwd(const tr_model *m, const tr_layer_acts *a);

/* Deferred output-layer weight gradients (runtime/model/defer_wgrad.c; sized in acts.c). The
 * microbatches the model defers (spec.defer_wgrad when it has the loss and the output layer is
 * not frozen), and the floats one of them keeps of the output layer's input and of the logits
 * gradient, each rounded up to whole aligned buffers. */
int tr_model_defer_cap(const tr_model *m);
void tr_model_defer_sizes(const tr_model *m, int64_t *x_floats, int64_t *dy_floats);
/* In the loss part's backward, after the loss gradient: keeps the microbatch's output-layer
 * input and logits gradient when there is room (*kept: its weight gradient is left to
 * tr_model_drain_wgrad). */
tr_status tr_model_defer_keep(tr_model *m, bool *kept);

#endif
