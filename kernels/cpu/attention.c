/* Causal GQA self-attention, blockwise with an online softmax (FlashAttention-2 schedule).
 * Forward keeps only the output and the row log-sum-exp; backward recomputes the scores tile by
 * tile. Extra memory is K^T and V^T ([B,G,D,T], the size of K and V, so O(seq) per head), the
 * rowsum(dO*O) vector [B,H,T], and O(block^2 + block*D) scratch per task; never [T,T].
 *
 * Backward runs two passes instead of using atomics: pass 1 owns a key block of one KV group
 * (dK, dV summed over that group's heads and all query blocks), pass 2 owns a query block
 * (dQ). Each output element has one writer, so results do not depend on thread count.
 *
 * Document masking (packed sequences, desc->doc_start) narrows each query's keys to
 * [doc start, t]. Because doc starts never decrease along a row, a query block needs no keys
 * before the doc start of its first query, and a key block is needed by no query past the first
 * document that begins after it; those whole tiles are skipped, so packing n documents of length
 * L into one row costs about n * L^2, not (n L)^2.
 *
 * Dropout (desc->dropout > 0) multiplies each row of probabilities by its mask row (1/(1-p) where
 * kept, 0 where dropped; kernels/common/attn_dropout.h) after the row sum l has taken the
 * undropped values, so lse is the undropped softmax's. Backward, with O the dropped output and
 * M the mask row: dV = (P M)^T dO; dP = (dO V^T) M; dS = P (dP - di) with di = rowsum(dO * O),
 * which equals rowsum(P M * dO V^T), so the di pass needs no change. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common/attn_dropout.h"
#include "kernels/common/lse_merge.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd/simd.h"
#include "kernels/cpu/threadpool.h"

#define TR_ATTN_BLOCK_Q 64
#define TR_ATTN_BLOCK_K 64
#define TR_ATTN_PACK    64 /* tokens per transpose task */

typedef struct attn_ctx {
    const tr_attn_desc *d;
    const tr_cpu_simd *simd;
    int bq, bk, nqb, nkb, hpg;
    int64_t qs, ks; /* token strides of q/out and k/v */
    int64_t ts;     /* row stride of kt/vt: seq padded so rows do not alias in the L1 sets */
    float *out, *lse, *dq, *dk, *dv, *di;
    float *kt, *vt; /* [B, G, D, T]: K^T and V^T, so score tiles are plain row-major products */
    const float *q, *k, *v, *dout, *o, *clse;
    int drop;          /* desc->dropout > 0 */
    uint32_t drop_thr; /* tr_attn_drop_threshold(p) */
    float keep_scale;  /* 1 / (1 - p) */
    atomic_int nomem;
} attn_ctx;

/* The keys of query `row` (batch b) inside the tile [k0, k0 + nk), as tile offsets [lo, hi);
 * lo == hi when none. */
typedef struct key_span {
    int lo, hi;
} key_span;

static key_span tile_keys(const tr_attn_desc *d, int b, int row, int k0, int nk) {
    key_span r = {0, nk};
    if (d->causal) {
        int n = row - k0 + 1;
        r.hi = n < 0 ? 0 : (n > nk ? nk : n);
    }
    if (d->doc_start) {
        int lo = d->doc_start[(int64_t)b * d->seq + row] - k0;
        r.lo = lo < 0 ? 0 : (lo > r.hi ? r.hi : lo);
    }
    return r;
}

/* First key any query of the block starting at q0 may see (doc starts are non-decreasing). */
static int first_key(const tr_attn_desc *d, int b, int q0) {
    return d->doc_start ? d->doc_start[(int64_t)b * d->seq + q0] : 0;
}

/* One past the last query that may see a key before `kend`: the first query whose document
 * starts at or after kend (found by bisection over the non-decreasing doc starts). */
static int last_query_end(const tr_attn_desc *d, int b, int kend) {
    if (!d->doc_start || kend >= d->seq) return d->seq;
    const int32_t *ds = d->doc_start + (int64_t)b * d->seq;
    int lo = kend, hi = d->seq; /* ds[kend - 1] < kend, so the answer lies in [kend, seq] */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (ds[mid] >= kend)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Row b is valid when it starts at 0 and each entry either opens a new document (== t) or
 * continues the previous one; by induction that gives 0 <= ds[t] <= t, non-decreasing and
 * contiguous documents. */
static tr_status check_doc_start(const tr_attn_desc *d) {
    for (int b = 0; b < d->batch; b++) {
        const int32_t *ds = d->doc_start + (int64_t)b * d->seq;
        if (d->seq > 0 && ds[0] != 0) return TR_ERR_INVALID;
        for (int t = 1; t < d->seq; t++)
            if (ds[t] != t && ds[t] != ds[t - 1]) return TR_ERR_INVALID;
    }
    return TR_OK;
}

static inline const float *qrow(const attn_ctx *c, const float *base, int b, int t, int h) {
    return base + ((int64_t)b * c->d->seq + t) * c->qs + (int64_t)h * c->d->head_dim;
}

/* K^T/V^T rows of (batch b, group g) start at ((b*G + g)*D)*ts. */
static inline int64_t kt_off(const attn_ctx *c, int b, int g) {
    return ((int64_t)b * c->d->groups + g) * c->d->head_dim * c->ts;
}

/* The mask row of query t (batch b, local head h) over the tile's keys [k0 + lo, k0 + hi):
 * mrow[j] = 1/(1-p) where kept, 0 where dropped. One Philox call serves a pair of keys here (its
 * other two words are the neighbouring query's). */
static void drop_row(const attn_ctx *c, int b, int h, int t, int k0, int lo, int hi, float *mrow) {
    const tr_attn_desc *d = c->d;
    tr_attn_drop_stream st =
        tr_attn_drop_stream_of(d->dropout_seed, d->dropout_round, d->dropout_layer,
                               d->head_offset + h, b + d->dropout_row0);
    int gt = t + d->dropout_q0, kb = k0 + d->dropout_k0; /* the mask's coordinates */
    for (int j = lo; j < hi;) {
        tr_philox4 r = tr_attn_drop_draw(st, gt, kb + j);
        int end = ((kb + j) | 1) + 1 - kb;
        if (end > hi) end = hi;
        for (; j < end; j++)
            mrow[j] = tr_attn_drop_kept(r, gt, kb + j, c->drop_thr) ? c->keep_scale : 0.0f;
    }
}

/* x[j] *= mrow[j] over [lo, hi). */
static void mul_row(float *x, const float *mrow, int lo, int hi) {
    for (int j = lo; j < hi; j++) x[j] *= mrow[j];
}

static void transpose_tasks(void *vc, int64_t t0, int64_t t1) {
    attn_ctx *c = vc;
    const tr_attn_desc *d = c->d;
    int D = d->head_dim, T = d->seq, nblk = (T + TR_ATTN_PACK - 1) / TR_ATTN_PACK;
    for (int64_t task = t0; task < t1; task++) {
        int blk = (int)(task % nblk);
        int64_t bg = task / nblk;
        int g = (int)(bg % d->groups), b = (int)(bg / d->groups);
        int s0 = blk * TR_ATTN_PACK, s1 = s0 + TR_ATTN_PACK < T ? s0 + TR_ATTN_PACK : T;
        for (int pass = 0; pass < (c->vt ? 2 : 1); pass++) {
            const float *src = (pass ? c->v : c->k) + (int64_t)b * T * c->ks + (int64_t)g * D;
            float *dst = (pass ? c->vt : c->kt) + kt_off(c, b, g);
            for (int t = s0; t < s1; t++)
                for (int e = 0; e < D; e++) dst[(int64_t)e * c->ts + t] = src[t * c->ks + e];
        }
    }
}

static tr_status pack_kv(attn_ctx *c, int with_v) {
    const tr_attn_desc *d = c->d;
    size_t n = (size_t)d->batch * d->groups * d->head_dim * (size_t)c->ts;
    c->kt = malloc(sizeof(float) * n);
    c->vt = with_v ? malloc(sizeof(float) * n) : NULL;
    if (!c->kt || (with_v && !c->vt)) return TR_ERR_NOMEM;
    int nblk = (d->seq + TR_ATTN_PACK - 1) / TR_ATTN_PACK;
    tr_cpu_parallel_for((int64_t)d->batch * d->groups * nblk, 1, transpose_tasks, c);
    return TR_OK;
}

static void attn_fwd_tasks(void *vc, int64_t t0, int64_t t1) {
    attn_ctx *c = vc;
    const tr_attn_desc *d = c->d;
    const tr_cpu_simd *simd = c->simd;
    int D = d->head_dim, T = d->seq, bq = c->bq, bk = c->bk;
    float *buf =
        malloc(sizeof(float) * ((size_t)bq * bk + (size_t)bq * D + 2 * (size_t)bq + (size_t)bk));
    if (!buf) {
        atomic_store(&c->nomem, 1);
        return;
    }
    float *S = buf, *O = S + bq * bk, *m = O + bq * D, *l = m + bq, *mrow = l + bq;
    for (int64_t task = t0; task < t1; task++) {
        int qb = (int)(task % c->nqb);
        int64_t bh = task / c->nqb;
        int h = (int)(bh % d->heads), b = (int)(bh / d->heads), g = h / c->hpg;
        int q0 = qb * bq, nq = q0 + bq <= T ? bq : T - q0;
        const float *Q = qrow(c, c->q, b, q0, h);
        const float *Kt = c->kt + kt_off(c, b, g);
        const float *Vg = c->v + (int64_t)b * T * c->ks + (int64_t)g * D;
        memset(O, 0, sizeof(float) * (size_t)nq * D);
        for (int i = 0; i < nq; i++) m[i] = -INFINITY, l[i] = 0.0f;
        int kend = d->causal ? q0 + nq : T;
        for (int k0 = first_key(d, b, q0); k0 < kend; k0 += bk) {
            int nk = k0 + bk <= kend ? bk : kend - k0;
            memset(S, 0, sizeof(float) * (size_t)nq * nk);
            simd->tile_mm(nq, nk, D, Q, c->qs, 1, Kt + k0, c->ts, S, nk);
            for (int i = 0; i < nq; i++) {
                float *s = S + i * nk;
                key_span ks = tile_keys(d, b, q0 + i, k0, nk);
                if (ks.hi == ks.lo) {
                    memset(s, 0, sizeof(float) * (size_t)nk);
                    continue;
                }
                /* scale > 0, so max(s)*scale = max(s*scale) */
                float mx = simd->row_max(s + ks.lo, ks.hi - ks.lo) * d->scale;
                float mnew = mx > m[i] ? mx : m[i];
                float alpha = m[i] == -INFINITY ? 0.0f : expf(m[i] - mnew);
                memset(s, 0, sizeof(float) * (size_t)ks.lo);
                l[i] = l[i] * alpha +
                       simd->exp_row(s + ks.lo, nk - ks.lo, ks.hi - ks.lo, d->scale, mnew);
                m[i] = mnew;
                if (c->drop) {
                    drop_row(c, b, h, q0 + i, k0, ks.lo, ks.hi, mrow);
                    mul_row(s, mrow, ks.lo, ks.hi);
                }
                if (alpha != 1.0f) simd->scale(O + i * D, D, alpha);
            }
            simd->tile_mm(nq, D, nk, S, nk, 1, Vg + (int64_t)k0 * c->ks, c->ks, O, D);
        }
        float *out = c->out + ((int64_t)b * T + q0) * c->qs + (int64_t)h * D;
        float *lse = c->lse + ((int64_t)b * d->heads + h) * T + q0;
        for (int i = 0; i < nq; i++) {
            float inv = 1.0f / l[i];
            for (int e = 0; e < D; e++) out[i * c->qs + e] = O[i * D + e] * inv;
            lse[i] = m[i] + logf(l[i]);
        }
    }
    free(buf);
}

static tr_status attn_setup(attn_ctx *c, const tr_attn_desc *d) {
    if (!d || d->batch < 0 || d->seq < 0 || d->heads <= 0 || d->groups <= 0 || d->head_dim <= 0)
        return TR_ERR_INVALID;
    if (d->heads % d->groups || d->block_q < 0 || d->block_k < 0 || !(d->scale > 0))
        return TR_ERR_INVALID;
    /* Any lowp is computed in fp32 here (the contract allows, never requires, the rounding). */
    if (d->lowp != 0 && d->lowp != TR_LOWP_BF16 && d->lowp != TR_LOWP_F16) return TR_ERR_INVALID;
    memset(c, 0, sizeof *c);
    c->d = d;
    c->simd = tr_cpu_simd_active();
    c->bq = d->block_q ? d->block_q : TR_ATTN_BLOCK_Q;
    c->bk = d->block_k ? d->block_k : TR_ATTN_BLOCK_K;
    c->nqb = (d->seq + c->bq - 1) / c->bq;
    c->nkb = (d->seq + c->bk - 1) / c->bk;
    c->hpg = d->heads / d->groups;
    c->qs = (int64_t)d->heads * d->head_dim;
    c->ks = (int64_t)d->groups * d->head_dim;
    /* A power-of-two seq would put every row of a K^T tile 4 KiB apart, all in one L1 set. */
    c->ts = (int64_t)d->seq + 16;
    atomic_init(&c->nomem, 0);
    if (d->dropout != 0.0f) {
        if (!tr_attn_drop_args_ok(d->dropout, d->dropout_layer, d->head_offset, d->heads,
                                  d->heads_total))
            return TR_ERR_INVALID;
        c->drop = 1;
        c->drop_thr = tr_attn_drop_threshold(d->dropout);
        c->keep_scale = 1.0f / (1.0f - d->dropout);
    }
    if (d->doc_start) {
        if (!d->causal) return TR_ERR_INVALID; /* documents are defined by the causal span */
        TR_TRY(check_doc_start(d));
    }
    return TR_OK;
}

tr_status tr_cpu_attention_fwd(float *out, float *lse, const float *q, const float *k,
                               const float *v, const tr_attn_desc *d) {
    attn_ctx c;
    TR_TRY(attn_setup(&c, d));
    if (d->batch == 0 || d->seq == 0) return TR_OK;
    if (!out || !lse || !q || !k || !v) return TR_ERR_INVALID;
    c.out = out, c.lse = lse, c.q = q, c.k = k, c.v = v;
    tr_status st = pack_kv(&c, 0);
    if (st == TR_OK) {
        tr_cpu_parallel_for((int64_t)d->batch * d->heads * c.nqb, 1, attn_fwd_tasks, &c);
        if (atomic_load(&c.nomem)) st = TR_ERR_NOMEM;
    }
    free(c.kt);
    return st;
}

/* di[b,h,t] = sum_e dO * O: the softmax-Jacobian term shared by every key of the row. */
static void attn_di_rows(void *vc, int64_t r0, int64_t r1) {
    attn_ctx *c = vc;
    const tr_attn_desc *d = c->d;
    int T = d->seq;
    for (int64_t r = r0; r < r1; r++) { /* r = (b*H + h)*T + t */
        int t = (int)(r % T);
        int64_t bh = r / T;
        int h = (int)(bh % d->heads), b = (int)(bh / d->heads);
        const float *dO = qrow(c, c->dout, b, t, h), *O = qrow(c, c->o, b, t, h);
        double s = 0.0;
        for (int e = 0; e < d->head_dim; e++) s += (double)dO[e] * O[e];
        c->di[r] = (float)s;
    }
}

/* Recompute P and dS = P*(dP - di)*scale for one (query block, key block) tile. With dropout,
 * dP is (dO V^T) times the mask, and P leaves as the dropped P M when dv (dV's operand). */
static void tile_grad(attn_ctx *c, int b, int h, int q0, int nq, int k0, int nk, float *P,
                      float *dS, float *mrow, bool dv) {
    const tr_attn_desc *d = c->d;
    const tr_cpu_simd *simd = c->simd;
    int D = d->head_dim, T = d->seq, g = h / c->hpg;
    const float *lse = c->clse + ((int64_t)b * d->heads + h) * T + q0;
    const float *di = c->di + ((int64_t)b * d->heads + h) * T + q0;
    memset(P, 0, sizeof(float) * (size_t)nq * nk);
    simd->tile_mm(nq, nk, D, qrow(c, c->q, b, q0, h), c->qs, 1, c->kt + kt_off(c, b, g) + k0, c->ts,
                  P, nk);
    memset(dS, 0, sizeof(float) * (size_t)nq * nk);
    simd->tile_mm(nq, nk, D, qrow(c, c->dout, b, q0, h), c->qs, 1, c->vt + kt_off(c, b, g) + k0,
                  c->ts, dS, nk);
    for (int i = 0; i < nq; i++) {
        key_span ks = tile_keys(d, b, q0 + i, k0, nk);
        float *p = P + i * nk;
        memset(p, 0, sizeof(float) * (size_t)ks.lo);
        simd->exp_row(p + ks.lo, nk - ks.lo, ks.hi - ks.lo, d->scale, lse[i]);
        if (c->drop) {
            drop_row(c, b, h, q0 + i, k0, ks.lo, ks.hi, mrow);
            mul_row(dS + i * nk, mrow, ks.lo, ks.hi);
        }
        simd->dsoftmax(dS + i * nk, p, nk, di[i], d->scale);
        if (c->drop && dv) mul_row(p, mrow, ks.lo, ks.hi);
    }
}

static void attn_dkv_tasks(void *vc, int64_t t0, int64_t t1) {
    attn_ctx *c = vc;
    const tr_attn_desc *d = c->d;
    int D = d->head_dim, T = d->seq, bq = c->bq, bk = c->bk;
    float *buf = malloc(sizeof(float) * (2 * (size_t)bq * bk + 2 * (size_t)bk * D + (size_t)bk));
    if (!buf) {
        atomic_store(&c->nomem, 1);
        return;
    }
    float *P = buf, *dS = P + bq * bk, *dK = dS + bq * bk, *dV = dK + bk * D, *mrow = dV + bk * D;
    for (int64_t task = t0; task < t1; task++) {
        int kb = (int)(task % c->nkb);
        int64_t bg = task / c->nkb;
        int g = (int)(bg % d->groups), b = (int)(bg / d->groups);
        int k0 = kb * bk, nk = k0 + bk <= T ? bk : T - k0;
        memset(dK, 0, sizeof(float) * (size_t)nk * D);
        memset(dV, 0, sizeof(float) * (size_t)nk * D);
        int qend = last_query_end(d, b, k0 + nk);
        for (int h = g * c->hpg; h < (g + 1) * c->hpg; h++) {
            for (int q0 = d->causal ? k0 : 0; q0 < qend; q0 += bq) {
                int nq = q0 + bq <= qend ? bq : qend - q0;
                tile_grad(c, b, h, q0, nq, k0, nk, P, dS, mrow, true);
                /* dV += P^T dO, dK += dS^T Q */
                c->simd->tile_mm(nk, D, nq, P, 1, nk, qrow(c, c->dout, b, q0, h), c->qs, dV, D);
                c->simd->tile_mm(nk, D, nq, dS, 1, nk, qrow(c, c->q, b, q0, h), c->qs, dK, D);
            }
        }
        int64_t kvoff = ((int64_t)b * T + k0) * c->ks + (int64_t)g * D;
        for (int j = 0; j < nk; j++) {
            memcpy(c->dk + kvoff + j * c->ks, dK + j * D, sizeof(float) * (size_t)D);
            memcpy(c->dv + kvoff + j * c->ks, dV + j * D, sizeof(float) * (size_t)D);
        }
    }
    free(buf);
}

static void attn_dq_tasks(void *vc, int64_t t0, int64_t t1) {
    attn_ctx *c = vc;
    const tr_attn_desc *d = c->d;
    int D = d->head_dim, T = d->seq, bq = c->bq, bk = c->bk;
    float *buf = malloc(sizeof(float) * (2 * (size_t)bq * bk + (size_t)bq * D + (size_t)bk));
    if (!buf) {
        atomic_store(&c->nomem, 1);
        return;
    }
    float *P = buf, *dS = P + bq * bk, *dQ = dS + bq * bk, *mrow = dQ + bq * D;
    for (int64_t task = t0; task < t1; task++) {
        int qb = (int)(task % c->nqb);
        int64_t bh = task / c->nqb;
        int h = (int)(bh % d->heads), b = (int)(bh / d->heads), g = h / c->hpg;
        int q0 = qb * bq, nq = q0 + bq <= T ? bq : T - q0;
        memset(dQ, 0, sizeof(float) * (size_t)nq * D);
        int kend = d->causal ? q0 + nq : T;
        for (int k0 = first_key(d, b, q0); k0 < kend; k0 += bk) {
            int nk = k0 + bk <= kend ? bk : kend - k0;
            tile_grad(c, b, h, q0, nq, k0, nk, P, dS, mrow, false);
            const float *K = c->k + ((int64_t)b * T + k0) * c->ks + (int64_t)g * D;
            c->simd->tile_mm(nq, D, nk, dS, nk, 1, K, c->ks, dQ, D); /* dQ += dS K */
        }
        float *dq = c->dq + ((int64_t)b * T + q0) * c->qs + (int64_t)h * D;
        for (int i = 0; i < nq; i++) memcpy(dq + i * c->qs, dQ + i * D, sizeof(float) * (size_t)D);
    }
    free(buf);
}

tr_status tr_cpu_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                               const float *k, const float *v, const float *out, const float *lse,
                               const tr_attn_desc *d) {
    attn_ctx c;
    TR_TRY(attn_setup(&c, d));
    if (d->batch == 0 || d->seq == 0) return TR_OK;
    if (!dq || !dk || !dv || !dout || !q || !k || !v || !out || !lse) return TR_ERR_INVALID;
    c.dq = dq, c.dk = dk, c.dv = dv, c.dout = dout;
    c.q = q, c.k = k, c.v = v, c.o = out, c.clse = lse;
    int64_t rows = (int64_t)d->batch * d->heads * d->seq;
    c.di = malloc(sizeof(float) * (size_t)rows);
    tr_status st = c.di ? pack_kv(&c, 1) : TR_ERR_NOMEM;
    if (st == TR_OK) {
        tr_cpu_parallel_for(rows, 64, attn_di_rows, &c);
        tr_cpu_parallel_for((int64_t)d->batch * d->groups * c.nkb, 1, attn_dkv_tasks, &c);
        tr_cpu_parallel_for((int64_t)d->batch * d->heads * c.nqb, 1, attn_dq_tasks, &c);
        if (atomic_load(&c.nomem)) st = TR_ERR_NOMEM;
    }
    free(c.di), free(c.kt), free(c.vt);
    return st;
}

tr_status tr_cpu_attention_merge(float *out, float *lse, int64_t lse_ld, const float *out_b,
                                 const float *lse_b, int rows, int heads, int head_dim) {
    if (rows < 0 || heads < 1 || head_dim < 1 || lse_ld < rows) return TR_ERR_INVALID;
    if (rows && (!out || !lse || !out_b || !lse_b)) return TR_ERR_INVALID;
    for (int t = 0; t < rows; t++)
        for (int h = 0; h < heads; h++) {
            int64_t at = ((int64_t)t * heads + h) * head_dim;
            tr_lse_merge_row(out + at, lse + h * lse_ld + t, out_b + at,
                             lse_b[(int64_t)h * rows + t], head_dim);
        }
    return TR_OK;
}
