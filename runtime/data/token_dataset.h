/* What the training loop reads: fixed-length token samples from a train, validation and test
 * split. A sample is seq + 1 tokens (inputs are the first seq, labels the last seq), as
 * Megatron's GPTDataset with add_extra_token_to_sequence. Sample indices of the train split may
 * run past one epoch: each epoch visits every sample once, in a seeded order. Each source
 * (runtime/data/dataset_*.h) fills this interface. */
#ifndef TR_RUNTIME_TOKEN_DATASET_H
#define TR_RUNTIME_TOKEN_DATASET_H

#include <stdint.h>

#include "core/diag.h"

#include "runtime/data/datasets/gpt_dataset.h" /* TR_SPLIT_TRAIN / _VALID / _TEST, shared with the data library */

/* One training sequence of fine-tuning data, every array [seq]: input ids, targets (-1 where the
 * loss mask is 0: prompt, padding), the first position of each token's document (packed
 * sequences attend within their document) and the token's position in its document (RoPE and
 * learned positions restart there, as in Megatron's packed THD format). */
typedef struct tr_token_sequence {
    int32_t *ids, *targets, *doc_start, *pos;
} tr_token_sequence;

typedef struct tr_token_dataset tr_token_dataset;
struct tr_token_dataset {
    int seq;
    int32_t eod; /* end-of-document id, or -1 when the data has none */
    int64_t n_samples[3];
    uint64_t seed;
    /* Writes seq + 1 tokens of sample `index` (any index >= 0 for a non-empty split). */
    tr_status (*sample)(const tr_token_dataset *ds, int split, int64_t index, int32_t *out);
    /* Fine-tuning data fills this instead (sample is then NULL); NULL for pretraining data. */
    tr_status (*sequence)(const tr_token_dataset *ds, int split, int64_t index,
                          const tr_token_sequence *out);
    void (*destroy)(tr_token_dataset *ds);
    void *impl;
};

/* dataset.split ("98,2,0") as three fractions summing to 1; NULL gives `fallback`. */
tr_status tr_train_data_split(const char *split, const char *fallback, double out[3], tr_diags *d);

/* The epoch-shuffled position of train sample `index` among n: a seeded affine bijection of
 * [0, n) per epoch (cheap, no index table, identical on every rank). */
int64_t tr_train_data_shuffle(int64_t index, int64_t n, uint64_t seed);

#endif
