#include "runtime/data/datasets/mock_rng.h"

__extension__ typedef unsigned __int128 u128;

/* SeedSequence constants (numpy/random/bit_generator.pyx). */
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_L  0xca01f9ddu
#define SS_MIX_R  0x4973f715u
#define SS_POOL   4

static uint32_t hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= SS_MULT_A;
    value *= *hash_const;
    return value ^ (value >> 16);
}

static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = SS_MIX_L * x - SS_MIX_R * y;
    return r ^ (r >> 16);
}

/* SeedSequence(seed).generate_state(4, uint64) as 8 little-endian 32-bit words. */
static void seed_sequence_state(uint32_t seed, uint32_t words[8]) {
    uint32_t pool[SS_POOL], hash_const = SS_INIT_A;
    for (int i = 0; i < SS_POOL; i++) pool[i] = hashmix(i == 0 ? seed : 0u, &hash_const);
    for (int src = 0; src < SS_POOL; src++)
        for (int dst = 0; dst < SS_POOL; dst++)
            if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], &hash_const));
    uint32_t h = SS_INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % SS_POOL] ^ h;
        h *= SS_MULT_B;
        v *= h;
        words[i] = v ^ (v >> 16);
    }
}

static u128 pcg_mult(void) {
    return ((u128)0x2360ed051fc65da4ull << 64) | 0x4385df649fccf645ull;
}

static u128 get(uint64_t hi, uint64_t lo) {
    return ((u128)hi << 64) | lo;
}

static void step(tr_pcg64 *g) {
    u128 s = get(g->state_hi, g->state_lo) * pcg_mult() + get(g->inc_hi, g->inc_lo);
    g->state_hi = (uint64_t)(s >> 64);
    g->state_lo = (uint64_t)s;
}

void tr_pcg64_seed(tr_pcg64 *g, uint32_t seed) {
    uint32_t w[8];
    seed_sequence_state(seed, w);
    uint64_t v[4];
    for (int i = 0; i < 4; i++) v[i] = (uint64_t)w[2 * i] | ((uint64_t)w[2 * i + 1] << 32);
    u128 initstate = get(v[0], v[1]), initseq = get(v[2], v[3]);
    u128 inc = (initseq << 1) | 1u;
    g->inc_hi = (uint64_t)(inc >> 64);
    g->inc_lo = (uint64_t)inc;
    g->state_hi = g->state_lo = 0;
    step(g);
    u128 s = get(g->state_hi, g->state_lo) + initstate;
    g->state_hi = (uint64_t)(s >> 64);
    g->state_lo = (uint64_t)s;
    step(g);
    g->has_u32 = false;
    g->u32 = 0;
}

uint64_t tr_pcg64_next64(tr_pcg64 *g) {
    step(g);
    uint64_t x = g->state_hi ^ g->state_lo;
    unsigned rot = (unsigned)(g->state_hi >> 58);
    return (x >> rot) | (x << ((64u - rot) & 63u));
}

uint32_t tr_pcg64_next32(tr_pcg64 *g) {
    if (g->has_u32) {
        g->has_u32 = false;
        return g->u32;
    }
    uint64_t x = tr_pcg64_next64(g);
    g->has_u32 = true;
    g->u32 = (uint32_t)(x >> 32);
    return (uint32_t)x;
}

int32_t tr_pcg64_integers_i32(tr_pcg64 *g, int32_t low, int32_t high) {
    uint32_t rng = (uint32_t)((int64_t)high - low - 1); /* inclusive span, as numpy computes it */
    if (rng == 0) return low;
    uint32_t excl = rng + 1;
    uint64_t m = (uint64_t)tr_pcg64_next32(g) * excl;
    uint32_t leftover = (uint32_t)m;
    if (leftover < excl) {
        uint32_t threshold = (UINT32_MAX - rng) % excl;
        while (leftover < threshold) {
            m = (uint64_t)tr_pcg64_next32(g) * excl;
            leftover = (uint32_t)m;
        }
    }
    return (int32_t)((int64_t)low + (int64_t)(m >> 32));
}
