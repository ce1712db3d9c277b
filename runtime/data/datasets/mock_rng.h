/* numpy.random.default_rng(seed).integers(low, high, dtype=int32), reproduced bit for bit:
 * SeedSequence entropy mixing, the PCG64 (XSL-RR 128/64) generator it seeds, the buffered 32-bit
 * draws and Lemire's bounded-integer rejection. Megatron's mock dataset draws its document lengths
 * this way, so our mock data has the same documents as Megatron's. */
#ifndef TR_DATA_MOCK_RNG_H
#define TR_DATA_MOCK_RNG_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tr_pcg64 {
    uint64_t state_hi, state_lo, inc_hi, inc_lo;
    bool has_u32;
    uint32_t u32;
} tr_pcg64;

/* default_rng(seed) for a seed in [0, 2^32). */
void tr_pcg64_seed(tr_pcg64 *g, uint32_t seed);
uint64_t tr_pcg64_next64(tr_pcg64 *g);
uint32_t tr_pcg64_next32(tr_pcg64 *g);
/* Generator.integers(low, high) with dtype int32: uniform in [low, high). */
int32_t tr_pcg64_integers_i32(tr_pcg64 *g, int32_t low, int32_t high);

#endif
