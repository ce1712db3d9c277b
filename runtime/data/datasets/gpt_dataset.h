/* Megatron's GPTDataset over one low-level dataset: the document index, sample index and shuffle
 * index built exactly as megatron-core builds them (reference megatron-core.md §8.2, docs/data.md
 * "GPT dataset indices"), so that sample i here holds the same tokens as Megatron's sample i for
 * the same data, split, seed, sequence length and sample count. */
#ifndef TR_DATA_GPT_DATASET_H
#define TR_DATA_GPT_DATASET_H

#include <stdbool.h>
#include <stdint.h>

#include "core/diag.h"
#include "core/status.h"
#include "runtime/data/datasets/index_cache.h"
#include "runtime/data/datasets/indexed_dataset.h"

enum { TR_SPLIT_TRAIN = 0, TR_SPLIT_VALID = 1, TR_SPLIT_TEST = 2, TR_N_SPLITS = 3 };
const char *tr_split_name(int split); /* "train", "valid", "test" */

/* A low-level dataset: an opened indexed dataset or Megatron's mock generator. Megatron's GPT
 * dataset treats each sequence as a document, so `lengths` has one entry per sequence. */
typedef struct tr_gpt_lowlevel {
    char *name; /* the prefix, or "mock" */
    bool is_mock;
    tr_indexed_dataset indexed;
    int32_t *lengths;
    int64_t n;
    int64_t mock_vocab, mock_eod;
    uint64_t identity; /* xxHash3 of dtype, count and lengths: part of every cache key */
} tr_gpt_lowlevel;

tr_status tr_gpt_lowlevel_open(tr_gpt_lowlevel *ll, const char *prefix, tr_diags *diags);
tr_status tr_gpt_lowlevel_mock(tr_gpt_lowlevel *ll, int64_t vocab_size, int64_t eod,
                               tr_diags *diags);
void tr_gpt_lowlevel_close(tr_gpt_lowlevel *ll);
/* Tokens [offset, offset+count) of sequence i as int64. */
tr_status tr_gpt_lowlevel_read(const tr_gpt_lowlevel *ll, int64_t i, int64_t offset, int64_t count,
                               int64_t *out);

/* Everything besides the data that decides the indices and the sample contents. */
typedef struct tr_gpt_params {
    uint32_t seed;                     /* dataset.random_seed */
    int64_t seq_length;                /* dataset.seq_length */
    int add_extra_token;               /* dataset.add_extra_token_to_sequence (0 or 1) */
    bool drop_last_partial_validation; /* dataset.drop_last_partial_validation_sequence */
    int64_t eod;                       /* tokenizer end-of-document id */
    int64_t pad;                       /* tokenizer pad id, or -1 (Megatron's default) */
    bool reset_position_ids, reset_attention_mask, eod_mask_loss;
} tr_gpt_params;

/* Megatron's split string ("969,30,1"; missing entries are 0) to [begin, end) fractions per
 * split; present[i] is false where Megatron's split matrix has None. */
tr_status tr_split_parse(const char *split, double bounds[TR_N_SPLITS][2],
                         bool present[TR_N_SPLITS], tr_diags *diags);
/* The documents [*beg, *end) of n that a split gets: Python's round(), half to even. */
void tr_split_range(const double bounds[2], int64_t n, int64_t *beg, int64_t *end);

typedef struct tr_gpt_dataset {
    const tr_gpt_lowlevel *low;
    int split;
    int64_t beg, end;    /* documents of low exposed by this dataset */
    int64_t num_samples; /* requested (-1: one epoch, Megatron's None) */
    tr_gpt_params params;
    int32_t *document_index;
    int64_t n_document;
    int64_t *sample_index; /* (n_samples + 1) pairs (position in document_index, token offset) */
    int64_t n_sample_rows;
    int64_t *shuffle_index;
    int64_t n_samples;
    int64_t num_epochs;
    bool separate_final_epoch;
    uint64_t key;
} tr_gpt_dataset;

/* Builds (or loads from / saves to cache_dir per mode) the indices of documents [beg, end) of
 * low. cache_dir may be NULL with TR_INDEX_NO_CACHE. */
tr_status tr_gpt_dataset_build(tr_gpt_dataset *d, const tr_gpt_lowlevel *low, int split,
                               int64_t beg, int64_t end, int64_t num_samples,
                               const tr_gpt_params *params, const char *cache_dir,
                               tr_index_cache_mode mode, tr_diags *diags);
void tr_gpt_dataset_free(tr_gpt_dataset *d);

/* Sample i (after shuffling): seq_length + add_extra_token token ids, padded with params.pad. */
tr_status tr_gpt_dataset_text(const tr_gpt_dataset *d, int64_t i, int64_t *text);

/* A training sample as Megatron's GPTDataset.__getitem__ returns it, without the dense attention
 * mask: with reset_attention_mask the document boundaries are the end-of-document positions,
 * which the attention op reads from tokens. Arrays hold seq_length entries. */
typedef struct tr_gpt_sample {
    int64_t *tokens, *labels, *position_ids;
    float *loss_mask;
} tr_gpt_sample;
void tr_gpt_make_sample(const int64_t *text, const tr_gpt_params *p, tr_gpt_sample *out);

/* Megatron's reset_attention_mask as the attention op's per-token document start (kernels/ops.h
 * tr_attn_desc.doc_start): a token after an end-of-document at position i sees nothing at or
 * before i, so doc_start[t] = 1 + the last end-of-document position before t, or 0. */
void tr_gpt_doc_start(const int64_t *tokens, int64_t n, int64_t eod, int32_t *doc_start);

#endif
