/* See runtime/optimizer/lr_schedule.h. */
#include "runtime/optimizer/lr_schedule.h"

#include <math.h>

static const double PI = 3.14159265358979323846;

static int64_t or_zero(int64_t v) {
    return v == TR_NULL_INT ? 0 : v;
}

tr_status tr_lr_schedule_from_config(const tr_config *c, tr_lr_schedule *s, tr_diags *d) {
    const tr_scheduler_config *sc = &c->scheduler;
    const tr_optimizer_config *o = &c->optimizer;
    if (tr_is_null_float(o->lr))
        return tr_diag_add(d, TR_SEV_ERROR, "runtime.no_lr", NULL, "optimizer.lr",
                           "set optimizer.lr=VALUE", "training needs a learning rate");
    *s = (tr_lr_schedule){
        .style = sc->lr_decay_style,
        .wsd_style = sc->lr_wsd_decay_style,
        .max_lr = o->lr,
        .min_lr = tr_is_null_float(o->min_lr) ? 0.0 : o->min_lr,
        .init_lr = sc->lr_warmup_init,
        .warmup_steps = or_zero(c->derived.lr_warmup_steps),
        .decay_steps = or_zero(c->derived.lr_decay_steps),
        .wsd_decay_steps = or_zero(c->derived.wsd_decay_steps),
        .wd_style = sc->weight_decay_incr_style,
        .start_wd =
            tr_is_null_float(sc->start_weight_decay) ? o->weight_decay : sc->start_weight_decay,
        .end_wd = tr_is_null_float(sc->end_weight_decay) ? o->weight_decay : sc->end_weight_decay,
        .wd_incr_steps = or_zero(c->derived.wd_incr_steps),
    };
    return TR_OK;
}

static double wsd_coeff(const tr_lr_schedule *s, int64_t n) {
    int64_t anneal_start = s->decay_steps - s->wsd_decay_steps;
    if (s->wsd_decay_steps <= 0 || n <= anneal_start) return 1.0;
    double r = (double)(n - anneal_start) / (double)s->wsd_decay_steps;
    switch (s->wsd_style) {
    case TR_WSD_LINEAR:
        return 1.0 - r;
    case TR_WSD_COSINE:
        return 0.5 * (cos(PI * r) + 1.0);
    case TR_WSD_MINUS_SQRT:
        return 1.0 - sqrt(r);
    case TR_WSD_EXPONENTIAL:
    default:
        return 2.0 * pow(0.5, r) - 1.0;
    }
}

double tr_lr_at(const tr_lr_schedule *s, int64_t n) {
    if (s->warmup_steps > 0 && n <= s->warmup_steps)
        return s->init_lr + (s->max_lr - s->init_lr) * (double)n / (double)s->warmup_steps;
    if (s->style == TR_SCHED_CONSTANT) return s->max_lr;
    if (n > s->decay_steps) return s->min_lr;
    if (s->style == TR_SCHED_INVERSE_SQRT) {
        double w = (double)(s->warmup_steps > 1 ? s->warmup_steps : 1);
        double k = (double)(n > 1 ? n : 1);
        return fmax(s->min_lr, s->max_lr * sqrt(w) / sqrt(k));
    }
    int64_t span = s->decay_steps - s->warmup_steps;
    double ratio = span > 0 ? (double)(n - s->warmup_steps) / (double)span : 1.0;
    double coeff;
    switch (s->style) {
    case TR_SCHED_COSINE:
        coeff = 0.5 * (cos(PI * ratio) + 1.0);
        break;
    case TR_SCHED_WSD:
        coeff = wsd_coeff(s, n);
        break;
    case TR_SCHED_LINEAR:
    default:
        coeff = 1.0 - ratio;
        break;
    }
    return s->min_lr + coeff * (s->max_lr - s->min_lr);
}

double tr_wd_at(const tr_lr_schedule *s, int64_t n) {
    if (n > s->wd_incr_steps || s->wd_style == TR_WDINC_CONSTANT) return s->end_wd;
    double r = s->wd_incr_steps > 0 ? (double)n / (double)s->wd_incr_steps : 1.0;
    double coeff = s->wd_style == TR_WDINC_LINEAR ? r : 0.5 * (cos(PI * (1.0 - r)) + 1.0);
    return s->start_wd + coeff * (s->end_wd - s->start_wd);
}
