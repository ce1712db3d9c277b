/* What the planner's files share (runtime/plan only). */
#ifndef TR_RUNTIME_PLAN_INTERNAL_H
#define TR_RUNTIME_PLAN_INTERNAL_H

#include "runtime/model/model.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/plan/plan.h"

/* bytes rounded up to the device's allocation granularity (a zero request takes one unit) */
int64_t tr_plan_round(const tr_plan_gpu *g, int64_t bytes);
/* The model spec the launch builds (model section and LoRA). */
tr_status tr_plan_model_spec(const tr_config *c, tr_model_spec *ms, tr_diags *d);
/* The memo (cache.c): values up to TR_PLAN_CACHE_VAL bytes under a key of any length; kinds keep
 * the callers' keys apart. A NULL cache stores nothing and finds nothing. */
enum { TR_PLAN_CACHE_VAL = 320 };
enum {
    TR_PLAN_MEMO_SCHEDULE = 1,
    TR_PLAN_MEMO_PARAMS,
    TR_PLAN_MEMO_ACTS,
    TR_PLAN_MEMO_ACTS_ONE,
    TR_PLAN_MEMO_GRADS
};
bool tr_plan_cache_get(tr_plan_cache *c, int kind, const void *key, size_t n, void *val,
                       size_t val_len);
void tr_plan_cache_put(tr_plan_cache *c, int kind, const void *key, size_t n, const void *val,
                       size_t val_len);
/* One value of the caller's the memo keeps (NULL at first) and frees with aux_free, with the
 * memo or when replaced; a NULL cache keeps nothing. */
void *tr_plan_cache_aux(tr_plan_cache *c);
void tr_plan_cache_set_aux(tr_plan_cache *c, void *aux, void (*aux_free)(void *));
/* One rank role: pp_rank's chunks (lay is read only with PP > 1), through the memo, in two
 * phases: its parameters, gradients and optimizer state (their peaks), then the rest (the
 * schedule's slots, activations, buffers, workspace, totals). */
tr_status tr_plan_rank_state(const tr_config *c, const tr_model_spec *ms, const tr_plan_gpu *g,
                             const tr_pp_layout *lay, int pp_rank, tr_plan_cache *cache,
                             tr_plan_rank *r, tr_diags *d);
tr_status tr_plan_rank_rest(const tr_config *c, const tr_model_spec *ms, const tr_plan_gpu *g,
                            const tr_pp_layout *lay, int pp_rank, tr_plan_cache *cache,
                            tr_plan_rank *r, tr_diags *d);
/* A floor under the role's activation peak (after tr_plan_rank_state): one slot per chunk. */
tr_status tr_plan_rank_floor(const tr_config *c, const tr_model_spec *ms, const tr_plan_gpu *g,
                             const tr_pp_layout *lay, int pp_rank, tr_plan_cache *cache,
                             const tr_plan_rank *r, int64_t *act_floor);
/* tr_plan_make_cached that stops after the first phase when a role's parameters, gradients and
 * optimizer state, its activation floor and the device's reserved bytes exceed the device:
 * every peak is a sum of non-negative parts, so the full plan could not fit either; and stops
 * after a role whose full plan is over the device (the plan's peak is its largest role's). Such a
 * plan has `bounded` set, fits false and peak_total that lower bound; the rest is not planned. */
tr_status tr_plan_make_bounded(const tr_config *c, const tr_plan_gpu *gpu, tr_plan_cache *cache,
                               tr_plan *out, tr_diags *d);

/* The efficiency constants of the time model (device_model.c, docs/plan.md). */
extern const double TR_PLAN_EFF_GEMM, TR_PLAN_EFF_HBM, TR_PLAN_EFF_NVLINK, TR_PLAN_EFF_NET;
extern const double TR_PLAN_ACT_TRAFFIC, TR_PLAN_OPT_BYTES_PER_PARAM;
extern const double TR_PLAN_TP_HIDDEN, TR_PLAN_DP_HIDDEN, TR_PLAN_PP_HIDDEN;

#endif
