/* The export's fp32 -> bf16 conversion (runtime/hf/bf16.c) against an oracle of its own: the
 * nearer of the two bf16 neighbours by exact arithmetic in double, the even one on a tie, inf
 * past the largest finite value, NaN as 0x7fff. Checked on every special pattern, the ties and
 * their neighbours in each binade, and random bit patterns, at every length modulo the vector
 * width; and bit for bit against tr_bf16_bits, the scalar encoding the export used before. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/lowp_bits.h"
#include "runtime/hf/internal.h"
#include "tests/unit/harness.h"

static float of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint16_t oracle(uint32_t u) {
    float x = of(u);
    if (isnan(x)) return 0x7fff;
    if (isinf(x)) return (uint16_t)(u >> 16);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u; /* toward zero, away from zero */
    double dx = fabs((double)x), dl = fabs((double)of(lo));
    /* hi's pattern past the largest finite binade is inf: 0x7f7f... rounds up to 2^128 */
    double dh = (hi & 0x7fffffffu) == 0x7f800000u ? ldexp(1.0, 128) : fabs((double)of(hi));
    if (dx - dl < dh - dx) return (uint16_t)(lo >> 16);
    if (dx - dl > dh - dx) return (uint16_t)(hi >> 16);
    return (uint16_t)((lo >> 16) & 1u ? hi >> 16 : lo >> 16);
}

static void test_bf16_matches_the_oracle(void) {
    enum { N = 1 << 16 };
    uint32_t *u = malloc(N * sizeof *u);
    uint16_t *got = malloc(N * sizeof *got);
    float *x = malloc(N * sizeof *x);
    int n = 0;
    const uint32_t special[] = {0,           0x80000000u, 1,           0x80000001u, 0x007fffffu,
                                0x00800000u, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u, 0x7f7f7fffu,
                                0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu,
                                0xffffffffu, 0x3f808000u, 0x3f818000u};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) u[n++] = special[i];
    for (uint32_t e = 0; e < 256; e++) /* ties and their neighbours, both lsb parities */
        for (uint32_t m = 0x7fffu; m <= 0x18001u; m += 0x8000u) {
            u[n++] = e << 23 | m;
            u[n++] = 0x80000000u | e << 23 | m;
            u[n++] = e << 23 | (m + 1);
        }
    uint64_t r = 0x9e3779b97f4a7c15u;
    while (n < N) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        u[n++] = (uint32_t)(r >> 11);
    }
    memcpy(x, u, N * sizeof *u);
    int bad = 0;
    for (int len = N - 9; len <= N; len++) { /* every tail the vector loop leaves */
        memset(got, 0xa5, N * sizeof *got);
        tr_hf_bf16_from_f32(got, x, len);
        for (int i = 0; i < len && bad < 5; i++)
            if (got[i] != oracle(u[i]) || got[i] != tr_bf16_bits(x[i])) {
                fprintf(stderr, "  %08x: got %04x, oracle %04x, tr_bf16_bits %04x\n", u[i], got[i],
                        oracle(u[i]), tr_bf16_bits(x[i]));
                bad++;
            }
        CHECK(len == N || got[len] == 0xa5a5); /* nothing written past n */
    }
    CHECK_INT_EQ(bad, 0);
    free(u), free(got), free(x);
}

TR_TEST_MAIN(TR_TEST(test_bf16_matches_the_oracle))
