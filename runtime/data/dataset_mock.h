/* Megatron's mock GPT data: 100000 documents with lengths drawn uniformly from [1, 4096),
 * document tokens (k + 1) % vocab for k = 0, 1, ... and an end-of-document token last,
 * concatenated and cut into samples; the documents are divided among the splits by the split
 * fractions. Lengths come from a counter-based generator keyed by the seed, so the data is a
 * pure function of (seed, vocab, seq, split). */
#ifndef TR_RUNTIME_DATASET_MOCK_H
#define TR_RUNTIME_DATASET_MOCK_H

#include "core/config.h"
#include "runtime/data/token_dataset.h"

tr_status tr_dataset_mock_open(tr_token_dataset *ds, int seq, int vocab, int32_t eod, uint64_t seed,
                               const double split[3]);

#endif
