/* The planner: what each rank of a run will hold and how long a step will take, before launch,
 * and a search over layouts (docs/plan.md).
 *
 * Memory comes from the code that sizes the runtime's buffers: the model's parameter list and
 * its activation carving (tr_model_param_list, tr_model_shape / tr_model_act_sizes), the
 * data-parallel gradient layout and shards (tr_grad_layout_build, tr_grad_owned_build), the
 * pipeline's action list (tr_pp_slots_in_flight, tr_pp_transfer_buffers). Each allocation the
 * runtime makes is one entry, rounded as the device rounds it, and the peaks per memory kind are
 * those of the runtime's order of allocation (the data-parallel relayout stages the parameters
 * on the host, so the device holds one layout at a time). Time comes from a small device model with
 * named constants (runtime/plan/device_model.c). MoE layers' token buffers come from
 * tr_moe_buffer_bytes; what the runtime refuses (EP, MoE with TP, ...) is planned predicted only
 * from Megatron's semantics (docs/plan.md). */
#ifndef TR_RUNTIME_PLAN_H
#define TR_RUNTIME_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "core/diag.h"
#include "core/validate.h"
#include "runtime/device/device.h"

/* A device the plan is made for: peak rates and bandwidths (documented in device_model.c). */
typedef struct tr_plan_gpu {
    const char *name;
    double mem_bytes;      /* usable device memory */
    double tflops_bf16;    /* dense tensor-core peak, bf16/fp16 */
    double tflops_fp32;    /* fp32 GEMM peak the runtime's fp32 path gets (TF32 off) */
    double hbm_gbs;        /* HBM bandwidth, GB/s */
    double nvlink_gbs;     /* per GPU, one direction, GB/s */
    double net_gbs;        /* per GPU across nodes, one direction, GB/s */
    int gpus_per_node;     /* NVLink domain */
    int64_t alloc_align;   /* allocation granularity of the runtime's device (arena / page) */
    double reserved_bytes; /* context, communicator and library workspaces outside the arenas */
} tr_plan_gpu;

/* "h100-80gb", "h200-141gb", "a100-80gb", "b200", "cpu" (the cpu-strict device: page-sized
 * allocations, the test oracle); NULL when unknown. */
const tr_plan_gpu *tr_plan_gpu_find(const char *name);
const char *tr_plan_gpu_names(void); /* "h100-80gb|h200-141gb|..." */

/* What one rank role holds, bytes per memory kind as the runtime allocates it. */
typedef struct tr_plan_rank {
    int pp_rank;
    bool first, last; /* holds the embedding / the loss */
    int layers;       /* transformer layers over its chunks */
    int slots[64];    /* activation sets per chunk (microbatches in flight) */
    int vpp;
    /* the breakdown (bytes, before device rounding) */
    int64_t params;       /* fp32 parameters (the runtime's master weights) */
    int64_t param_copy;   /* the half-precision weight copy (mixed precision) */
    int64_t grads;        /* gradients, fp32 in the runtime (grad_reduce_in_fp32 or not) */
    int64_t ddp_padding;  /* bucket and shard padding of the data-parallel layout */
    int64_t optimizer;    /* Adam m and v (or SGD momentum), sharded by the dist. optimizer */
    int64_t act_per_slot; /* one microbatch's activations (the arena's per-slot part) */
    int64_t act_arena;    /* every slot + recompute sets + scratch */
    int64_t tokens;       /* per-slot ids, targets, document starts, positions */
    int64_t p2p;          /* stage-transfer buffers held at once */
    int64_t cp_buffers;   /* the context-parallel exchange's KV/dKV blocks (CP > 1) */
    int64_t moe_buffers;  /* the MoE layers' states and scratch (tr_moe_buffer_bytes; dropless:
                           * every token's top-k expert rows, the worst case) */
    int p2p_fp32, p2p_half;
    int64_t workspace; /* loss buffers, overflow flag */
    int64_t n_params;  /* parameters of the role (elements) */
    int64_t n_buckets;
    /* per tr_mem_kind: the peak as the runtime's device counts it (rounded allocations) */
    int64_t peak[TR_MEM_KIND_COUNT];
    int64_t total;       /* sum of the peaks */
    double device_total; /* total + the gpu's reserved bytes */
} tr_plan_rank;

/* Communication per step of one process group (bytes one rank sends). */
typedef struct tr_plan_comm {
    const char *group; /* "tp", "cp", "pp", "dp" (data and context parallel), "embedding" */
    int size;
    double bytes;
    double seconds; /* exposed time after overlap */
    bool cross_node;
} tr_plan_comm;

typedef struct tr_plan {
    const tr_plan_gpu *gpu;
    int world, tp, pp, vpp, cp, dp, mbs, gbs, nmb;
    int ep, etp; /* the expert layout (1 for dense models) */
    /* The runtime refuses this config (its capability rules, core/rules/runtime.c): the numbers
     * are predicted from Megatron's semantics, not backed by a run; refused_by lists the rule
     * ids. Set by the caller that planned it anyway (--plan, the search's predicted list). */
    bool predicted_only;
    char refused_by[256];
    bool sp, dist_opt, lowp;
    int recompute; /* 0 none, 1 selective, 2 full */
    int n_ranks;
    tr_plan_rank ranks[3]; /* first stage, a middle stage, the last stage (distinct roles) */
    int64_t peak_total;    /* the largest role's device total */
    bool fits;
    /* The search's fast path stopped at a lower bound that already exceeds the device (a
     * role's parameters, gradients, optimizer state and activation floor, or one role's full
     * total): fits is false, peak_total that bound, and the roles' numbers and the time are
     * not all planned. Never set by tr_plan_make. */
    bool bounded;
    double model_flops; /* per step, forward + backward (6 N T + attention) */
    double hw_flops;    /* per step including recomputation */
    double t_compute, t_bubble, t_optimizer, t_comm, step_s, mfu;
    double bubble;        /* (p - 1) / (v m) of the compute time */
    tr_plan_comm comm[8]; /* tp, cp, ep, etp, pp, dp, ... */
    int n_comm;
} tr_plan;

/* The plan of a finalized config on `gpu` (validated; or one only the runtime's capability
 * rules refuse, which the caller marks predicted_only). */
tr_status tr_plan_make(const tr_config *c, const tr_plan_gpu *gpu, tr_plan *out, tr_diags *d);

/* A memo of the sizing calls' results for planning many layouts (the search): the same numbers,
 * each sizing call made once per distinct input. */
typedef struct tr_plan_cache tr_plan_cache;
tr_status tr_plan_cache_create(tr_plan_cache **out);
void tr_plan_cache_free(tr_plan_cache *c);
void tr_plan_cache_stats(const tr_plan_cache *c, int64_t *hits, int64_t *misses);
/* tr_plan_make through the memo (NULL: none). */
tr_status tr_plan_make_cached(const tr_config *c, const tr_plan_gpu *gpu, tr_plan_cache *cache,
                              tr_plan *out, tr_diags *d);

/* The bubble every rank's action list gives, simulated together with unit costs (tr_pp_check):
 * the check the printed plan shows beside the formula the step time uses (0 without PP). */
tr_status tr_plan_sim_bubble(const tr_config *c, double *bubble, tr_diags *d);

/* Text report (breakdown per role, FLOPs, bytes per group, bubble, time, MFU) and JSON. */
void tr_plan_print(FILE *out, const tr_config *c, const tr_plan *p);
void tr_plan_print_json(FILE *out, const tr_plan *p);

/* ---- search ---- */

typedef struct tr_plan_candidate {
    int tp, pp, vpp, cp, ep, etp, dp, mbs; /* etp 0: a dense model (not set) */
    int recompute;                         /* 0 none, 1 selective (core_attn), 2 full uniform 1 */
    bool dist_opt, sp;
    tr_plan plan;
} tr_plan_candidate;

typedef struct tr_plan_rejection {
    char id[64];
    int count;
} tr_plan_rejection;

typedef struct tr_plan_search {
    int tried, valid, fit;
    tr_plan_candidate *best; /* [n_best], fastest first */
    int n_best;
    /* Candidates the runtime's capability rules alone refuse (runtime.*, counted under their
     * ids like every rejection), planned as predicted only: how many planned, how many fit,
     * and the fastest fitting [n_pred] (plan.predicted_only, plan.refused_by). */
    int predicted, predicted_fit;
    tr_plan_candidate *pred;
    int n_pred;
    tr_plan_rejection *why; /* rule ids (and "memory") with counts */
    int n_why;
    double seconds;          /* the whole search */
    double validate_seconds; /* copying, overriding, finalizing and validating the candidates */
    double plan_seconds;     /* planning the valid ones (through one memo) */
    int64_t memo_hits, memo_misses;
} tr_plan_search;

/* Enumerates TP, PP, VPP, CP, EP, ETP, micro batch, recomputation and distributed-optimizer
 * choices of `base` (a resolved config before finalize), finalizes and validates each for the
 * world, plans the valid ones and keeps the top_k fitting ones by predicted step time. */
tr_status tr_plan_search_layouts(const tr_config *base, tr_world w, const tr_plan_gpu *gpu,
                                 int top_k, tr_plan_search *out, tr_diags *d);
/* What the search decided for one candidate: why it was left out (the rule ids it breaks, each
 * once in the order validate() reports them, or "memory", "config.set", a plan error id; empty
 * when it fits) and its plan (k->plan, when planned). */
typedef struct tr_plan_verdict {
    const tr_plan_candidate *k;
    bool planned;
    char why[512];
} tr_plan_verdict;

typedef struct tr_plan_search_opts {
    /* The reference path: a deep copy of the base per candidate (history and snapshot
     * included), every override through the text parser, every rule (warnings and notes too).
     * The default, fast path stores the same values through the field table's types on a copy
     * without history and runs the error rules alone: the same verdicts and plans (test_plan),
     * but that it stops a plan that provably does not fit at its lower bound (plan.bounded).
     * The plain path plans every candidate in full without the memo. */
    bool plain;
    /* The memo the fast path plans through: NULL for a fresh one (a cold search); a caller's
     * memo carries over from search to search (its counts are cumulative). */
    tr_plan_cache *cache;
    void (*each)(void *ctx, const tr_plan_verdict *v); /* called per candidate; may be NULL */
    void *ctx;
} tr_plan_search_opts;
tr_status tr_plan_search_layouts_with(const tr_config *base, tr_world w, const tr_plan_gpu *gpu,
                                      int top_k, const tr_plan_search_opts *o, tr_plan_search *out,
                                      tr_diags *d);
void tr_plan_search_free(tr_plan_search *s);
/* The overrides that select a candidate ("model.tensor_model_parallel_size=4 ..."). */
void tr_plan_candidate_overrides(const tr_plan_candidate *k, char *buf, size_t n);
void tr_plan_search_print(FILE *out, const tr_plan_search *s, bool json);

#endif
