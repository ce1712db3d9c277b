/* Metadata-only resharding plan: given a manifest and a target layout, which tensors the target
 * would read with exactly the stored slices, which it must reshard (read overlapping pieces), and
 * which cannot be split that way at all. The target's slices are predicted from the axis hints
 * recorded per tensor (tp_axis split in TP blocks, pp_axis in PP*VPP layer blocks, dp_axis in DP
 * ranges when the distributed optimizer is on). */
#ifndef TR_CKPT_RESHARD_H
#define TR_CKPT_RESHARD_H

#include "runtime/checkpoint/manifest.h"

typedef enum tr_ckpt_plan_kind {
    TR_CKPT_PLAN_IDENTICAL = 0, /* the target reads exactly the stored shards */
    TR_CKPT_PLAN_RESHARD,       /* readable; slices differ from the stored ones */
    TR_CKPT_PLAN_IMPOSSIBLE     /* the target layout cannot split this tensor */
} tr_ckpt_plan_kind;

typedef struct tr_ckpt_plan_item {
    const char *name; /* points into the manifest */
    tr_ckpt_plan_kind kind;
    char why[160];
} tr_ckpt_plan_item;

/* items: malloc'd, one per manifest tensor. Returns TR_ERR_INVALID (with one diagnostic per
 * impossible tensor, id checkpoint.cannot_reshard) when any tensor cannot be loaded. */
tr_status tr_ckpt_plan(const tr_ckpt_manifest *m, const tr_ckpt_layout *target,
                       tr_ckpt_plan_item **items, tr_diags *d);

/* Parses "tp=2,pp=2,dp=1,vpp=1,dist_opt=1" (any subset; the rest stay as in *l). Also accepts
 * config keys: model.tensor_model_parallel_size, model.pipeline_model_parallel_size,
 * model.virtual_pipeline_model_parallel_size, model.context_parallel_size,
 * ddp.use_distributed_optimizer, and dp for the data-parallel size. */
tr_status tr_ckpt_layout_parse(const char *text, tr_ckpt_layout *l, tr_diags *d);

#endif
