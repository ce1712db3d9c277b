/* Philox-4x32-10 (Salmon et al., SC'11): a counter-based generator, so dropout masks can be
 * regenerated from (seed, element index) in backward instead of being stored, and a CUDA thread
 * can produce exactly the bits the CPU does for the same element. */
#ifndef TR_KERNELS_PHILOX_H
#define TR_KERNELS_PHILOX_H

#include <stdint.h>

#include "kernels/common/hostdev.h"

typedef struct tr_philox4 {
    uint32_t v[4];
} tr_philox4;

/* The whole 128-bit counter (c0 the lowest word) under a 64-bit key. */
TR_HOST_DEVICE tr_philox4 tr_philox4x32_10_ctr(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                               uint64_t seed) {
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    tr_philox4 out = {{c0, c1, c2, c3}};
    return out;
}

/* A 64-bit counter: the upper two words are 0 (every draw but attention dropout's). */
TR_HOST_DEVICE tr_philox4 tr_philox4x32_10(uint64_t counter, uint64_t seed) {
    return tr_philox4x32_10_ctr((uint32_t)counter, (uint32_t)(counter >> 32), 0, 0, seed);
}

/* Uniform in [0,1) for global element index e: four elements share one Philox call, so
 * shards that split a tensor at any element offset still see identical bits. */
TR_HOST_DEVICE float tr_philox_uniform(uint64_t seed, uint64_t e) {
    tr_philox4 r = tr_philox4x32_10(e >> 2, seed);
    return (float)(r.v[e & 3] >> 8) * (1.0f / 16777216.0f);
}

#endif
