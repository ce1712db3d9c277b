/* numpy's legacy random stream, reproduced bit for bit: MT19937 seeded the way
 * numpy.random.RandomState(seed) seeds it, and RandomState.shuffle's Fisher-Yates walk with its
 * masked-rejection draw. Megatron shuffles its document and sample indices with exactly this, so
 * matching it is what makes our sample order equal Megatron's for the same seed. */
#ifndef TR_DATA_MT19937_H
#define TR_DATA_MT19937_H

#include <stddef.h>
#include <stdint.h>

typedef struct tr_mt19937 {
    uint32_t key[624];
    int pos;
} tr_mt19937;

/* RandomState(seed) for an integer seed in [0, 2^32). */
void tr_mt19937_seed(tr_mt19937 *s, uint32_t seed);
uint32_t tr_mt19937_next32(tr_mt19937 *s);
/* numpy's 64-bit draw from MT19937: two 32-bit outputs, the first one high. */
uint64_t tr_mt19937_next64(tr_mt19937 *s);
/* numpy's random_interval: uniform in [0, max] by masking and rejecting. */
uint64_t tr_mt19937_interval(tr_mt19937 *s, uint64_t max);

/* RandomState.shuffle of a 1-D array: the permutation depends only on n, so one routine per
 * element width serves every dtype of that width. */
void tr_mt19937_shuffle_i32(tr_mt19937 *s, int32_t *x, size_t n);
void tr_mt19937_shuffle_i64(tr_mt19937 *s, int64_t *x, size_t n);

#endif
