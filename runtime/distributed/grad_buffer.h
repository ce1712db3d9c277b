/* The layout of the flat parameter and gradient buffers that data parallelism works on.
 *
 * Parameters are described in model (forward, named_parameters) order; the layout places them
 * in the buffer in REVERSE order, because backward finishes the last layers' gradients first and
 * a bucket should be complete as early as possible. Buckets are contiguous ranges of the buffer
 * whose boundaries fall on parameter boundaries; bucket 0 holds the last parameters. With the
 * distributed optimizer every bucket is padded so that it splits evenly over the DP ranks, and
 * rank r owns the contiguous slice [r*B/dp, (r+1)*B/dp) of every bucket (its "shard").
 * The rules, and why: docs/distributed.md. The parameter and gradient buffers share this layout,
 * so one offset addresses a parameter and its gradient. */
#ifndef TR_DISTRIBUTED_GRAD_BUFFER_H
#define TR_DISTRIBUTED_GRAD_BUFFER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/diag.h"
#include "core/status.h"

/* One parameter as the model declares it. */
typedef struct tr_grad_param {
    char name[128];
    int64_t numel;
    bool no_weight_decay; /* biases and norm weights */
    bool frozen;          /* LoRA's base weights: never updated */
    /* The same values on every TP rank (e.g. norm weights): its gradient norm is counted on TP
     * rank 0 only. Layout ignores it; tr_grad_counted_mask reads it. */
    bool tp_replicated;
    /* Elements [uncounted_off, uncounted_off + uncounted_numel) of the parameter are a copy whose
     * twin another TP rank's norm counts (TP larger than the query groups: the key and value
     * rows each rank of a group holds): left out of this rank's gradient norm. */
    int64_t uncounted_off, uncounted_numel;
    /* Megatron gives a shared (tied) embedding a bucket of its own, so the pipeline's embedding
     * all-reduce can touch it without waiting on other parameters. */
    bool own_bucket;
} tr_grad_param;

typedef struct tr_grad_layout_options {
    int dp_size;         /* ranks the buckets are reduced over (dp x cp, or expert dp) */
    int64_t bucket_size; /* elements; <= 0: one bucket for the whole buffer */
    /* Distributed optimizer: pad parameter starts and bucket ends so that buckets split evenly
     * over dp_size ranks. Plain DDP packs parameters back to back without padding. */
    bool sharded;
    int64_t param_align;  /* parameter start alignment when sharded; 0 means Megatron's 64 */
    int64_t bucket_align; /* bucket end alignment is lcm(dp_size, this); 0 means 128 */
} tr_grad_layout_options;

/* The Megatron defaults for a dp_size, bucket_size and sharding choice. */
tr_grad_layout_options tr_grad_layout_defaults(int dp_size, int64_t bucket_size, bool sharded);

typedef struct tr_grad_slot {
    tr_grad_param param;
    int64_t offset; /* first element in the buffer */
    int bucket;
} tr_grad_slot;

typedef struct tr_grad_bucket {
    int64_t offset;      /* first element in the buffer */
    int64_t numel;       /* elements, padding included; a multiple of dp_size when sharded */
    int first_param;     /* the bucket holds params first_param..last_param (model order) */
    int last_param;      /* inclusive; placed in the buffer from last_param down */
    int64_t shard_numel; /* numel / dp_size when sharded, else numel */
} tr_grad_bucket;

typedef struct tr_grad_layout {
    tr_grad_layout_options opt;
    int n_params;
    tr_grad_slot *params; /* model order */
    int n_buckets;
    tr_grad_bucket *buckets; /* buffer order: bucket 0 at offset 0 holds the last parameters */
    int64_t numel;           /* buffer size, padding included */
    int64_t param_numel;     /* sum of the parameters' numel */
} tr_grad_layout;

/* Builds the layout. Bad input (no parameters, a non-positive numel, dp_size < 1, negative
 * alignments) is a "ddp.layout" diagnostic and TR_ERR_INVALID. */
tr_status tr_grad_layout_build(tr_grad_layout *L, const tr_grad_param *params, int n_params,
                               const tr_grad_layout_options *opt, tr_diags *diags);
void tr_grad_layout_free(tr_grad_layout *L);

/* A contiguous run of buffer elements owned by one rank and belonging to one parameter. */
typedef struct tr_grad_range {
    int param;
    int bucket;
    int64_t offset;       /* in the buffer */
    int64_t numel;        /* elements */
    int64_t param_offset; /* first element inside the (flattened) parameter */
    int64_t state_offset; /* position in this rank's optimizer state (m, v) */
} tr_grad_range;

/* What one rank owns: with sharding, its slice of every bucket (padding excluded from the ranges
 * but counted in state_numel); without, every parameter whole. Ranges are in buffer order. */
typedef struct tr_grad_owned {
    int rank;
    int n_ranges;
    tr_grad_range *ranges;
    int64_t state_numel;   /* elements of optimizer state this rank keeps */
    int64_t *bucket_state; /* per bucket: where its slice starts in the state */
} tr_grad_owned;

tr_status tr_grad_owned_build(tr_grad_owned *o, const tr_grad_layout *L, int rank);
void tr_grad_owned_free(tr_grad_owned *o);

/* First buffer element of rank's slice of bucket b (the bucket start without sharding). */
int64_t tr_grad_bucket_shard_offset(const tr_grad_layout *L, int b, int rank);

#endif
