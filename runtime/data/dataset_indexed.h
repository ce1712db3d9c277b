/* Megatron-prepared data (.bin/.idx prefixes, blends, per-split blends) as the training loop's
 * token dataset. Sample i of a split holds exactly the tokens of sample i of Megatron's top-level
 * dataset built from the same config: GPTDataset indices, BlendedDataset order, split string,
 * dataset.random_seed, dataset.seq_length and the sample counts Megatron's builder asks for
 * (train.train_samples or train_iters * global_batch_size; (train_iters / eval_interval + 1) *
 * eval_iters * global_batch_size; eval_iters * global_batch_size). n_samples[split] is the length
 * of that dataset (0 for a split Megatron builds nothing for); indices past it wrap around.
 *
 * Index cache and ranks: the indices are cached under dataset.path_to_cache, or, when it is null,
 * in Megatron's default <prefix>/cache/GPTDataset_indices next to each dataset. The rank that
 * opens with build_indices = true (rank 0, or a single process) loads the entries that exist and
 * builds and writes the missing ones; the caller then runs a barrier; every other rank opens with
 * build_indices = false and only reads what rank 0 wrote (data.cache_missing if an entry is
 * absent, never a silent rebuild). The cache directory must be shared by the ranks.
 *
 * Not carried yet: the token interface passes tokens only, no loss mask or position ids, so
 * dataset.reset_position_ids, reset_attention_mask and eod_mask_loss set to true, and
 * add_extra_token_to_sequence=false or drop_last_partial_validation_sequence=false (which need a
 * pad-aware loss mask), are refused with runtime.unsupported rather than trained differently from
 * Megatron. A token outside [0, model vocabulary) makes sample() fail (and log which). */
#ifndef TR_RUNTIME_DATASET_INDEXED_H
#define TR_RUNTIME_DATASET_INDEXED_H

#include <stdbool.h>

#include "core/config.h"
#include "runtime/data/token_dataset.h"

/* dataset.type must be gpt with dataset.data_path (+ dataset.split) or the per-split paths. */
tr_status tr_indexed_token_dataset_open(const tr_config *c, bool build_indices,
                                        tr_token_dataset *ds, tr_diags *d);

/* The documents sample `index` of `split` of an indexed (or mock) token dataset is cut from, in
 * order: up to max ids into *n, of the low-level dataset *name (its prefix, or "mock"); for
 * run_recipe --dump-samples. TR_ERR_INVALID for a dataset this function did not open. */
tr_status tr_indexed_token_dataset_docs(const tr_token_dataset *ds, int split, int64_t index,
                                        int64_t *docs, int max, int *n, const char **name);

#endif
