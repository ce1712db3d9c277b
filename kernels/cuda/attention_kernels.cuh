/* Internal: the fp32 SIMT attention kernels and their launch geometry (attention.cu explains
 * the schedule and owns the launchers); host C++ compiles them too, in tests/emu. */
#ifndef TR_CUDA_ATTENTION_KERNELS_CUH
#define TR_CUDA_ATTENTION_KERNELS_CUH

#include "kernels/common/lse_merge.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/smem.cuh"

#define ATT_WARPS 8  /* rows (queries or keys) per block */
#define ATT_KT    32 /* tile of keys (forward, dQ) or queries (dK/dV): one per lane */

/* Rows [t0, t0+n) of K or V (or Q, dO of one head) into a padded [ATT_KT][D+1] tile: the pad
 * puts lane j's row j in its own bank when lanes walk channels together. */
template <typename T>
__device__ __forceinline__ void load_tile(float *tile, const T *src, int64_t row_stride, int n,
                                          int D) {
    for (int idx = threadIdx.x; idx < ATT_KT * D; idx += blockDim.x) {
        int j = idx / D, e = idx % D;
        tile[j * (D + 1) + e] = j < n ? ld(src, j * row_stride + e) : 0.0f;
    }
}

/* Key tile k0 (nk keys of group g) into sk and sv, once every warp is done with the last one. */
template <typename T>
__device__ __forceinline__ void load_kv_tiles(float *sk, float *sv, const T *k, const T *v,
                                              const att_shape &s, int b, int g, int k0, int nk) {
    const int64_t stride = (int64_t)s.G * s.D;
    __syncthreads();
    load_tile(sk, k + kv_off(s, b, k0, g), stride, nk, s.D);
    load_tile(sv, v + kv_off(s, b, k0, g), stride, nk, s.D);
    __syncthreads();
}

/* One past the last key the block's query rows may see: its last row (causal) or T. */
__device__ __forceinline__ int block_key_end(const att_shape &s) {
    return s.causal ? min(s.T, (int)(blockIdx.x + 1) * ATT_WARPS) : s.T;
}

/* acc[n] += sum_j x_j tile[j][lane + 32 n] over the tile's first rows rows, x_j being lane j's
 * x: a row of P (or dS) held one entry per lane, times the staged V (or K). */
template <int NE>
__device__ __forceinline__ void acc_lane_weighted(float (&acc)[NE], float x, const float *tile,
                                                  int rows, int D, int lane) {
    for (int j = 0; j < rows; j++) {
        float xj = __shfl_sync(0xffffffffu, x, j);
        const float *tr = tile + j * (D + 1);
#pragma unroll
        for (int n = 0; n < NE; n++) {
            int e = lane + 32 * n;
            if (e < D) acc[n] += xj * tr[e];
        }
    }
}

__device__ __forceinline__ float dot_row(const float *a, const float *b, int D) {
    float s = 0.0f;
    for (int e = 0; e < D; e++) s += a[e] * b[e];
    return s;
}

template <int NE, typename T, bool DROP>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_fwd_kernel(T *out, float *lse, const T *q, const T *k, const T *v, att_shape s) {
    TR_DYNAMIC_SMEM(float, sm);
    int D = s.D, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int b = blockIdx.z, h = blockIdx.y, g = h / s.hpg;
    int i = blockIdx.x * ATT_WARPS + w;
    bool active = i < s.T;
    float *sk = sm, *sv = sk + ATT_KT * (D + 1), *sq = sv + ATT_KT * (D + 1);
    float *myq = sq + w * D;
    if (active)
        for (int e = lane; e < D; e += 32) myq[e] = ld(q, q_off(s, b, i, h) + e);
    float acc[NE];
#pragma unroll
    for (int n = 0; n < NE; n++) acc[n] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int kend = block_key_end(s);
    int lo = active ? doc_lo(s, b, i) : 0;
    const tr_attn_drop_stream dst = att_drop_stream(s, b, h);
    for (int k0 = doc_lo(s, b, blockIdx.x * ATT_WARPS); k0 < kend; k0 += ATT_KT) {
        int nk = min(ATT_KT, kend - k0);
        load_kv_tiles(sk, sv, k, v, s, b, g, k0, nk);
        if (!active) continue;
        int key = k0 + lane;
        bool valid = lane < nk && att_sees(s, key, i, lo);
        float sc = valid ? dot_row(myq, sk + lane * (D + 1), D) * s.scale : -INFINITY;
        float mnew = fmaxf(m, tr_warp_max(sc));
        if (mnew == -INFINITY) continue; /* nothing visible yet */
        float p = valid ? expf(sc - mnew) : 0.0f;
        float alpha = m == -INFINITY ? 0.0f : expf(m - mnew);
        l = l * alpha + tr_warp_sum(p);
        m = mnew;
        if (DROP && valid) p *= att_drop_mul(s, dst, i, key);
#pragma unroll
        for (int n = 0; n < NE; n++) acc[n] *= alpha;
        acc_lane_weighted(acc, p, sv, nk, D, lane);
    }
    if (!active) return;
    float inv = 1.0f / l;
    int64_t o = q_off(s, b, i, h);
#pragma unroll
    for (int n = 0; n < NE; n++) {
        int e = lane + 32 * n;
        if (e < D) st(out, o + e, acc[n] * inv);
    }
    if (lane == 0) lse[((int64_t)b * s.H + h) * s.T + i] = m + logf(l);
}

/* di[b,h,t] = sum_e dO * O, in double as on the CPU: one warp per row. */
template <typename T>
__global__ void attn_di_kernel(float *di, const T *dout, const T *o, int64_t rows, int D) {
    int lane = threadIdx.x & 31;
    int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; r < rows; r += warps) {
        const T *a = dout + r * D, *c = o + r * D; /* r = (b*T + t)*H + h */
        double acc = 0.0;
        for (int e = lane; e < D; e += 32) acc += (double)ld(a, e) * ld(c, e);
        acc = tr_warp_sum_d(acc);
        if (lane == 0) di[r] = (float)acc;
    }
}

/* dQ: a warp per query row, keys in tiles, lane j recomputing P and dS for key j. */
template <int NE, typename T, bool DROP>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_dq_kernel(T *dq, const T *dout, const T *q, const T *k, const T *v, const float *lse,
                   const float *di, att_shape s) {
    TR_DYNAMIC_SMEM(float, sm);
    int D = s.D, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int b = blockIdx.z, h = blockIdx.y, g = h / s.hpg;
    int i = blockIdx.x * ATT_WARPS + w;
    bool active = i < s.T;
    float *sk = sm, *sv = sk + ATT_KT * (D + 1), *sq = sv + ATT_KT * (D + 1);
    float *sdo = sq + ATT_WARPS * D;
    float *myq = sq + w * D, *mydo = sdo + w * D;
    float row_lse = 0.0f, row_di = 0.0f;
    if (active) {
        for (int e = lane; e < D; e += 32) {
            myq[e] = ld(q, q_off(s, b, i, h) + e);
            mydo[e] = ld(dout, q_off(s, b, i, h) + e);
        }
        row_lse = lse[((int64_t)b * s.H + h) * s.T + i];
        row_di = di[((int64_t)b * s.T + i) * s.H + h];
    }
    float acc[NE];
#pragma unroll
    for (int n = 0; n < NE; n++) acc[n] = 0.0f;
    int kend = block_key_end(s);
    int lo = active ? doc_lo(s, b, i) : 0;
    const tr_attn_drop_stream dst = att_drop_stream(s, b, h);
    for (int k0 = doc_lo(s, b, blockIdx.x * ATT_WARPS); k0 < kend; k0 += ATT_KT) {
        int nk = min(ATT_KT, kend - k0);
        load_kv_tiles(sk, sv, k, v, s, b, g, k0, nk);
        if (!active) continue;
        bool valid = lane < nk && att_sees(s, k0 + lane, i, lo);
        float ds = 0.0f;
        if (valid) {
            float p = expf(dot_row(myq, sk + lane * (D + 1), D) * s.scale - row_lse);
            float dp = dot_row(mydo, sv + lane * (D + 1), D);
            if (DROP) dp *= att_drop_mul(s, dst, i, k0 + lane);
            ds = s.scale * p * (dp - row_di);
        }
        acc_lane_weighted(acc, ds, sk, nk, D, lane);
    }
    if (!active) return;
    int64_t o = q_off(s, b, i, h);
#pragma unroll
    for (int n = 0; n < NE; n++) {
        int e = lane + 32 * n;
        if (e < D) st(dq, o + e, acc[n]);
    }
}

/* dK, dV: a warp per key row of one KV group; query tiles of every head of the group are staged,
 * lane i recomputing P and dS for query i of the tile. */
template <int NE, typename T, bool DROP>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_dkv_kernel(T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v,
                    const float *lse, const float *di, att_shape s) {
    TR_DYNAMIC_SMEM(float, sm);
    int D = s.D, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int b = blockIdx.z, g = blockIdx.y;
    int j = blockIdx.x * ATT_WARPS + w;
    bool active = j < s.T;
    float *sq = sm, *sdo = sq + ATT_KT * (D + 1), *skr = sdo + ATT_KT * (D + 1);
    float *svr = skr + ATT_WARPS * D, *slse = svr + ATT_WARPS * D, *sdi = slse + ATT_KT;
    int *sds = (int *)(sdi + ATT_KT);
    float *myk = skr + w * D, *myv = svr + w * D;
    if (active)
        for (int e = lane; e < D; e += 32) {
            myk[e] = ld(k, kv_off(s, b, j, g) + e);
            myv[e] = ld(v, kv_off(s, b, j, g) + e);
        }
    float ak[NE], av[NE];
#pragma unroll
    for (int n = 0; n < NE; n++) ak[n] = av[n] = 0.0f;
    int qstart = s.causal ? (int)blockIdx.x * ATT_WARPS : 0;
    int qend = query_end(s, b, min(s.T, (int)(blockIdx.x + 1) * ATT_WARPS));
    int64_t qstride = (int64_t)s.H * D;
    for (int h = g * s.hpg; h < (g + 1) * s.hpg; h++) {
        const tr_attn_drop_stream dst = att_drop_stream(s, b, h);
        for (int q0 = qstart; q0 < qend; q0 += ATT_KT) {
            int nq = min(ATT_KT, qend - q0);
            __syncthreads();
            load_tile(sq, q + q_off(s, b, q0, h), qstride, nq, D);
            load_tile(sdo, dout + q_off(s, b, q0, h), qstride, nq, D);
            if (threadIdx.x < ATT_KT && (int)threadIdx.x < nq) {
                int t = q0 + threadIdx.x;
                slse[threadIdx.x] = lse[((int64_t)b * s.H + h) * s.T + t];
                sdi[threadIdx.x] = di[((int64_t)b * s.T + t) * s.H + h];
                sds[threadIdx.x] = doc_lo(s, b, t);
            }
            __syncthreads();
            if (!active) continue;
            bool valid = lane < nq && att_sees(s, j, q0 + lane, sds[lane]);
            float p = 0.0f, ds = 0.0f;
            if (valid) {
                p = expf(dot_row(sq + lane * (D + 1), myk, D) * s.scale - slse[lane]);
                float dp = dot_row(sdo + lane * (D + 1), myv, D);
                if (DROP) {
                    const float mul = att_drop_mul(s, dst, q0 + lane, j);
                    dp *= mul;
                    ds = s.scale * p * (dp - sdi[lane]);
                    p *= mul; /* dV's operand: the dropped probability */
                } else {
                    ds = s.scale * p * (dp - sdi[lane]);
                }
            }
            for (int r = 0; r < nq; r++) {
                float pr = __shfl_sync(0xffffffffu, p, r), dr = __shfl_sync(0xffffffffu, ds, r);
                const float *qr = sq + r * (D + 1), *dor = sdo + r * (D + 1);
#pragma unroll
                for (int n = 0; n < NE; n++) {
                    int e = lane + 32 * n;
                    if (e < D) {
                        av[n] += pr * dor[e];
                        ak[n] += dr * qr[e];
                    }
                }
            }
        }
    }
    if (!active) return;
#pragma unroll
    for (int n = 0; n < NE; n++) {
        int e = lane + 32 * n;
        if (e < D) {
            st(dk, kv_off(s, b, j, g) + e, ak[n]);
            st(dv, kv_off(s, b, j, g) + e, av[n]);
        }
    }
}

/* A row is valid when it starts at 0 and every entry opens a document (== t) or continues the
 * previous one: the CPU's rule. */
__global__ void doc_start_check_kernel(const int32_t *ds, int batch, int T, int *bad) {
    int64_t n = (int64_t)batch * T;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int t = (int)(i % T);
        bool ok = t == 0 ? ds[i] == 0 : (ds[i] == t || ds[i] == ds[i - 1]);
        if (!ok) atomicExch(bad, 1);
    }
}

/* Dynamic shared memory of the three kernels for head_dim D (bytes). */
static inline size_t attn_fwd_smem(int D) {
    return sizeof(float) * (2 * (size_t)ATT_KT * (D + 1) + (size_t)ATT_WARPS * D);
}
static inline size_t attn_dq_smem(int D) {
    return sizeof(float) * (2 * (size_t)ATT_KT * (D + 1) + 2 * (size_t)ATT_WARPS * D);
}
static inline size_t attn_dkv_smem(int D) {
    return sizeof(float) * (2 * (size_t)ATT_KT * (D + 1) + 2 * (size_t)ATT_WARPS * D + 3 * ATT_KT);
}

/* The log-sum-exp merge (tr_ops.attention_merge): one thread per (query row, head). */
__global__ void attn_merge_kernel(float *out, float *lse, int64_t lse_ld, const float *out_b,
                                  const float *lse_b, int rows, int heads, int D) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)rows * heads) return;
    int t = (int)(i / heads), h = (int)(i % heads);
    tr_lse_merge_row(out + i * D, lse + h * lse_ld + t, out_b + i * D, lse_b[(int64_t)h * rows + t],
                     D);
}

#endif
