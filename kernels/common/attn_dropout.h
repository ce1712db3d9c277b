/* The attention-dropout mask: whether probability P[q, k] of one (batch row, head) of one layer's
 * attention in one microbatch round is kept. The CPU op and both CUDA paths draw it from here, so
 * every backend keeps the same entries, and the backward regenerates the forward's mask instead
 * of storing a [T, T] tensor per head.
 *
 * The draw depends on global coordinates only: the seed, the microbatch round (the global
 * microbatch, so DP ranks draw the single-rank run's masks), the global layer (pipeline stages),
 * the batch row, the GLOBAL head (tensor-parallel ranks hold other heads) and the global query
 * and key positions (context parallelism will split sequences, not change the mask).
 *
 * Philox-4x32-10 counter: (key / 2, query / 2, 1 << 31 | layer << 16 | head, batch row);
 * generator key: seed ^ (round * an odd constant), a bijection of the round. Hidden and adapter
 * dropout use counters whose upper two words are 0, so the top bit of the third word keeps these
 * draws apart from theirs. One call covers a 2 x 2 block, (query & 1) * 2 + (key & 1) naming the
 * word: the block a lane of a tensor-core fragment and its neighbour share (adjacent keys and
 * rows in forward and dQ, adjacent queries and keys in dK/dV), so each call feeds four entries
 * there. Each entry's 24-bit uniform is compared with p as hidden dropout compares (kept when
 * uniform >= p). */
#ifndef TR_KERNELS_ATTN_DROPOUT_H
#define TR_KERNELS_ATTN_DROPOUT_H

#include <stdint.h>

#include "kernels/common/philox.h"

/* The coordinates the counter has room for. */
#define TR_ATTN_DROP_MAX_LAYERS 32768
#define TR_ATTN_DROP_MAX_HEADS  65536

/* The part of the counter fixed for one (round, layer, batch row, head). */
typedef struct tr_attn_drop_stream {
    uint64_t key;
    uint32_t c2, c3;
} tr_attn_drop_stream;

TR_HOST_DEVICE tr_attn_drop_stream tr_attn_drop_stream_of(uint64_t seed, uint64_t round, int layer,
                                                          int head, int row) {
    tr_attn_drop_stream s;
    s.key = seed ^ (round * 0x9E3779B97F4A7C15ull);
    s.c2 = 0x80000000u | ((uint32_t)layer << 16) | (uint32_t)head;
    s.c3 = (uint32_t)row;
    return s;
}

/* The draws of the 2 x 2 block holding (query, key). */
TR_HOST_DEVICE tr_philox4 tr_attn_drop_draw(tr_attn_drop_stream s, int query, int key) {
    return tr_philox4x32_10_ctr((uint32_t)key >> 1, (uint32_t)query >> 1, s.c2, s.c3, s.key);
}

/* The word of that block that is (query, key)'s. */
TR_HOST_DEVICE int tr_attn_drop_word(int query, int key) {
    return (query & 1) * 2 + (key & 1);
}

/* The smallest 24-bit draw that is kept for drop probability p: the uniform (draw >> 8) * 2^-24
 * is >= p exactly when draw >> 8 >= this (p * 2^24 is exact in float, so no rounding enters). */
TR_HOST_DEVICE uint32_t tr_attn_drop_threshold(float p) {
    float x = p * 16777216.0f;
    uint32_t n = (uint32_t)x;
    return (float)n < x ? n + 1u : n;
}

/* Whether an op's dropout arguments are usable: 0 < p < 1 and the layer and the heads
 * [head_offset, head_offset + heads) of heads_total (0: heads) within the counter's room. */
TR_HOST_DEVICE int tr_attn_drop_args_ok(float p, int layer, int head_offset, int heads,
                                        int heads_total) {
    int total = heads_total ? heads_total : heads;
    return p > 0.0f && p < 1.0f && layer >= 0 && layer < TR_ATTN_DROP_MAX_LAYERS &&
           head_offset >= 0 && heads > 0 && total <= TR_ATTN_DROP_MAX_HEADS &&
           head_offset <= total - heads;
}

/* Whether (query, key) of its block's draw r is kept. */
TR_HOST_DEVICE int tr_attn_drop_kept(tr_philox4 r, int query, int key, uint32_t threshold) {
    return (r.v[tr_attn_drop_word(query, key)] >> 8) >= threshold;
}

/* The keep bits of a whole block: bit w for word w. */
TR_HOST_DEVICE unsigned tr_attn_drop_bits(tr_philox4 r, uint32_t threshold) {
    return (unsigned)((r.v[0] >> 8) >= threshold) | (unsigned)((r.v[1] >> 8) >= threshold) << 1 |
           (unsigned)((r.v[2] >> 8) >= threshold) << 2 |
           (unsigned)((r.v[3] >> 8) >= threshold) << 3;
}

#endif
