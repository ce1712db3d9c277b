/* Causal GQA attention, flash-style, fp32 SIMT: the CPU's FlashAttention-2 schedule mapped onto
 * warps. Forward: a warp owns one query row (its output row lives in registers, lane l holding
 * channels l, l+32, ...); the block's warps share K/V tiles of ATT_KT keys staged in shared
 * memory, lane j scoring key j of the tile, with the online max/sum rescaling of the CPU. Only
 * lse = m + log(l) is saved. Backward recomputes P and dS = scale * P * (dP - di) from q, k, v
 * and lse in two kernels without atomics, as the CPU's two passes: one owns key rows (dK, dV
 * summed over the group's heads and every query), one owns query rows (dQ). Each output element
 * has one writer, so results are run-to-run deterministic.
 *
 * Document masking (desc->doc_start, packed sequences) narrows query t's keys to
 * [doc_start[t], t], as on the CPU: tiles before the block's first document start are skipped,
 * and a key block stops at the first query whose document starts after it.
 *
 * With desc->lowp (mixed precision) and a head_dim of 16, 32, 64 or 128 on sm_80+, the same
 * entry points run the tensor-core kernels of attention_tc.cu instead, after the checks (and,
 * for backward, di) here. */
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_impl.cuh"
#include "kernels/cuda/cuda_mixed.h"

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

__device__ __forceinline__ float dot_row(const float *a, const float *b, int D) {
    float s = 0.0f;
    for (int e = 0; e < D; e++) s += a[e] * b[e];
    return s;
}

template <int NE, typename T>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_fwd_kernel(T *out, float *lse, const T *q, const T *k, const T *v, att_shape s) {
    extern __shared__ float sm[];
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
    int last = min(s.T, (int)(blockIdx.x + 1) * ATT_WARPS);
    int kend = s.causal ? last : s.T;
    int lo = active ? doc_lo(s, b, i) : 0;
    int64_t kstride = (int64_t)s.G * D;
    for (int k0 = doc_lo(s, b, blockIdx.x * ATT_WARPS); k0 < kend; k0 += ATT_KT) {
        int nk = min(ATT_KT, kend - k0);
        __syncthreads();
        load_tile(sk, k + kv_off(s, b, k0, g), kstride, nk, D);
        load_tile(sv, v + kv_off(s, b, k0, g), kstride, nk, D);
        __syncthreads();
        if (!active) continue;
        int key = k0 + lane;
        bool valid = lane < nk && (!s.causal || key <= i) && key >= lo;
        float sc = valid ? dot_row(myq, sk + lane * (D + 1), D) * s.scale : -INFINITY;
        float mnew = fmaxf(m, tr_warp_max(sc));
        if (mnew == -INFINITY) continue; /* nothing visible yet */
        float p = valid ? expf(sc - mnew) : 0.0f;
        float alpha = m == -INFINITY ? 0.0f : expf(m - mnew);
        l = l * alpha + tr_warp_sum(p);
        m = mnew;
#pragma unroll
        for (int n = 0; n < NE; n++) acc[n] *= alpha;
        for (int j = 0; j < nk; j++) {
            float pj = __shfl_sync(0xffffffffu, p, j);
            const float *vr = sv + j * (D + 1);
#pragma unroll
            for (int n = 0; n < NE; n++) {
                int e = lane + 32 * n;
                if (e < D) acc[n] += pj * vr[e];
            }
        }
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
template <int NE, typename T>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_dq_kernel(T *dq, const T *dout, const T *q, const T *k, const T *v, const float *lse,
                   const float *di, att_shape s) {
    extern __shared__ float sm[];
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
    int last = min(s.T, (int)(blockIdx.x + 1) * ATT_WARPS);
    int kend = s.causal ? last : s.T;
    int lo = active ? doc_lo(s, b, i) : 0;
    int64_t kstride = (int64_t)s.G * D;
    for (int k0 = doc_lo(s, b, blockIdx.x * ATT_WARPS); k0 < kend; k0 += ATT_KT) {
        int nk = min(ATT_KT, kend - k0);
        __syncthreads();
        load_tile(sk, k + kv_off(s, b, k0, g), kstride, nk, D);
        load_tile(sv, v + kv_off(s, b, k0, g), kstride, nk, D);
        __syncthreads();
        if (!active) continue;
        bool valid = lane < nk && (!s.causal || k0 + lane <= i) && k0 + lane >= lo;
        float ds = 0.0f;
        if (valid) {
            float p = expf(dot_row(myq, sk + lane * (D + 1), D) * s.scale - row_lse);
            float dp = dot_row(mydo, sv + lane * (D + 1), D);
            ds = s.scale * p * (dp - row_di);
        }
        for (int j = 0; j < nk; j++) {
            float dj = __shfl_sync(0xffffffffu, ds, j);
            const float *kr = sk + j * (D + 1);
#pragma unroll
            for (int n = 0; n < NE; n++) {
                int e = lane + 32 * n;
                if (e < D) acc[n] += dj * kr[e];
            }
        }
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
template <int NE, typename T>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_dkv_kernel(T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v,
                    const float *lse, const float *di, att_shape s) {
    extern __shared__ float sm[];
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
            bool valid = lane < nq && (!s.causal || q0 + lane >= j) && sds[lane] <= j;
            float p = 0.0f, ds = 0.0f;
            if (valid) {
                p = expf(dot_row(sq + lane * (D + 1), myk, D) * s.scale - slse[lane]);
                float dp = dot_row(sdo + lane * (D + 1), myv, D);
                ds = s.scale * p * (dp - sdi[lane]);
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

static tr_status attn_check(const tr_attn_desc *d) {
    if (!d || d->batch < 0 || d->seq < 0 || d->heads <= 0 || d->groups <= 0 || d->head_dim <= 0)
        return TR_ERR_INVALID;
    if (d->heads % d->groups || d->block_q < 0 || d->block_k < 0 || !(d->scale > 0))
        return TR_ERR_INVALID;
    if (d->doc_start && !d->causal) return TR_ERR_INVALID;
    if (d->lowp != 0 && d->lowp != TR_LOWP_BF16 && d->lowp != TR_LOWP_F16) return TR_ERR_INVALID;
    /* Registers hold a row as head_dim/32 values per lane; 256 covers every model we ship. */
    if (d->head_dim > 256) {
        tr_log(TR_LOG_ERROR, "CUDA attention: head_dim %d is above the supported 256", d->head_dim);
        return TR_ERR_INVALID;
    }
    /* grid.y = heads, grid.z = batch */
    if (d->heads > 65535 || d->batch > 65535) return TR_ERR_INVALID;
    return TR_OK;
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

/* doc_start lives on the device, and a malformed one must be TR_ERR_INVALID as on the CPU, so
 * this reads the verdict back (one small synchronisation per call with documents), unless the
 * caller vouches for the array (doc_start_trusted: the runtime checks it on the host). */
static tr_status check_doc_start(tr_cuda_ctx *ctx, const tr_attn_desc *d) {
    if (!d->doc_start || d->doc_start_trusted) return TR_OK;
    int *bad;
    TR_TRY(tr_cuda_scratch(ctx, sizeof(int), (void **)&bad));
    TR_CUDA_TRY(cudaMemsetAsync(bad, 0, sizeof(int), ctx->stream));
    int64_t n = (int64_t)d->batch * d->seq;
    doc_start_check_kernel<<<tr_cuda_blocks(n, 256), 256, 0, ctx->stream>>>(d->doc_start, d->batch,
                                                                            d->seq, bad);
    TR_CUDA_LAUNCHED();
    TR_CUDA_TRY(
        cudaMemcpyAsync(ctx->host_flag, bad, sizeof(int), cudaMemcpyDeviceToHost, ctx->stream));
    TR_CUDA_TRY(cudaStreamSynchronize(ctx->stream));
    return *ctx->host_flag ? TR_ERR_INVALID : TR_OK;
}

/* Shared memory beyond 48 KB must be opted into per kernel (head_dim 256). */
template <typename K> static tr_status allow_smem(K kernel, size_t bytes) {
    if (bytes > 48 * 1024)
        TR_CUDA_TRY(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return TR_OK;
}

template <int NE, typename T>
static tr_status fwd_launch(tr_cuda_ctx *ctx, T *out, float *lse, const T *q, const T *k,
                            const T *v, const tr_attn_desc *d) {
    att_shape s = att_shape_of(d);
    size_t smem = sizeof(float) * (2 * (size_t)ATT_KT * (s.D + 1) + (size_t)ATT_WARPS * s.D);
    TR_TRY(allow_smem(attn_fwd_kernel<NE, T>, smem));
    dim3 grid((unsigned)((s.T + ATT_WARPS - 1) / ATT_WARPS), (unsigned)s.H, (unsigned)d->batch);
    attn_fwd_kernel<NE, T><<<grid, ATT_WARPS * 32, smem, ctx->stream>>>(out, lse, q, k, v, s);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

template <int NE, typename T>
static tr_status bwd_launch(tr_cuda_ctx *ctx, T *dq, T *dk, T *dv, const T *dout, const T *q,
                            const T *k, const T *v, const float *lse, const float *di,
                            const tr_attn_desc *d) {
    att_shape s = att_shape_of(d);
    unsigned nb = (unsigned)((s.T + ATT_WARPS - 1) / ATT_WARPS);
    size_t tiles = 2 * (size_t)ATT_KT * (s.D + 1);
    size_t smem_dq = sizeof(float) * (tiles + 2 * (size_t)ATT_WARPS * s.D);
    size_t smem_dkv = sizeof(float) * (tiles + 2 * (size_t)ATT_WARPS * s.D + 3 * ATT_KT);
    TR_TRY(allow_smem(attn_dq_kernel<NE, T>, smem_dq));
    TR_TRY(allow_smem(attn_dkv_kernel<NE, T>, smem_dkv));
    attn_dkv_kernel<NE, T>
        <<<dim3(nb, (unsigned)s.G, (unsigned)d->batch), ATT_WARPS * 32, smem_dkv, ctx->stream>>>(
            dk, dv, dout, q, k, v, lse, di, s);
    TR_CUDA_LAUNCHED();
    attn_dq_kernel<NE, T>
        <<<dim3(nb, (unsigned)s.H, (unsigned)d->batch), ATT_WARPS * 32, smem_dq, ctx->stream>>>(
            dq, dout, q, k, v, lse, di, s);
    TR_CUDA_LAUNCHED();
    return TR_OK;
}

/* The checks and the head_dim dispatch, shared by the fp32 table entries and the bf16 ones. */
template <typename T>
static tr_status attention_fwd(const char *name, T *out, float *lse, const T *q, const T *k,
                               const T *v, const tr_attn_desc *d) {
    TR_TRY(attn_check(d));
    if (d->batch == 0 || d->seq == 0) return TR_OK;
    if (!out || !lse || !q || !k || !v) return TR_ERR_INVALID;
    TR_CUDA_CTX(name);
    TR_TRY(check_doc_start(ctx, d));
    if (tr_attn_tc_eligible(d)) return tr_attn_tc_fwd(ctx->stream, out, lse, q, k, v, d);
    if (d->head_dim <= 64) return fwd_launch<2, T>(ctx, out, lse, q, k, v, d);
    if (d->head_dim <= 128) return fwd_launch<4, T>(ctx, out, lse, q, k, v, d);
    return fwd_launch<8, T>(ctx, out, lse, q, k, v, d);
}

template <typename T>
static tr_status attention_bwd(const char *name, T *dq, T *dk, T *dv, const T *dout, const T *q,
                               const T *k, const T *v, const T *out, const float *lse,
                               const tr_attn_desc *d) {
    TR_TRY(attn_check(d));
    if (d->batch == 0 || d->seq == 0) return TR_OK;
    if (!dq || !dk || !dv || !dout || !q || !k || !v || !out || !lse) return TR_ERR_INVALID;
    TR_CUDA_CTX(name);
    TR_TRY(check_doc_start(ctx, d));
    int64_t rows = (int64_t)d->batch * d->seq * d->heads;
    void *scratch;
    TR_TRY(tr_cuda_scratch(ctx, (size_t)rows * sizeof(float), &scratch));
    float *di = (float *)scratch; /* [B, T, H]: the token-major order of dO and O */
    attn_di_kernel<T>
        <<<tr_cuda_blocks(rows * 32, 256), 256, 0, ctx->stream>>>(di, dout, out, rows, d->head_dim);
    TR_CUDA_LAUNCHED();
    if (tr_attn_tc_eligible(d))
        return tr_attn_tc_bwd(ctx->stream, dq, dk, dv, dout, q, k, v, lse, di, d);
    if (d->head_dim <= 64) return bwd_launch<2, T>(ctx, dq, dk, dv, dout, q, k, v, lse, di, d);
    if (d->head_dim <= 128) return bwd_launch<4, T>(ctx, dq, dk, dv, dout, q, k, v, lse, di, d);
    return bwd_launch<8, T>(ctx, dq, dk, dv, dout, q, k, v, lse, di, d);
}

tr_status tr_cuda_attention_fwd(float *out, float *lse, const float *q, const float *k,
                                const float *v, const tr_attn_desc *d) {
    return attention_fwd("attention_fwd", out, lse, q, k, v, d);
}

tr_status tr_cuda_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                const float *k, const float *v, const float *out, const float *lse,
                                const tr_attn_desc *d) {
    return attention_bwd("attention_bwd", dq, dk, dv, dout, q, k, v, out, lse, d);
}

typedef __nv_bfloat16 bf16;

extern "C" tr_status tr_cuda_attention_fwd_bf16(uint16_t *out, float *lse, const uint16_t *q,
                                                const uint16_t *k, const uint16_t *v,
                                                const tr_attn_desc *d) {
    return attention_fwd("attention_fwd_bf16", (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k,
                         (const bf16 *)v, d);
}

extern "C" tr_status tr_cuda_attention_bwd_bf16(uint16_t *dq, uint16_t *dk, uint16_t *dv,
                                                const uint16_t *dout, const uint16_t *q,
                                                const uint16_t *k, const uint16_t *v,
                                                const uint16_t *out, const float *lse,
                                                const tr_attn_desc *d) {
    return attention_bwd("attention_bwd_bf16", (bf16 *)dq, (bf16 *)dk, (bf16 *)dv,
                         (const bf16 *)dout, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v,
                         (const bf16 *)out, lse, d);
}
