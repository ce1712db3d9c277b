/* Causal GQA attention on tensor cores (desc->lowp: bf16 or fp16 operands, fp32 accumulation),
 * the FlashAttention-2 schedule with mma.sync.m16n8k16 through inline PTX. Same contract, masks
 * and lse as the fp32 kernels of attention.cu, which own the checks and the di vector.
 *
 * Fragment layouts are those of kernels/common/mma_layout.h (checked on the CPU by
 * tests/unit/kernels/test_mma_layout.c); every shared-memory address below is derived from them:
 *  - an A operand (rows x k) is read from a row-major tile [row][k]: a register's two halves are
 *    neighbours along k, so one aligned 32-bit load fills it;
 *  - a B operand (k x n) is read from a tile stored [n][k] (n-major), for the same reason. For
 *    S = Q K^T that is K row-major ([key][dim]); for O += P V it is V transposed ([dim][key]);
 *  - the C fragments of two adjacent n8 tiles of S hold exactly the A fragment of one k16 step of
 *    P V, so P goes from the softmax to the next product without leaving registers.
 * Rows of every tile are padded by 8 halves (16 bytes): with row strides of D/2 + 4 or 36 / 20
 * words, the 8 groups x 4 lanes of a fragment load hit 32 distinct banks.
 *
 * Forward: a CTA of 8 warps owns 128 query rows of one (batch, head), 16 per warp, Q fragments in
 * registers for the whole row block. Key tiles of 64 run from the block's first document start
 * (rounded down to a tile) to its last query (causal) or T; a warp whose rows all precede a tile
 * skips it. Scores are kept in the log2 domain (scale * log2(e) folded in) so the exponentials
 * are exp2; lse is converted back to the natural log of the scaled scores, the quantity the CPU
 * op and both backwards define.
 *
 * Backward, without atomics, so deterministic as the SIMT kernels: kernel dkv owns 64 keys of one
 * KV group and loops over the group's heads and the query tiles that can see them (S^T = K Q^T,
 * P^T, dV += P^T dO, dP^T = V dO^T, dS^T, dK += dS^T Q); kernel dq owns 64 query rows of a head
 * and loops over key tiles (S, P, dP = dO V^T, dS, dQ += dS K). Seven tile products instead of
 * five (S and dP are computed twice), but each output element has one writer and no fp32 dQ
 * accumulator is needed. Query (dkv) and key (dq) tiles are 32 for head_dim 128 and 64 below, to
 * keep the two fp32 accumulators plus S and dP within the register file (docs/cuda.md lists the
 * registers per kernel; none spills at head_dim 32 and above).
 *
 * Dropout (desc->dropout): the probabilities going into P V (forward) and P^T dO (dkv) are
 * zeroed where the mask of kernels/common/attn_dropout.h drops them, after the row sum has
 * taken them, and the 1/(1-p) of the kept ones is applied to the fp32 results (O, dV), so the
 * rounded P fragments are those of the undropped run; dP is multiplied by the mask in fp32
 * before dS = P (dP - di). One Philox call per lane and n8 tile (tc_drop_bits).
 *
 * Kernel bodies only, in an anonymous namespace: attention_tc.cu (the launchers) includes this
 * header, and so does the host emulator of tests/emu, which compiles the same code as C++. */
#ifndef TR_CUDA_ATTENTION_TC_KERNELS_CUH
#define TR_CUDA_ATTENTION_TC_KERNELS_CUH

#include <string.h>

#include "kernels/common/mma_layout.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/smem.cuh"

namespace {

constexpr int TC_WARPS = 4;
constexpr int TC_THREADS = TC_WARPS * 32;
constexpr int TC_ROWS = 16 * TC_WARPS; /* rows a CTA owns: queries (dq) or keys (dkv); key tile */
/* The forward's CTA: 8 warps, 128 query rows, so each staged K/V tile of TC_ROWS keys serves
 * twice the rows of the backward kernels (whose fp32 accumulators leave no room for that). */
constexpr int FW_WARPS = 8;
constexpr int FW_THREADS = FW_WARPS * 32;
constexpr int FW_ROWS = 16 * FW_WARPS;
constexpr int TC_PAD = 8; /* halves appended to each shared-memory row */
constexpr float TC_LOG2E = 1.4426950408889634f;
constexpr float TC_LN2 = 0.6931471805599453f;

/* The secondary tile (keys for dq, queries for dkv): 32 for head_dim 128, else 64. */
template <int D> struct tc_tile { static constexpr int N = D > 64 ? 32 : 64; };

template <typename H> struct half_ops;

template <> struct half_ops<__nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 from(float x) {
        return __float2bfloat16_rn(x);
    }
    /* lo lands in the low 16 bits, the lower-indexed element of a fragment register */
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        uint32_t u;
        memcpy(&u, &v, sizeof u);
        return u;
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        tr_mma_16816_bf16(c, a, b0, b1);
    }
};

template <> struct half_ops<__half> {
    static __device__ __forceinline__ __half from(float x) {
        return __float2half_rn(x);
    }
    static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        uint32_t u;
        memcpy(&u, &v, sizeof u);
        return u;
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1) {
        tr_mma_16816_f16(c, a, b0, b1);
    }
};

/* Two halves at an even element index of a tile (rows have an even stride, so 4-byte aligned). */
template <typename H> __device__ __forceinline__ uint32_t lds32(const H *tile, int idx) {
    return *reinterpret_cast<const uint32_t *>(tile + idx);
}

/* A fragment of rows r0..r0+15, k columns k0..k0+15 of a row-major tile with row stride ld. */
template <typename H>
__device__ __forceinline__ void load_a(uint32_t a[4], const H *tile, int ld, int r0, int k0,
                                       int lane) {
#pragma unroll
    for (int r = 0; r < 4; r++) {
        tr_mma_rc rc = tr_mma_a_elem(lane, 2 * r);
        a[r] = lds32(tile, (r0 + rc.row) * ld + k0 + rc.col);
    }
}

/* B fragment of k rows k0..k0+15 and n columns n0..n0+7, from a tile stored [n][k]. */
template <typename H>
__device__ __forceinline__ void load_b(uint32_t &b0, uint32_t &b1, const H *tile, int ld, int n0,
                                       int k0, int lane) {
    tr_mma_rc lo = tr_mma_b_elem(lane, 0), hi = tr_mma_b_elem(lane, 2);
    b0 = lds32(tile, (n0 + lo.col) * ld + k0 + lo.row);
    b1 = lds32(tile, (n0 + hi.col) * ld + k0 + hi.row);
}

/* The A fragment of k16 step kk from the fp32 C fragments of n8 tiles 2kk and 2kk+1 (the FA2
 * register re-pack; mma_layout.h: register r = tile r/2, elements 2(r%2) and 2(r%2)+1). */
template <typename H>
__device__ __forceinline__ void c_to_a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = half_ops<H>::pack(c0[0], c0[1]);
    a[1] = half_ops<H>::pack(c0[2], c0[3]);
    a[2] = half_ops<H>::pack(c1[0], c1[1]);
    a[3] = half_ops<H>::pack(c1[2], c1[3]);
}

/* acc[n] += a B_n for the N n8 tiles of one k16 step (at k0) of a B tile stored [n][k]. */
template <int N, typename H>
__device__ __forceinline__ void mma_tiles(float (&acc)[N][4], const uint32_t a[4], const H *tb,
                                          int ld, int k0, int lane) {
#pragma unroll
    for (int n = 0; n < N; n++) {
        uint32_t b0, b1;
        load_b(b0, b1, tb, ld, 8 * n, k0, lane);
        half_ops<H>::mma(acc[n], a, b0, b1);
    }
}

/* Two products over the same k16 step, acc1 += a1 B1 and acc2 += a2 B2, issued tile by tile in
 * turn: the backward's order, whose registers docs/cuda.md lists. */
template <int N, typename H>
__device__ __forceinline__ void mma_tiles2(float (&acc1)[N][4], const uint32_t a1[4], const H *tb1,
                                           float (&acc2)[N][4], const uint32_t a2[4], const H *tb2,
                                           int ld, int k0, int lane) {
#pragma unroll
    for (int n = 0; n < N; n++) {
        uint32_t b0, b1;
        load_b(b0, b1, tb1, ld, 8 * n, k0, lane);
        half_ops<H>::mma(acc1[n], a1, b0, b1);
        load_b(b0, b1, tb2, ld, 8 * n, k0, lane);
        half_ops<H>::mma(acc2[n], a2, b0, b1);
    }
}

/* Four consecutive elements at p as floats, in one 16-byte (fp32) or 8-byte (bf16) load. */
__device__ __forceinline__ void ld4(const float *p, float x[4]) {
    float4 v = *reinterpret_cast<const float4 *>(p);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void ld4(const __nv_bfloat16 *p, float x[4]) {
    uint2 u = *reinterpret_cast<const uint2 *>(p);
    __nv_bfloat162 lo, hi;
    memcpy(&lo, &u.x, sizeof lo);
    memcpy(&hi, &u.y, sizeof hi);
    x[0] = __low2float(lo), x[1] = __high2float(lo), x[2] = __low2float(hi),
    x[3] = __high2float(hi);
}

/* Rows [0, n) of src (row stride `stride` elements, D contiguous) into a [ROWS][D+PAD] tile and,
 * when tt is not NULL, its transpose [D][ROWS+PAD]; rows n..ROWS-1 are zeros. One global read per
 * element; consecutive threads walk a row, so the reads are coalesced. When src is 16-byte
 * aligned every group of four elements is too (rows start at multiples of D elements, D % 16 ==
 * 0), so each thread moves four at a time: one vector load, one 8-byte store into the row-major
 * tile (its index r (D+PAD) + c is a multiple of 4). */
template <int D, int ROWS, int NTH, typename H, typename T>
__device__ __forceinline__ void stage(H *rows, H *tt, const T *src, int64_t stride, int n) {
    if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
        for (int idx = threadIdx.x; idx < ROWS * D / 4; idx += NTH) {
            const int r = idx / (D / 4), c = idx % (D / 4) * 4;
            float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (r < n) ld4(src + r * stride + c, x);
            if (rows) {
                uint2 u;
                u.x = half_ops<H>::pack(x[0], x[1]);
                u.y = half_ops<H>::pack(x[2], x[3]);
                *reinterpret_cast<uint2 *>(rows + r * (D + TC_PAD) + c) = u;
            }
            if (tt)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    tt[(c + i) * (ROWS + TC_PAD) + r] = half_ops<H>::from(x[i]);
        }
        return;
    }
    for (int idx = threadIdx.x; idx < ROWS * D; idx += NTH) {
        int r = idx / D, c = idx % D;
        H x = half_ops<H>::from(r < n ? ld(src, r * stride + c) : 0.0f);
        if (rows) rows[r * (D + TC_PAD) + c] = x;
        if (tt) tt[c * (ROWS + TC_PAD) + r] = x;
    }
}

/* Attention dropout on one n8 tile of a C fragment: the keep bits of the lane's four entries,
 * bit e for element e, whose rows are rows[0], rows[1] and whose columns are col0 and col0 + 1
 * (col0 even). Rows are queries and columns keys (S), or, keys_are_rows, the other way round
 * (S^T of dK/dV). Lane ^ 4 holds the rows of the other parity at the same columns, so the two
 * lanes' entries make two 2 x 2 blocks of the mask: each lane draws the block of its row
 * r = g & 1, and they trade the bits. Every lane of the warp must call it. */
__device__ __forceinline__ unsigned tc_drop_bits(const att_shape &s, tr_attn_drop_stream st,
                                                 const int rows[2], int col0, bool keys_are_rows,
                                                 int lane) {
    const int par = (lane >> 2) & 1; /* the parity of both rows of this lane */
    /* The mask's coordinates (even offsets, tr_attn_tc_eligible, keep every parity). */
    const int rr = (par ? rows[1] : rows[0]) + (keys_are_rows ? s.drop_k0 : s.drop_q0);
    const int cc = col0 + (keys_are_rows ? s.drop_q0 : s.drop_k0);
    const tr_philox4 d =
        keys_are_rows ? tr_attn_drop_draw(st, cc, rr) : tr_attn_drop_draw(st, rr, cc);
    const unsigned mine = tr_attn_drop_bits(d, s.drop_thr);
    const unsigned theirs = __shfl_xor_sync(0xffffffffu, mine, 4);
    unsigned out = 0;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const unsigned blk = r == par ? mine : theirs;
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int word = keys_are_rows ? 2 * c + par : 2 * par + c;
            out |= ((blk >> word) & 1u) << (2 * r + c);
        }
    }
    return out;
}

/* ---- forward ---------------------------------------------------------------------------- */

/* Q [FW_ROWS][D+PAD] first, then the K tile [TC_ROWS][D+PAD] and V^T [D][TC_ROWS+PAD] over it. */
template <int D> constexpr size_t fwd_smem() {
    constexpr size_t q = (size_t)FW_ROWS * (D + TC_PAD);
    constexpr size_t kv = (size_t)TC_ROWS * (D + TC_PAD) + (size_t)D * (TC_ROWS + TC_PAD);
    return 2 * (q > kv ? q : kv);
}

template <int D, typename H, typename T, bool DROP>
__global__ void __launch_bounds__(FW_THREADS)
    tc_fwd_kernel(T *out, float *lse, const T *q, const T *k, const T *v, att_shape s) {
    constexpr int KS = D / 16;      /* k16 steps over head_dim */
    constexpr int NT = TC_ROWS / 8; /* n8 tiles of a 64-key score tile */
    constexpr int ND = D / 8;       /* n8 tiles of an output row block */
    constexpr int LK = D + TC_PAD, LV = TC_ROWS + TC_PAD;
    TR_DYNAMIC_SMEM(__align__(16) unsigned char, tc_smem);
    H *sq = reinterpret_cast<H *>(tc_smem); /* [128][LK]: Q, until it is in registers */
    H *sk = sq;                             /* [64][LK]: then each K tile */
    H *svt = sk + TC_ROWS * LK;             /* [D][LV]: V^T of the tile */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int b = blockIdx.z, h = blockIdx.y, g = h / s.hpg;
    const int q0 = blockIdx.x * FW_ROWS, nq = min(FW_ROWS, s.T - q0);
    const int64_t kstride = (int64_t)s.G * D;

    stage<D, FW_ROWS, FW_THREADS, H>(sq, (H *)nullptr, q + q_off(s, b, q0, h), (int64_t)s.H * D,
                                     nq);
    __syncthreads();
    uint32_t qa[KS][4];
#pragma unroll
    for (int kk = 0; kk < KS; kk++) load_a(qa[kk], sq, LK, 16 * w, 16 * kk, lane);

    /* This lane's rows: C elements 0, 1 are row g of the warp's 16, elements 2, 3 row g + 8. */
    int row[2], lo[2];
    float m[2], l[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        row[r] = q0 + 16 * w + tr_mma_c_elem(lane, 2 * r).row;
        lo[r] = row[r] < s.T ? doc_lo(s, b, row[r]) : 0;
        m[r] = -INFINITY; /* running max of scaled scores, log2 units */
        l[r] = 0.0f;      /* this lane's part of the row sum; the quad's add up at the end */
    }
    float o[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const tr_attn_drop_stream dst = att_drop_stream(s, b, h);

    const float sl2 = s.scale * TC_LOG2E;
    /* Keys: none before the first query's document (starts never decrease along a row), none
     * after the last query when causal. Causal rows see key t, so kbeg < kend. */
    const int kend = s.causal ? q0 + nq : s.T;
    const int kbeg = doc_lo(s, b, q0) / TC_ROWS * TC_ROWS;
    for (int k0 = kbeg; k0 < kend; k0 += TC_ROWS) {
        const int nk = min(TC_ROWS, kend - k0);
        __syncthreads(); /* everyone is done with the previous tile (and with Q in sq) */
        stage<D, TC_ROWS, FW_THREADS, H>(sk, (H *)nullptr, k + kv_off(s, b, k0, g), kstride, nk);
        stage<D, TC_ROWS, FW_THREADS, H>((H *)nullptr, svt, v + kv_off(s, b, k0, g), kstride, nk);
        __syncthreads();
        /* Causal: a warp whose 16 rows all precede the tile sees none of it; skipping is exactly
         * the all-masked update (m, l and O unchanged). Warp-uniform, and no barrier follows
         * before the next iteration's, which every warp reaches. */
        if (s.causal && k0 > q0 + 16 * w + 15) continue;

        float sc[NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++)
#pragma unroll
            for (int j = 0; j < NT; j++) {
                uint32_t b0, b1;
                load_b(b0, b1, sk, LK, 8 * j, 16 * kk, lane);
                half_ops<H>::mma(sc[j], qa[kk], b0, b1);
            }

        /* Masks: key inside the tile's loaded rows (k0 + nk <= kend <= T), causal key <= row,
         * documents key >= doc_start[row]. Masked scores are -inf. */
        float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1, key = k0 + 8 * j + tr_mma_c_elem(lane, e).col;
                const bool ok = key < k0 + nk && (!s.causal || key <= row[r]) && key >= lo[r];
                const float x = ok ? sc[j][e] * sl2 : -INFINITY;
                sc[j][e] = x;
                mt[r] = fmaxf(mt[r], x);
            }
        float alpha[2], msub[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            /* the quad (lanes 4g..4g+3) holds the whole row */
            mt[r] = fmaxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 1));
            mt[r] = fmaxf(mt[r], __shfl_xor_sync(0xffffffffu, mt[r], 2));
            const float mnew = fmaxf(m[r], mt[r]);
            /* A row with nothing visible yet keeps m = -inf: subtract 0 instead so masked
             * entries give exp2(-inf) = 0, never exp2(-inf - -inf) = NaN; O and l are 0. */
            msub[r] = mnew == -INFINITY ? 0.0f : mnew;
            alpha[r] = exp2f(m[r] - msub[r]); /* 0 for the first visible tile, m = -inf */
            m[r] = mnew;
            l[r] *= alpha[r];
        }
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = exp2f(sc[j][e] - msub[e >> 1]);
                sc[j][e] = p;
                l[e >> 1] += p;
            }
        if (DROP)
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const unsigned kb =
                    tc_drop_bits(s, dst, row, k0 + 8 * j + 2 * (lane & 3), false, lane);
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (!((kb >> e) & 1u)) sc[j][e] = 0.0f;
            }
#pragma unroll
        for (int n = 0; n < ND; n++) {
#pragma unroll
            for (int e = 0; e < 4; e++) o[n][e] *= alpha[e >> 1];
        }
        /* O += P V: k16 step kk of the keys is score tiles 2kk and 2kk+1. */
#pragma unroll
        for (int kk = 0; kk < NT / 2; kk++) {
            uint32_t pa[4];
            c_to_a<H>(pa, sc[2 * kk], sc[2 * kk + 1]);
#pragma unroll
            for (int n = 0; n < ND; n++) {
                uint32_t b0, b1;
                load_b(b0, b1, svt, LV, 8 * n, 16 * kk, lane);
                half_ops<H>::mma(o[n], pa, b0, b1);
            }
        }
    }

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    /* Rows past T were computed on zeros and are dropped here. Every real row saw its own key
     * (causal) or all keys, so l > 0; the guard only keeps padded rows finite. */
    float inv[2] = {l[0] > 0.0f ? 1.0f / l[0] : 0.0f, l[1] > 0.0f ? 1.0f / l[1] : 0.0f};
    if (DROP) inv[0] *= s.keep_scale, inv[1] *= s.keep_scale;
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = e >> 1;
            if (row[r] < s.T)
                st(out, q_off(s, b, row[r], h) + 8 * n + tr_mma_c_elem(lane, e).col,
                   o[n][e] * inv[r]);
        }
    if ((lane & 3) == 0)
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (row[r] < s.T)
                lse[((int64_t)b * s.H + h) * s.T + row[r]] = (m[r] + log2f(l[r])) * TC_LN2;
}

/* ---- backward: shared steps --------------------------------------------------------------- */

/* The two score-shaped products of a backward tile, c1 = A1 B1 and c2 = A2 B2 for the warp's 16
 * rows over KS k16 steps: A from row-major tiles, B from [n][k] tiles, all of row stride ld. S
 * and dP in dq; S^T and dP^T in dkv. */
template <int KS, int NT, typename H>
__device__ __forceinline__ void two_products(float (&c1)[NT][4], const H *a1, const H *b1,
                                             float (&c2)[NT][4], const H *a2, const H *b2, int ld,
                                             int w, int lane) {
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) c1[j][e] = c2[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        uint32_t x1[4], x2[4];
        load_a(x1, a1, ld, 16 * w, 16 * kk, lane);
        load_a(x2, a2, ld, 16 * w, 16 * kk, lane);
        mma_tiles2(c1, x1, b1, c2, x2, b2, ld, 16 * kk, lane);
    }
}

/* In place, one element: the score sc becomes P = exp2(sc sl2 - lse2) (0 where not visible) and
 * dp becomes dS = P (dP - di). lse2 is the row's lse in log2 units. */
__device__ __forceinline__ void p_and_ds(float &sc, float &dp, bool ok, float sl2, float lse2,
                                         float di) {
    const float p = ok ? exp2f(sc * sl2 - lse2) : 0.0f;
    sc = p;
    dp = p * (dp - di);
}

/* The same with dropout: dP is dp times the mask (ks = 1/(1-p) where kept, 0 where dropped) and
 * sc becomes P where kept, 0 where dropped (dV's operand; its 1/(1-p) is applied to dV). */
__device__ __forceinline__ void p_and_ds_drop(float &sc, float &dp, bool ok, bool kept, float sl2,
                                              float lse2, float di, float ks) {
    const float p = ok ? exp2f(sc * sl2 - lse2) : 0.0f;
    sc = kept ? p : 0.0f;
    dp = p * ((kept ? dp * ks : 0.0f) - di);
}

/* ---- backward: dK, dV ------------------------------------------------------------------- */

template <int D> constexpr size_t dkv_smem() {
    constexpr int BQ = tc_tile<D>::N;
    return 2 * (2 * (size_t)TC_ROWS * (D + TC_PAD) + 2 * (size_t)BQ * (D + TC_PAD) +
                2 * (size_t)D * (BQ + TC_PAD)) +
           (2 * sizeof(float) + sizeof(int)) * BQ;
}

template <int D, typename H, typename T, bool DROP>
__global__ void __launch_bounds__(TC_THREADS)
    tc_dkv_kernel(T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v, const float *lse,
                  const float *di, att_shape s) {
    constexpr int BQ = tc_tile<D>::N;
    constexpr int KS = D / 16, NT = BQ / 8, ND = D / 8;
    constexpr int LD = D + TC_PAD, LT = BQ + TC_PAD;
    TR_DYNAMIC_SMEM(__align__(16) unsigned char, tc_smem);
    H *sk = reinterpret_cast<H *>(tc_smem);                 /* [64][LD] the CTA's keys */
    H *sv = sk + TC_ROWS * LD;                              /* [64][LD] their values */
    H *sq = sv + TC_ROWS * LD;                              /* [BQ][LD] queries: B of S^T = K Q^T */
    H *sdo = sq + BQ * LD;                                  /* [BQ][LD] dO: B of dP^T = V dO^T */
    H *sqt = sdo + BQ * LD;                                 /* [D][LT] Q^T: B of dK += dS^T Q */
    H *sdot = sqt + D * LT;                                 /* [D][LT] dO^T: B of dV += P^T dO */
    float *slse = reinterpret_cast<float *>(sdot + D * LT); /* lse * log2(e) */
    float *sdi = slse + BQ;
    int *sds = reinterpret_cast<int *>(sdi + BQ);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int b = blockIdx.z, g = blockIdx.y;
    const int j0 = blockIdx.x * TC_ROWS, nk = min(TC_ROWS, s.T - j0);
    const int64_t kstride = (int64_t)s.G * D, qstride = (int64_t)s.H * D;

    stage<D, TC_ROWS, TC_THREADS, H>(sk, (H *)nullptr, k + kv_off(s, b, j0, g), kstride, nk);
    stage<D, TC_ROWS, TC_THREADS, H>(sv, (H *)nullptr, v + kv_off(s, b, j0, g), kstride, nk);

    int key[2]; /* this lane's keys: rows g and g + 8 of the warp's 16 in S^T */
#pragma unroll
    for (int r = 0; r < 2; r++) key[r] = j0 + 16 * w + tr_mma_c_elem(lane, 2 * r).row;
    float ak[ND][4], av[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) ak[n][e] = av[n][e] = 0.0f;

    const float sl2 = s.scale * TC_LOG2E;
    /* Queries before j0 see none of these keys (causal); none at or past query_end either. */
    const int qstart = s.causal ? j0 : 0;
    const int qend = query_end(s, b, j0 + nk);
    for (int h = g * s.hpg; h < (g + 1) * s.hpg; h++) {
        const tr_attn_drop_stream dst = att_drop_stream(s, b, h);
        for (int q0 = qstart; q0 < qend; q0 += BQ) {
            const int nq = min(BQ, qend - q0);
            __syncthreads(); /* the previous tile's readers are done */
            stage<D, BQ, TC_THREADS, H>(sq, sqt, q + q_off(s, b, q0, h), qstride, nq);
            stage<D, BQ, TC_THREADS, H>(sdo, sdot, dout + q_off(s, b, q0, h), qstride, nq);
            for (int i = threadIdx.x; i < BQ; i += TC_THREADS) {
                const bool ok = i < nq;
                const int t = q0 + i;
                slse[i] = ok ? lse[((int64_t)b * s.H + h) * s.T + t] * TC_LOG2E : 0.0f;
                sdi[i] = ok ? di[((int64_t)b * s.T + t) * s.H + h] : 0.0f;
                sds[i] = ok ? doc_lo(s, b, t) : 0;
            }
            __syncthreads();

            float sc[NT][4], dp[NT][4];
            two_products<KS>(sc, sk, sq, dp, sv, sdo, LD, w, lane);
            /* P^T and dS^T = P^T (dP^T - di) for key `key[r]`, query q0 + i: visible when the
             * query is loaded (i < nq; so t < T), the key exists, t >= key (causal) and the
             * query's document starts at or before the key. */
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const unsigned kb =
                    DROP ? tc_drop_bits(s, dst, key, q0 + 8 * j + 2 * (lane & 3), true, lane)
                         : 0xfu;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = e >> 1, i = 8 * j + tr_mma_c_elem(lane, e).col;
                    const bool ok = i < nq && key[r] < s.T && att_sees(s, key[r], q0 + i, sds[i]);
                    if (DROP)
                        p_and_ds_drop(sc[j][e], dp[j][e], ok, (kb >> e) & 1u, sl2, slse[i], sdi[i],
                                      s.keep_scale);
                    else
                        p_and_ds(sc[j][e], dp[j][e], ok, sl2, slse[i], sdi[i]);
                }
            }
            /* dV += P^T dO and dK += dS^T Q, the queries as k16 steps. */
#pragma unroll
            for (int kk = 0; kk < NT / 2; kk++) {
                uint32_t pa[4], da[4];
                c_to_a<H>(pa, sc[2 * kk], sc[2 * kk + 1]);
                c_to_a<H>(da, dp[2 * kk], dp[2 * kk + 1]);
                mma_tiles2(av, pa, sdot, ak, da, sqt, LT, 16 * kk, lane);
            }
        }
    }

#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = e >> 1;
            if (key[r] < s.T) {
                const int64_t o = kv_off(s, b, key[r], g) + 8 * n + tr_mma_c_elem(lane, e).col;
                st(dk, o, ak[n][e] * s.scale);
                st(dv, o, DROP ? av[n][e] * s.keep_scale : av[n][e]);
            }
        }
}

/* ---- backward: dQ ----------------------------------------------------------------------- */

template <int D> constexpr size_t dq_smem() {
    constexpr int BK = tc_tile<D>::N;
    return 2 * (2 * (size_t)TC_ROWS * (D + TC_PAD) + 2 * (size_t)BK * (D + TC_PAD) +
                (size_t)D * (BK + TC_PAD));
}

template <int D, typename H, typename T, bool DROP>
__global__ void __launch_bounds__(TC_THREADS)
    tc_dq_kernel(T *dq, const T *dout, const T *q, const T *k, const T *v, const float *lse,
                 const float *di, att_shape s) {
    constexpr int BK = tc_tile<D>::N;
    constexpr int KS = D / 16, NT = BK / 8, ND = D / 8;
    constexpr int LD = D + TC_PAD, LT = BK + TC_PAD;
    TR_DYNAMIC_SMEM(__align__(16) unsigned char, tc_smem);
    H *sq = reinterpret_cast<H *>(tc_smem); /* [64][LD] the CTA's queries */
    H *sdo = sq + TC_ROWS * LD;             /* [64][LD] their dO */
    H *sk = sdo + TC_ROWS * LD;             /* [BK][LD] keys: B of S = Q K^T */
    H *sv = sk + BK * LD;                   /* [BK][LD] values: B of dP = dO V^T */
    H *skt = sv + BK * LD;                  /* [D][LT] K^T: B of dQ += dS K */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int b = blockIdx.z, h = blockIdx.y, g = h / s.hpg;
    const int q0 = blockIdx.x * TC_ROWS, nq = min(TC_ROWS, s.T - q0);
    const int64_t kstride = (int64_t)s.G * D, qstride = (int64_t)s.H * D;

    stage<D, TC_ROWS, TC_THREADS, H>(sq, (H *)nullptr, q + q_off(s, b, q0, h), qstride, nq);
    stage<D, TC_ROWS, TC_THREADS, H>(sdo, (H *)nullptr, dout + q_off(s, b, q0, h), qstride, nq);

    int row[2], lo[2];
    float rl[2], rd[2]; /* lse * log2(e) and di of the row; 0 for rows past T (never stored) */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        row[r] = q0 + 16 * w + tr_mma_c_elem(lane, 2 * r).row;
        const bool ok = row[r] < s.T;
        lo[r] = ok ? doc_lo(s, b, row[r]) : 0;
        rl[r] = ok ? lse[((int64_t)b * s.H + h) * s.T + row[r]] * TC_LOG2E : 0.0f;
        rd[r] = ok ? di[((int64_t)b * s.T + row[r]) * s.H + h] : 0.0f;
    }
    float aq[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) aq[n][0] = aq[n][1] = aq[n][2] = aq[n][3] = 0.0f;
    const tr_attn_drop_stream dst = att_drop_stream(s, b, h);

    const float sl2 = s.scale * TC_LOG2E;
    const int kend = s.causal ? q0 + nq : s.T;
    const int kbeg = doc_lo(s, b, q0) / BK * BK;
    for (int k0 = kbeg; k0 < kend; k0 += BK) {
        const int nk = min(BK, kend - k0);
        __syncthreads(); /* the previous tile's readers are done */
        stage<D, BK, TC_THREADS, H>(sk, skt, k + kv_off(s, b, k0, g), kstride, nk);
        stage<D, BK, TC_THREADS, H>(sv, (H *)nullptr, v + kv_off(s, b, k0, g), kstride, nk);
        __syncthreads();

        float sc[NT][4], dp[NT][4];
        two_products<KS>(sc, sq, sk, dp, sdo, sv, LD, w, lane);
        /* P and dS = P (dP - di) as in the forward's masks; rows past T masked out. */
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const unsigned kb =
                DROP ? tc_drop_bits(s, dst, row, k0 + 8 * j + 2 * (lane & 3), false, lane) : 0xfu;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1, key = k0 + 8 * j + tr_mma_c_elem(lane, e).col;
                /* att_sees spelled out: through it ptxas gives dq 12 more registers at D=64 */
                const bool ok =
                    row[r] < s.T && key < k0 + nk && (!s.causal || key <= row[r]) && key >= lo[r];
                if (DROP)
                    p_and_ds_drop(sc[j][e], dp[j][e], ok, (kb >> e) & 1u, sl2, rl[r], rd[r],
                                  s.keep_scale);
                else
                    p_and_ds(sc[j][e], dp[j][e], ok, sl2, rl[r], rd[r]);
            }
        }
        /* dQ += dS K, the keys as k16 steps. */
#pragma unroll
        for (int kk = 0; kk < NT / 2; kk++) {
            uint32_t da[4];
            c_to_a<H>(da, dp[2 * kk], dp[2 * kk + 1]);
            mma_tiles(aq, da, skt, LT, 16 * kk, lane);
        }
    }

#pragma unroll
    for (int n = 0; n < ND; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = e >> 1;
            if (row[r] < s.T)
                st(dq, q_off(s, b, row[r], h) + 8 * n + tr_mma_c_elem(lane, e).col,
                   aq[n][e] * s.scale);
        }
}

/* Blocks of `rows` query (or key) rows per (row-block, head or group, batch). */
inline dim3 tc_grid(const tr_attn_desc *d, int per_row, int rows) {
    return dim3((unsigned)((d->seq + rows - 1) / rows), (unsigned)per_row, (unsigned)d->batch);
}

} // namespace

#endif
