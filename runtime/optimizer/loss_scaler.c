/* See runtime/optimizer/loss_scaler.h. */
#include "runtime/optimizer/loss_scaler.h"

#include <math.h>
#include <string.h>

#include "core/field.h"

enum { GROWTH_FACTOR = 2 };
#define BACKOFF_FACTOR 0.5

void tr_loss_scaler_init_dynamic(tr_loss_scaler *s, double initial, double min_scale,
                                 int64_t growth_interval, int hysteresis) {
    *s = (tr_loss_scaler){.enabled = true,
                          .dynamic = true,
                          .scale = initial,
                          .min_scale = min_scale,
                          .growth_interval = growth_interval,
                          .hysteresis = hysteresis,
                          .hysteresis_tracker = hysteresis};
}

void tr_loss_scaler_init_static(tr_loss_scaler *s, double scale) {
    *s = (tr_loss_scaler){.enabled = true, .scale = scale, .min_scale = scale};
}

/* Megatron keeps a grad scaler only in its mixed-precision optimizer. */
static bool mixed(const tr_optimizer_config *o) {
    return o->fp16 || o->bf16;
}

bool tr_loss_scaler_wanted(const tr_config *c) {
    const tr_optimizer_config *o = &c->optimizer;
    return mixed(o) && (!tr_is_null_float(o->loss_scale) || o->fp16);
}

tr_status tr_loss_scaler_from_config(const tr_config *c, tr_loss_scaler *s, tr_diags *d) {
    const tr_optimizer_config *o = &c->optimizer;
    memset(s, 0, sizeof *s);
    if (!mixed(o)) {
        if (!tr_is_null_float(o->loss_scale))
            tr_diag_add(d, TR_SEV_WARNING, "runtime.loss_scale_unused", NULL,
                        "optimizer.loss_scale",
                        "unset it, or train in fp16/bf16 (mixed_precision.preset)",
                        "optimizer.loss_scale is ignored in fp32 training, as in Megatron");
        return TR_OK;
    }
    /* The values were checked by tr_runtime_check (runtime.loss_scale); one it did not see is a
     * caller's error. */
    if (!tr_is_null_float(o->loss_scale)) {
        if (!(o->loss_scale > 0) || !isfinite(o->loss_scale)) return TR_ERR_INVALID;
        tr_loss_scaler_init_static(s, o->loss_scale);
        return TR_OK;
    }
    if (!o->fp16) return TR_OK;
    if (!(o->initial_loss_scale > 0) || !isfinite(o->initial_loss_scale) ||
        !(o->min_loss_scale > 0) || o->min_loss_scale > o->initial_loss_scale ||
        !(o->loss_scale_window >= 1))
        return TR_ERR_INVALID;
    tr_loss_scaler_init_dynamic(s, o->initial_loss_scale, o->min_loss_scale,
                                (int64_t)o->loss_scale_window, (int)o->hysteresis);
    return TR_OK;
}

void tr_loss_scaler_update(tr_loss_scaler *s, bool found_inf) {
    if (!s->enabled || !s->dynamic) return;
    if (found_inf) {
        s->growth_tracker = 0;
        s->hysteresis_tracker--;
        if (s->hysteresis_tracker <= 0) s->scale = fmax(s->scale * BACKOFF_FACTOR, s->min_scale);
        return;
    }
    if (++s->growth_tracker == s->growth_interval) {
        s->growth_tracker = 0;
        s->hysteresis_tracker = s->hysteresis;
        s->scale *= GROWTH_FACTOR;
    }
}

float tr_loss_scaler_factor(const tr_loss_scaler *s) {
    return s->enabled ? (float)s->scale : 1.0f;
}
