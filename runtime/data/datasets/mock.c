#include "runtime/data/datasets/mock.h"

#include "runtime/data/datasets/mock_rng.h"

void tr_mock_lengths(int32_t *lengths) {
    tr_pcg64 g;
    tr_pcg64_seed(&g, TR_MOCK_SEED);
    for (int i = 0; i < TR_MOCK_DOCUMENTS; i++)
        lengths[i] = tr_pcg64_integers_i32(&g, 1, TR_MOCK_MAX_LENGTH);
}

void tr_mock_tokens(int32_t length, int64_t vocab_size, int64_t eod, int64_t offset, int64_t count,
                    int64_t *out) {
    for (int64_t k = 0; k < count; k++) {
        int64_t pos = offset + k;
        out[k] = pos == length - 1 ? eod : (pos + 1) % vocab_size;
    }
}
