/* Learning-rate and weight-decay schedules as Megatron's OptimizerParamScheduler computes them.
 * Steps are counted in SAMPLES (the scheduler advances by global_batch_size per iteration), and
 * the lengths come from the config's derived values (derived.lr_warmup_steps, lr_decay_steps,
 * wsd_decay_steps, wd_incr_steps), so iteration- and sample-based configs share one code path. */
#ifndef TR_RUNTIME_SCHEDULE_LR_H
#define TR_RUNTIME_SCHEDULE_LR_H

#include <stdint.h>

#include "core/config.h"
#include "core/diag.h"

typedef struct tr_lr_schedule {
    int style;     /* TR_SCHED_* */
    int wsd_style; /* TR_WSD_* */
    double max_lr, min_lr, init_lr;
    int64_t warmup_steps, decay_steps, wsd_decay_steps;
    int wd_style; /* TR_WDINC_* */
    double start_wd, end_wd;
    int64_t wd_incr_steps;
} tr_lr_schedule;

tr_status tr_lr_schedule_from_config(const tr_config *c, tr_lr_schedule *s, tr_diags *d);

/* Learning rate after `samples` samples have been trained on (0 for the first iteration). */
double tr_lr_at(const tr_lr_schedule *s, int64_t samples);
/* Weight decay after `samples` samples. */
double tr_wd_at(const tr_lr_schedule *s, int64_t samples);

#endif
