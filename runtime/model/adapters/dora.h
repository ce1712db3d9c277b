/* DoRA, Megatron-Bridge's weight-decomposed LoRA (peft.scheme=dora): an adapted linear layer
 * y = x W^T + b with LoRA's A [rank, in] and B [out, rank] also has a magnitude vector m [out],
 * and computes
 *     y = (m / ||V||) * (x W^T + scale x A^T B^T) + b,   V = W + scale B A,
 * per output j, ||V||_j the norm of row j of V over the whole input dimension. As in
 * Megatron-Bridge (and the DoRA paper, section 4.3) ||V|| is a constant in backward: m's
 * gradient is sum_r dy[r,j] z[r,j] / ||V||_j with z the pre-scale output, and the rest of the
 * backward is LoRA's with dy scaled by m / ||V||. m starts as ||W + scale B0 A0|| (||W|| when
 * B starts at zero), so the model starts exactly as the base model. Under TP m follows the
 * layer's output: split for column-parallel layers, whole for row-parallel ones, whose row
 * norms are summed over the TP group (Megatron-Bridge takes a row-parallel layer's norm over
 * the rank's own input columns; the whole row is the single-rank definition, so every layout
 * computes the one-rank model). z is recomputed in backward rather than stored. */
#ifndef TR_RUNTIME_MODEL_DORA_H
#define TR_RUNTIME_MODEL_DORA_H

#include "runtime/device/device.h"
#include "runtime/model/linear.h"

/* The scratch and per-layer scales of a DoRA model (nothing for other models); with its
 * activations. */
tr_status tr_dora_alloc(tr_model *m);
void tr_dora_free(tr_model *m, struct tr_device *dev);

/* This step's m / ||V|| and 1 / ||V|| of layer l (into l->dora_scale, l->dora_inv). */
tr_status tr_dora_weight_scale(const tr_linear *l);

/* sq[j] = ||row j of V||^2 over the whole input dimension, for every output j of layer l.
 * (tr_model_init_dora_magnitudes sets m from it.) */
tr_status tr_dora_weight_sq(const tr_linear *l, float *sq);

/* Backward, given dy and the recomputed pre-scale output z [rows, out]: dm += the magnitude's
 * gradient, and z becomes dy * m / ||V||, the gradient the rest of the layer sees. */
tr_status tr_dora_backward(const tr_linear *l, const float *dy, float *z, int rows);

#endif
