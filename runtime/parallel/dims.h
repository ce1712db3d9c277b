/* The shape of a parallel layout: how many ranks each parallelism axis spans, before any
 * process exists. Kept as plain data so that layouts can be checked, printed and enumerated for
 * a cluster we are not running on (run_recipe --dry-run --world-size N). */
#ifndef TR_PARALLEL_DIMS_H
#define TR_PARALLEL_DIMS_H

#include <stdbool.h>

#include "core/diag.h"
#include "core/status.h"

typedef struct tr_parallel_dims {
    int world;
    int tp;  /* tensor parallel */
    int pp;  /* pipeline stages */
    int vpp; /* model chunks per pipeline rank; 0 or 1 means no interleaving */
    int cp;  /* context parallel (dense grid only) */
    int ep;  /* expert parallel (expert grid only) */
    int etp; /* expert tensor parallel */
    /* false: order tp-cp-ep-dp-pp (Megatron default); true: tp-cp-ep-pp-dp. */
    bool pp_before_dp;
    int dist_opt_instances; /* distributed-optimizer replicas; 1 = one shard set over all of DP */

    /* Derived by tr_parallel_dims_derive(); 0 when the world does not divide. */
    int dp;  /* world / (tp * cp * pp) */
    int edp; /* world / (etp * ep * pp) */
} tr_parallel_dims;

/* Every axis 1, world as given, default order, derived sizes filled in. */
void tr_parallel_dims_init(tr_parallel_dims *d, int world);

/* Recompute dp and edp from the other fields. */
void tr_parallel_dims_derive(tr_parallel_dims *d);

/* Every rule a layout must satisfy before groups can be built. Reports each violation as a
 * diagnostic (ids "parallel.*") when diags is non-NULL; returns TR_ERR_CONFIG if any error was
 * found. Reads only the primary fields: dp/edp are recomputed, never trusted. */
tr_status tr_parallel_dims_check(const tr_parallel_dims *d, tr_diags *diags);

/* Smallest world that fits the dense (TP*CP) and the expert (EP*ETP) meshes in every pipeline
 * stage: PP * lcm(TP*CP, EP*ETP). Every valid world is a multiple of it. */
long tr_parallel_min_world(const tr_parallel_dims *d);

/* "tp-cp-ep-dp-pp" or "tp-cp-ep-pp-dp". */
const char *tr_parallel_order_name(const tr_parallel_dims *d);

#endif
