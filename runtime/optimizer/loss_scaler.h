/* Loss scaling for fp16 training, Megatron's grad scalers (megatron/core/optimizer/grad_scaler.py):
 * the backward runs on loss * scale so that small gradients survive fp16, the gradients are
 * unscaled before the step, and a step whose gradients hold inf or NaN anywhere in the world is
 * skipped.
 *
 * Dynamic (DynamicGradScaler, the fp16 default): on an overflow the clean-step count restarts and
 * the hysteresis count drops by one; once it reaches 0 the scale halves (never below the
 * minimum), again on every further overflow until the scale next grows. After `growth_interval`
 * clean steps in a row the scale doubles and the hysteresis count is restored. Static
 * (ConstantGradScaler, optimizer.loss_scale set, also with bf16): the scale never changes, but a
 * step with inf/NaN is still skipped. bf16 without loss_scale has no scaler. */
#ifndef TR_RUNTIME_LOSS_SCALER_H
#define TR_RUNTIME_LOSS_SCALER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/diag.h"

typedef struct tr_loss_scaler {
    bool enabled; /* false: no loss scaling (fp32, or bf16 without a static scale) */
    bool dynamic;
    double scale;
    double min_scale;
    int64_t growth_interval; /* optimizer.loss_scale_window */
    int hysteresis;
    int64_t growth_tracker; /* clean steps since the last overflow or growth */
    int hysteresis_tracker; /* overflows left before the scale shrinks */
} tr_loss_scaler;

void tr_loss_scaler_init_dynamic(tr_loss_scaler *s, double initial, double min_scale,
                                 int64_t growth_interval, int hysteresis);
void tr_loss_scaler_init_static(tr_loss_scaler *s, double scale);

/* Megatron's choice: optimizer.loss_scale set -> static; else optimizer.fp16 -> dynamic; else
 * none. Settings it cannot honour are diagnostics (runtime.loss_scale). */
tr_status tr_loss_scaler_from_config(const tr_config *c, tr_loss_scaler *s, tr_diags *d);

/* Whether a config trains with a loss scaler (gradients may then be inf/NaN by design). */
bool tr_loss_scaler_wanted(const tr_config *c);

/* After a step's global inf/NaN check: the state machine above (a static scaler keeps its scale).
 */
void tr_loss_scaler_update(tr_loss_scaler *s, bool found_inf);

/* The factor the loss gradient is multiplied by (1 without scaling). */
float tr_loss_scaler_factor(const tr_loss_scaler *s);

#endif
