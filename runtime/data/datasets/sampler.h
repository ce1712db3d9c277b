/* The data cursor: Megatron's MegatronPretrainingSampler (dataloader_type "single"). Training
 * state keeps one number, consumed_samples, the count of samples all data-parallel ranks together
 * have taken. From it alone every rank knows which sample indices it reads next, so a resumed run,
 * or one restarted with a different data-parallel size, walks the same global sample sequence:
 * the samples of micro-batch k after the cursor are the global indices
 *     [consumed + k*mbs*dp, consumed + (k+1)*mbs*dp)
 * and data-parallel rank r reads the r-th run of mbs of them. */
#ifndef TR_DATA_SAMPLER_H
#define TR_DATA_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/diag.h"
#include "core/status.h"

typedef struct tr_sampler {
    int64_t total_samples;    /* length of the dataset being sampled */
    int64_t consumed_samples; /* global cursor */
    int64_t micro_batch_size;
    int64_t dp_rank, dp_size;
    bool drop_last; /* Megatron: true for training; a final short group is dropped */
} tr_sampler;

/* Checks the sampler's numbers (Megatron's asserts, as diagnostics). */
tr_status tr_sampler_check(const tr_sampler *s, tr_diags *diags);

/* The sample indices this rank reads in micro-batch k after the cursor; returns how many were
 * written to out (micro_batch_size at most), 0 once the data is exhausted. With drop_last off the
 * final group may give this rank fewer samples, or none. */
int64_t tr_sampler_micro_batch(const tr_sampler *s, int64_t k, int64_t *out);

/* A whole global batch (global_batch_size = mbs * dp * micro-batches) from the cursor: this
 * rank's indices, micro-batch after micro-batch, into out (global_batch_size / dp entries).
 * *n is what was written; fewer than asked means the data ran out. */
tr_status tr_sampler_global_batch(const tr_sampler *s, int64_t global_batch_size, int64_t *out,
                                  int64_t *n, tr_diags *diags);

#endif
