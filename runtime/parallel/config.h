/* From a validated ConfigContainer to the parallel layout the runtime builds groups for. */
#ifndef TR_PARALLEL_CONFIG_H
#define TR_PARALLEL_CONFIG_H

#include "core/status.h"
#include "runtime/parallel/dims.h"

struct tr_config;

/* Reads TP, PP, VPP, CP, EP, ETP, the rank order and the distributed-optimizer instances for a
 * world of `world` ranks, resolving nulls as Megatron-Bridge does (ETP: 1 when EP > 1, else TP;
 * VPP: none). Fills the derived sizes but does not judge the layout: call
 * tr_parallel_dims_check for that. TR_ERR_INVALID if a size does not fit an int. */
tr_status tr_parallel_dims_from_config(const struct tr_config *c, int world, tr_parallel_dims *out);

#endif
