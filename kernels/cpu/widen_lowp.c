/* tr_ops.widen_lowp on the CPU: half-precision bit patterns back to fp32. Each value is exact in
 * fp32, so the blocks the pool splits the work into cannot change the result. */
#include <stdbool.h>

#include "kernels/common/lowp_bits.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threadpool.h"

enum { BLOCK = 4096 };

typedef struct widen_ctx {
    float *dst;
    const uint16_t *src;
    bool bf16;
} widen_ctx;

static void widen_blocks(void *vctx, int64_t b0, int64_t b1) {
    widen_ctx *c = vctx;
    for (int64_t i = b0 * BLOCK; i < b1 * BLOCK; i++) c->dst[i] = tr_lowp_value(c->bf16, c->src[i]);
}

tr_status tr_cpu_widen_lowp(tr_lowp dtype, float *dst, const uint16_t *src, int64_t n) {
    if ((dtype != TR_LOWP_BF16 && dtype != TR_LOWP_F16) || n < 0 || (n && (!dst || !src)))
        return TR_ERR_INVALID;
    const char *d = (const char *)dst, *s = (const char *)src;
    if (n && d < s + n * (int64_t)sizeof *src && s < d + n * (int64_t)sizeof *dst)
        return TR_ERR_INVALID;
    widen_ctx c = {.dst = dst, .src = src, .bf16 = dtype == TR_LOWP_BF16};
    int64_t full = n / BLOCK;
    if (full > 0) tr_cpu_parallel_for(full, 16, widen_blocks, &c);
    for (int64_t i = full * BLOCK; i < n; i++) dst[i] = tr_lowp_value(c.bf16, src[i]);
    return TR_OK;
}
