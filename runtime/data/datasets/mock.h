/* Megatron's MockGPTLowLevelDataset: 100000 documents whose lengths come from
 * numpy.random.default_rng(0).integers(1, 4096, int32); document i is 1, 2, ..., len-1 (mod the
 * vocabulary) followed by the end-of-document id. Same documents as Megatron, so a mock run feeds
 * the model the same tokens here and there. */
#ifndef TR_DATA_MOCK_H
#define TR_DATA_MOCK_H

#include <stdint.h>

#include "core/status.h"

enum { TR_MOCK_DOCUMENTS = 100000, TR_MOCK_MAX_LENGTH = 4096, TR_MOCK_SEED = 0 };

/* Fills lengths[TR_MOCK_DOCUMENTS]. */
void tr_mock_lengths(int32_t *lengths);
/* Tokens [offset, offset+count) of a mock document of the given length. */
void tr_mock_tokens(int32_t length, int64_t vocab_size, int64_t eod, int64_t offset, int64_t count,
                    int64_t *out);

#endif
