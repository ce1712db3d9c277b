#include "runtime/data/datasets/mt19937.h"

enum { MT_N = 624, MT_M = 397 };

void tr_mt19937_seed(tr_mt19937 *s, uint32_t seed) {
    s->key[0] = seed;
    for (int i = 1; i < MT_N; i++)
        s->key[i] = 1812433253u * (s->key[i - 1] ^ (s->key[i - 1] >> 30)) + (uint32_t)i;
    s->pos = MT_N;
}

static void regenerate(tr_mt19937 *s) {
    const uint32_t upper = 0x80000000u, lower = 0x7fffffffu, matrix = 0x9908b0dfu;
    for (int i = 0; i < MT_N; i++) {
        uint32_t y = (s->key[i] & upper) | (s->key[(i + 1) % MT_N] & lower);
        s->key[i] = s->key[(i + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? matrix : 0u);
    }
    s->pos = 0;
}

uint32_t tr_mt19937_next32(tr_mt19937 *s) {
    if (s->pos >= MT_N) regenerate(s);
    uint32_t y = s->key[s->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint64_t tr_mt19937_next64(tr_mt19937 *s) {
    uint64_t hi = tr_mt19937_next32(s);
    return hi << 32 | tr_mt19937_next32(s);
}

uint64_t tr_mt19937_interval(tr_mt19937 *s, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    for (int shift = 1; shift <= 32; shift *= 2) mask |= mask >> shift;
    uint64_t v;
    if (max <= 0xffffffffu) {
        do v = tr_mt19937_next32(s) & mask;
        while (v > max);
    } else {
        do v = tr_mt19937_next64(s) & mask;
        while (v > max);
    }
    return v;
}

#define TR_DEFINE_SHUFFLE(name, type)                                                              \
    void name(tr_mt19937 *s, type *x, size_t n) {                                                  \
        for (size_t i = n; i-- > 1;) {                                                             \
            size_t j = (size_t)tr_mt19937_interval(s, i);                                          \
            type t = x[i];                                                                         \
            x[i] = x[j];                                                                           \
            x[j] = t;                                                                              \
        }                                                                                          \
    }
TR_DEFINE_SHUFFLE(tr_mt19937_shuffle_i32, int32_t)
TR_DEFINE_SHUFFLE(tr_mt19937_shuffle_i64, int64_t)
