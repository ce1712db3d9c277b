/* AdamW and SGD over the flat parameter/gradient buffers, global grad-norm clipping, and
 * Megatron's weight-decay mask (no decay on biases and norm weights).
 *
 * The optimizer sees parameters only as named ranges of the flat buffer (tr_param_info), so a
 * distributed-optimizer shard later is just a sub-range with its own slice of the moments. */
#ifndef TR_RUNTIME_OPTIMIZER_H
#define TR_RUNTIME_OPTIMIZER_H

#include <stdint.h>

#include "core/config.h"
#include "core/diag.h"
#include "kernels/ops.h"
#include "runtime/model/model.h"

typedef struct tr_optimizer_spec {
    int sgd; /* 0: AdamW (decoupled weight decay), 1: SGD with momentum */
    float beta1, beta2, eps, momentum;
    double clip_grad;                /* 0 disables clipping */
    double grad_norm_skip_threshold; /* skip the step when the norm exceeds this (inf: never) */
    /* The precision-aware optimizer (Megatron's exp_avg_dtype, exp_avg_sq_dtype,
     * main_params_dtype): 0, or the tr_lowp the moments and the main parameters are stored in,
     * i.e. rounded to after every update (the update itself computes in fp32 from the stored
     * values, as TE's FusedAdam does). */
    int exp_avg_lowp, exp_avg_sq_lowp, main_params_lowp;
} tr_optimizer_spec;

/* The tr_lowp a half-precision tr_dtype names; 0 for fp32. */
int tr_dtype_lowp(int32_t dtype);

struct tr_device;

typedef struct tr_optimizer {
    tr_optimizer_spec spec;
    const tr_ops *ops;
    const tr_param_info *info;
    int n_info;
    int64_t n;
    float *m, *v;          /* Adam moments, or (m only) the SGD momentum buffer */
    int64_t step;          /* optimizer steps taken (drives Adam's bias correction) */
    struct tr_device *dev; /* where m and v live; NULL: host memory (tr_optimizer_create) */
} tr_optimizer;

/* Reads the optimizer section; settings this runtime does not implement are diagnostics. */
tr_status tr_optimizer_spec_from_config(const tr_config *c, tr_optimizer_spec *s, tr_diags *d);

tr_status tr_optimizer_create(tr_optimizer *o, const tr_optimizer_spec *s, const tr_ops *ops,
                              const tr_param_info *info, int n_info, int64_t n);
void tr_optimizer_free(tr_optimizer *o);
/* The same with the state in dev's memory and dev's ops. */
tr_status tr_optimizer_create_on(tr_optimizer *o, struct tr_device *dev, const tr_optimizer_spec *s,
                                 const tr_param_info *info, int n_info, int64_t n);
/* Frees the device state (tr_optimizer_free calls it when o->dev is set). */
void tr_optimizer_free_on_device(tr_optimizer *o);

/* The global L2 norm of the gradients (sum of squares in fixed blocks, so bitwise stable). */
tr_status tr_grad_norm(const tr_ops *ops, const float *grads, int64_t n, double *norm);
/* The same over a device buffer (one scalar copied back). */
tr_status tr_grad_norm_on(struct tr_device *dev, const float *grads, int64_t n, double *norm);

/* Megatron's clipping: with max_norm > 0 and norm > max_norm, scales the gradients by
 * max_norm / (norm + 1e-6). */
tr_status tr_clip_grads(const tr_ops *ops, float *grads, int64_t n, double max_norm, double norm);

/* One update of every parameter range with learning rate lr and weight decay wd (decay skipped
 * for no_decay ranges). */
tr_status tr_optimizer_step(tr_optimizer *o, float *params, const float *grads, double lr,
                            double wd);

#endif
