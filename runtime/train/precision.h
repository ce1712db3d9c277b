/* The training loop's share of mixed precision (docs/runtime.md, "Mixed precision"): after the
 * gradients are reduced and before clipping, gradients reduced in half precision
 * (ddp.grad_reduce_in_fp32=false) are rounded to it, and with a loss scaler they are unscaled
 * and checked for inf/NaN; an overflow anywhere skips the step on every rank. */
#ifndef TR_RUNTIME_TRAIN_PRECISION_H
#define TR_RUNTIME_TRAIN_PRECISION_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/diag.h"
#include "kernels/ops.h"
#include "runtime/distributed/grad_buffer.h"
#include "runtime/optimizer/loss_scaler.h"

struct tr_device;

typedef struct tr_train_precision {
    tr_loss_scaler scaler;
    int grad_lowp; /* 0, or the tr_lowp the reduced gradients are rounded to */
    /* 0, or the tr_lowp of the precision-aware optimizer's main gradients
     * (optimizer.main_grads_dtype): the reduced gradients rounded to it next, as Megatron copies
     * the grad buffer into main_grad before unscaling */
    int main_grad_lowp;
} tr_train_precision;

tr_status tr_train_precision_from_config(const tr_config *c, tr_train_precision *p, tr_diags *d);

/* Whether tr_train_precision_grads has anything to do. */
bool tr_train_precision_touches_grads(const tr_train_precision *p);

/* The reduced gradients, as ranges of the device buffer grads (offset and numel of each are
 * read): each rounded (grad_lowp), then unscaled by the loss scale; *found_inf tells whether any
 * value was inf or NaN. The flag the ops raise lives in device memory and is read back once. */
tr_status tr_train_precision_grads(const tr_train_precision *p, struct tr_device *dev, float *grads,
                                   const tr_grad_range *ranges, int n_ranges, bool *found_inf);

/* The factor the model multiplies the loss gradient by (tr_model.grad_loss_scale; 0: none). */
float tr_train_precision_grad_scale(const tr_train_precision *p);

/* After the step's global verdict: advances the scaler; returns the scale to log (NaN without a
 * scaler). */
double tr_train_precision_after_step(tr_train_precision *p, bool found_inf);

#endif
