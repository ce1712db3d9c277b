/* The cpu-strict device (runtime/device/device.h), a test mode: the CPU op table on buffers the
 * host cannot touch outside ops, copies and communication.
 *
 * Every allocation is its own anonymous mapping, PROT_NONE at rest. The guarded op table checks
 * that every pointer it is handed lies in one of those mappings (a host pointer where device
 * memory is required would work on the cpu backend and fail on a GPU), opens all mappings,
 * runs the CPU op and closes them again. Copies and collectives do the same. Any other host
 * read or write of a device buffer faults at once, with a stack trace under a debugger or ASan.
 *
 * A collective keeps the mappings open from its start until its request is released (MPI may
 * read or write the buffers at any point in between, also from the peer process), so host
 * accesses that overlap a pending nonblocking transfer are not caught; blocking calls close at
 * once. The op table has no context argument, so the ops find their device through a
 * thread-local binding set when the device opens (like tr_cuda_bind). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/log.h"
#include "runtime/device/internal.h"

typedef struct region {
    char *base;
    size_t len; /* mapped bytes (whole pages) */
} region;

typedef struct strict_impl {
    region *r;
    int n, cap;
    int depth; /* open ops, copies and pending collectives */
    size_t page;
    size_t used[TR_MEM_KIND_COUNT], peak[TR_MEM_KIND_COUNT];
} strict_impl;

static _Thread_local tr_device *bound;

static strict_impl *impl_of(const tr_device *dev) {
    return dev->impl;
}

static int find(const strict_impl *s, const void *p) {
    const char *c = p;
    for (int i = 0; i < s->n; i++)
        if (c >= s->r[i].base && c < s->r[i].base + s->r[i].len) return i;
    return -1;
}

static void protect_all(strict_impl *s, int prot) {
    for (int i = 0; i < s->n; i++)
        if (mprotect(s->r[i].base, s->r[i].len, prot) != 0)
            TR_ERROR("cpu-strict: mprotect failed on a %zu-byte buffer", s->r[i].len);
}

static void open_all(strict_impl *s) {
    if (s->depth++ == 0) protect_all(s, PROT_READ | PROT_WRITE);
}

static void close_all(strict_impl *s) {
    if (s->depth > 0 && --s->depth == 0) protect_all(s, PROT_NONE);
}

/* Every non-NULL pointer must be device memory. */
static tr_status check_ptrs(const strict_impl *s, const char *what, const void *const *ptrs,
                            size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ptrs[i] && find(s, ptrs[i]) < 0) {
            TR_ERROR("cpu-strict: %s was handed host memory (pointer argument %zu, %p) where a "
                     "device buffer is required",
                     what, i + 1, ptrs[i]);
            return TR_ERR_INVALID;
        }
    return TR_OK;
}

static tr_status enter(const char *op, const void *const *ptrs, size_t n, strict_impl **out) {
    if (!bound) {
        TR_ERROR("cpu-strict: op %s called on a thread without a cpu-strict device", op);
        return TR_ERR_INVALID;
    }
    strict_impl *s = impl_of(bound);
    TR_TRY(check_ptrs(s, op, ptrs, n));
    open_all(s);
    *out = s;
    return TR_OK;
}

#define ENTER(op, ...)                                                                             \
    const void *const ptrs_[] = {__VA_ARGS__};                                                     \
    strict_impl *s_;                                                                               \
    TR_TRY(enter(op, ptrs_, sizeof ptrs_ / sizeof *ptrs_, &s_))
#define LEAVE(call)                                                                                \
    do {                                                                                           \
        tr_status st_ = (call);                                                                    \
        close_all(s_);                                                                             \
        return st_;                                                                                \
    } while (0)
#define CPU tr_ops_cpu()

static tr_status g_gemm(tr_transpose ta, tr_transpose tb, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc) {
    ENTER("gemm", a, b, c);
    LEAVE(CPU->gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
}
static tr_status g_gemm_lowp(tr_lowp dtype, tr_transpose ta, tr_transpose tb, int m, int n, int k,
                             float alpha, const float *a, int lda, const float *b, int ldb,
                             float beta, float *c, int ldc) {
    ENTER("gemm_lowp", a, b, c);
    LEAVE(CPU->gemm_lowp(dtype, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
}
static tr_status g_gemm_lowp_ex(tr_lowp dtype, tr_transpose ta, tr_transpose tb, int m, int n,
                                int k, float alpha, tr_gemm_operand a, tr_gemm_operand b,
                                float beta, float *c, int ldc, const float *bias) {
    ENTER("gemm_lowp_ex", a.p, b.p, c, bias);
    LEAVE(CPU->gemm_lowp_ex(dtype, ta, tb, m, n, k, alpha, a, b, beta, c, ldc, bias));
}
static tr_status g_cast_lowp(tr_lowp dtype, uint16_t *dst, const float *src, int64_t n) {
    ENTER("cast_lowp", dst, src);
    LEAVE(CPU->cast_lowp(dtype, dst, src, n));
}
static tr_status g_round_lowp(tr_lowp dtype, float *x, int64_t n) {
    ENTER("round_lowp", x);
    LEAVE(CPU->round_lowp(dtype, x, n));
}
static tr_status g_unscale_check(float *g, int64_t n, float inv_scale, float *found_inf) {
    ENTER("unscale_check", g, found_inf);
    LEAVE(CPU->unscale_check(g, n, inv_scale, found_inf));
}
static tr_status g_bias_add(float *y, const float *bias, int rows, int cols) {
    ENTER("bias_add", y, bias);
    LEAVE(CPU->bias_add(y, bias, rows, cols));
}
static tr_status g_bias_grad(float *dbias, const float *dy, int rows, int cols) {
    ENTER("bias_grad", dbias, dy);
    LEAVE(CPU->bias_grad(dbias, dy, rows, cols));
}
static tr_status g_add(float *y, const float *x, int64_t n) {
    ENTER("add", y, x);
    LEAVE(CPU->add(y, x, n));
}
static tr_status g_fill(float *x, int64_t n, float value) {
    ENTER("fill", x);
    LEAVE(CPU->fill(x, n, value));
}
static tr_status g_scale(float *x, int64_t n, float sc) {
    ENTER("scale", x);
    LEAVE(CPU->scale(x, n, sc));
}
static tr_status g_sum_squares(float *out, const float *x, int64_t n) {
    ENTER("sum_squares", out, x);
    LEAVE(CPU->sum_squares(out, x, n));
}
static tr_status g_copy_2d(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                           int64_t cols) {
    ENTER("copy_2d", dst, src);
    LEAVE(CPU->copy_2d(dst, ldd, src, lds, rows, cols));
}
static tr_status g_fill_2d(float *x, int64_t ld, int64_t rows, int64_t cols, float value) {
    ENTER("fill_2d", x);
    LEAVE(CPU->fill_2d(x, ld, rows, cols, value));
}
static tr_status g_loss_mean(float *out, const float *losses, const int32_t *targets, int rows) {
    ENTER("loss_mean", out, losses, targets);
    LEAVE(CPU->loss_mean(out, losses, targets, rows));
}
static tr_status g_embedding_fwd(float *out, const int32_t *ids, const float *table, int n, int dim,
                                 int vs, int ve) {
    ENTER("embedding_fwd", out, ids, table);
    LEAVE(CPU->embedding_fwd(out, ids, table, n, dim, vs, ve));
}
static tr_status g_embedding_bwd(float *dtable, const int32_t *ids, const float *dout, int n,
                                 int dim, int vs, int ve) {
    ENTER("embedding_bwd", dtable, ids, dout);
    LEAVE(CPU->embedding_bwd(dtable, ids, dout, n, dim, vs, ve));
}
static tr_status g_pos_embedding_fwd(float *x, const float *wpe, int batch, int seq, int dim,
                                     int pos_offset) {
    ENTER("pos_embedding_fwd", x, wpe);
    LEAVE(CPU->pos_embedding_fwd(x, wpe, batch, seq, dim, pos_offset));
}
static tr_status g_pos_embedding_bwd(float *dwpe, const float *dx, int batch, int seq, int dim,
                                     int pos_offset) {
    ENTER("pos_embedding_bwd", dwpe, dx);
    LEAVE(CPU->pos_embedding_bwd(dwpe, dx, batch, seq, dim, pos_offset));
}
static tr_status g_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w,
                                 const float *b, int rows, int dim, float eps, int zc) {
    ENTER("layernorm_fwd", y, mean, rstd, x, w, b);
    LEAVE(CPU->layernorm_fwd(y, mean, rstd, x, w, b, rows, dim, eps, zc));
}
static tr_status g_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                                 const float *w, const float *mean, const float *rstd, int rows,
                                 int dim, int zc) {
    ENTER("layernorm_bwd", dx, dw, db, dy, x, w, mean, rstd);
    LEAVE(CPU->layernorm_bwd(dx, dw, db, dy, x, w, mean, rstd, rows, dim, zc));
}
static tr_status g_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int rows,
                               int dim, float eps, int zc) {
    ENTER("rmsnorm_fwd", y, rstd, x, w);
    LEAVE(CPU->rmsnorm_fwd(y, rstd, x, w, rows, dim, eps, zc));
}
static tr_status g_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x,
                               const float *w, const float *rstd, int rows, int dim, int zc) {
    ENTER("rmsnorm_bwd", dx, dw, dy, x, w, rstd);
    LEAVE(CPU->rmsnorm_bwd(dx, dw, dy, x, w, rstd, rows, dim, zc));
}
static tr_status g_rope_table(float *cos_t, float *sin_t, const tr_rope_params *p, int seq,
                              int pos_offset) {
    ENTER("rope_table", cos_t, sin_t);
    LEAVE(CPU->rope_table(cos_t, sin_t, p, seq, pos_offset));
}
static tr_status g_rope_fwd(float *y, const float *x, const float *cos_t, const float *sin_t,
                            int batch, int seq, int heads, int head_dim, int rot_dim) {
    ENTER("rope_fwd", y, x, cos_t, sin_t);
    LEAVE(CPU->rope_fwd(y, x, cos_t, sin_t, batch, seq, heads, head_dim, rot_dim));
}
static tr_status g_rope_bwd(float *dx, const float *dy, const float *cos_t, const float *sin_t,
                            int batch, int seq, int heads, int head_dim, int rot_dim) {
    ENTER("rope_bwd", dx, dy, cos_t, sin_t);
    LEAVE(CPU->rope_bwd(dx, dy, cos_t, sin_t, batch, seq, heads, head_dim, rot_dim));
}
static tr_status g_attention_fwd(float *out, float *lse, const float *q, const float *k,
                                 const float *v, const tr_attn_desc *d) {
    ENTER("attention_fwd", out, lse, q, k, v, d ? d->doc_start : NULL);
    LEAVE(CPU->attention_fwd(out, lse, q, k, v, d));
}
static tr_status g_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                 const float *k, const float *v, const float *out, const float *lse,
                                 const tr_attn_desc *d) {
    ENTER("attention_bwd", dq, dk, dv, dout, q, k, v, out, lse, d ? d->doc_start : NULL);
    LEAVE(CPU->attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, d));
}
static tr_status g_attention_merge(float *out, float *lse, int64_t lse_ld, const float *out_b,
                                   const float *lse_b, int rows, int heads, int head_dim) {
    ENTER("attention_merge", out, lse, out_b, lse_b);
    LEAVE(CPU->attention_merge(out, lse, lse_ld, out_b, lse_b, rows, heads, head_dim));
}
static tr_status g_gelu_fwd(float *y, const float *x, int64_t n, int t) {
    ENTER("gelu_fwd", y, x);
    LEAVE(CPU->gelu_fwd(y, x, n, t));
}
static tr_status g_gelu_bwd(float *dx, const float *dy, const float *x, int64_t n, int t) {
    ENTER("gelu_bwd", dx, dy, x);
    LEAVE(CPU->gelu_bwd(dx, dy, x, n, t));
}
static tr_status g_swiglu_fwd(float *y, const float *x, int rows, int ffn) {
    ENTER("swiglu_fwd", y, x);
    LEAVE(CPU->swiglu_fwd(y, x, rows, ffn));
}
static tr_status g_swiglu_bwd(float *dx, const float *dy, const float *x, int rows, int ffn) {
    ENTER("swiglu_bwd", dx, dy, x);
    LEAVE(CPU->swiglu_bwd(dx, dy, x, rows, ffn));
}
static tr_status g_dropout_fwd(float *y, const float *x, int64_t n, float p, uint64_t seed,
                               uint64_t offset) {
    ENTER("dropout_fwd", y, x);
    LEAVE(CPU->dropout_fwd(y, x, n, p, seed, offset));
}
static tr_status g_dropout_bwd(float *dx, const float *dy, int64_t n, float p, uint64_t seed,
                               uint64_t offset) {
    ENTER("dropout_bwd", dx, dy);
    LEAVE(CPU->dropout_bwd(dx, dy, n, p, seed, offset));
}
static tr_status g_ce_stats(float *stats, const float *logits, const int32_t *targets, int rows,
                            int vl, int vs) {
    ENTER("ce_stats", stats, logits, targets);
    LEAVE(CPU->ce_stats(stats, logits, targets, rows, vl, vs));
}
static tr_status g_ce_merge(float *stats, const float *other, int rows) {
    ENTER("ce_merge", stats, other);
    LEAVE(CPU->ce_merge(stats, other, rows));
}
static tr_status g_ce_rebase(float *stats, const float *global_max, int rows) {
    ENTER("ce_rebase", stats, global_max);
    LEAVE(CPU->ce_rebase(stats, global_max, rows));
}
static tr_status g_ce_loss(float *loss, const float *stats, const int32_t *targets, int rows) {
    ENTER("ce_loss", loss, stats, targets);
    LEAVE(CPU->ce_loss(loss, stats, targets, rows));
}
static tr_status g_ce_bwd(float *logits, const float *stats, const int32_t *targets,
                          const float *dloss, int rows, int vl, int vs) {
    ENTER("ce_bwd", logits, stats, targets, dloss);
    LEAVE(CPU->ce_bwd(logits, stats, targets, dloss, rows, vl, vs));
}
static tr_status g_adamw(float *param, const float *grad, float *m, float *v, int64_t n,
                         const tr_adamw_params *p) {
    ENTER("adamw", param, grad, m, v);
    LEAVE(CPU->adamw(param, grad, m, v, n, p));
}
static tr_status g_sgd(float *param, const float *grad, float *mom, int64_t n,
                       const tr_sgd_params *p) {
    ENTER("sgd", param, grad, mom);
    LEAVE(CPU->sgd(param, grad, mom, n, p));
}

static tr_status g_widen_lowp(tr_lowp dtype, float *dst, const uint16_t *src, int64_t n) {
    ENTER("widen_lowp", dst, src);
    LEAVE(CPU->widen_lowp(dtype, dst, src, n));
}

static tr_status g_row_sum_squares(float *out, const float *x, int rows, int cols) {
    ENTER("row_sum_squares", out, x);
    LEAVE(CPU->row_sum_squares(out, x, rows, cols));
}
static tr_status g_col_scale(float *y, const float *s, int rows, int cols) {
    ENTER("col_scale", y, s);
    LEAVE(CPU->col_scale(y, s, rows, cols));
}
static tr_status g_col_dot(float *out, const float *a, const float *b, const float *s, int rows,
                           int cols) {
    ENTER("col_dot", out, a, b, s);
    LEAVE(CPU->col_dot(out, a, b, s, rows, cols));
}
static tr_status g_norm_scale(float *scale, float *inv, const float *mag, const float *sq, int n) {
    ENTER("norm_scale", scale, inv, mag, sq);
    LEAVE(CPU->norm_scale(scale, inv, mag, sq, n));
}

/* The MoE ops: the desc is a host struct, its bias backend memory. */
static tr_status g_moe_topk(int32_t *idx, float *prob, const float *logits,
                            const tr_route_desc *d) {
    ENTER("moe_topk", idx, prob, logits, d ? d->bias : NULL);
    LEAVE(CPU->moe_topk(idx, prob, logits, d));
}
static tr_status g_moe_topk_bwd(float *dlogits, const float *dprob, const float *logits,
                                const int32_t *idx, const tr_route_desc *d) {
    ENTER("moe_topk_bwd", dlogits, dprob, logits, idx, d ? d->bias : NULL);
    LEAVE(CPU->moe_topk_bwd(dlogits, dprob, logits, idx, d));
}
static tr_status g_moe_permute(float *xp, const float *x, const int32_t *row_a, int rows,
                               int tokens, int topk, int dim) {
    ENTER("moe_permute", xp, x, row_a);
    LEAVE(CPU->moe_permute(xp, x, row_a, rows, tokens, topk, dim));
}
static tr_status g_moe_permute_bwd(float *dx, const float *dxp, const int32_t *pos, int rows,
                                   int tokens, int topk, int dim) {
    ENTER("moe_permute_bwd", dx, dxp, pos);
    LEAVE(CPU->moe_permute_bwd(dx, dxp, pos, rows, tokens, topk, dim));
}
static tr_status g_moe_unpermute(float *y, const float *ye, const float *prob, const int32_t *pos,
                                 int rows, int tokens, int topk, int dim) {
    ENTER("moe_unpermute", y, ye, prob, pos);
    LEAVE(CPU->moe_unpermute(y, ye, prob, pos, rows, tokens, topk, dim));
}
static tr_status g_moe_unpermute_bwd(float *dye, float *dprob, const float *dy, const float *ye,
                                     const float *prob, const int32_t *row_a, const int32_t *pos,
                                     int rows, int tokens, int topk, int dim) {
    ENTER("moe_unpermute_bwd", dye, dprob, dy, ye, prob, row_a, pos);
    LEAVE(CPU->moe_unpermute_bwd(dye, dprob, dy, ye, prob, row_a, pos, rows, tokens, topk, dim));
}

static const tr_ops strict_ops = {
    .name = "cpu-strict",
    .gemm = g_gemm,
    .gemm_lowp = g_gemm_lowp,
    .gemm_lowp_ex = g_gemm_lowp_ex,
    .cast_lowp = g_cast_lowp,
    .round_lowp = g_round_lowp,
    .unscale_check = g_unscale_check,
    .bias_add = g_bias_add,
    .bias_grad = g_bias_grad,
    .add = g_add,
    .fill = g_fill,
    .scale = g_scale,
    .sum_squares = g_sum_squares,
    .copy_2d = g_copy_2d,
    .fill_2d = g_fill_2d,
    .loss_mean = g_loss_mean,
    .embedding_fwd = g_embedding_fwd,
    .embedding_bwd = g_embedding_bwd,
    .pos_embedding_fwd = g_pos_embedding_fwd,
    .pos_embedding_bwd = g_pos_embedding_bwd,
    .layernorm_fwd = g_layernorm_fwd,
    .layernorm_bwd = g_layernorm_bwd,
    .rmsnorm_fwd = g_rmsnorm_fwd,
    .rmsnorm_bwd = g_rmsnorm_bwd,
    .rope_table = g_rope_table,
    .rope_fwd = g_rope_fwd,
    .rope_bwd = g_rope_bwd,
    .attention_fwd = g_attention_fwd,
    .attention_bwd = g_attention_bwd,
    .attention_merge = g_attention_merge,
    .gelu_fwd = g_gelu_fwd,
    .gelu_bwd = g_gelu_bwd,
    .swiglu_fwd = g_swiglu_fwd,
    .swiglu_bwd = g_swiglu_bwd,
    .dropout_fwd = g_dropout_fwd,
    .dropout_bwd = g_dropout_bwd,
    .ce_stats = g_ce_stats,
    .ce_merge = g_ce_merge,
    .ce_rebase = g_ce_rebase,
    .ce_loss = g_ce_loss,
    .ce_bwd = g_ce_bwd,
    .adamw = g_adamw,
    .sgd = g_sgd,
    .widen_lowp = g_widen_lowp,
    .row_sum_squares = g_row_sum_squares,
    .col_scale = g_col_scale,
    .col_dot = g_col_dot,
    .norm_scale = g_norm_scale,
    .moe_topk = g_moe_topk,
    .moe_topk_bwd = g_moe_topk_bwd,
    .moe_permute = g_moe_permute,
    .moe_permute_bwd = g_moe_permute_bwd,
    .moe_unpermute = g_moe_unpermute,
    .moe_unpermute_bwd = g_moe_unpermute_bwd,
};

/* ------------------------------------------------------------------ memory ------------- */

static tr_status strict_alloc(tr_device *dev, tr_mem_kind kind, size_t bytes, void **out) {
    strict_impl *s = impl_of(dev);
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        region *r = realloc(s->r, (size_t)cap * sizeof *r);
        if (!r) return TR_ERR_NOMEM;
        s->r = r;
        s->cap = cap;
    }
    size_t len = (bytes + s->page - 1) / s->page * s->page;
    if (!len) len = s->page;
    /* Anonymous mappings start zeroed, as every device allocation must. */
    void *p = mmap(NULL, len, s->depth ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        TR_ERROR("cpu-strict: cannot map %zu bytes of %s", len, tr_mem_kind_name(kind));
        return TR_ERR_NOMEM;
    }
    s->r[s->n++] = (region){p, len};
    s->used[kind] += len;
    if (s->used[kind] > s->peak[kind]) s->peak[kind] = s->used[kind];
    *out = p;
    return TR_OK;
}

static void strict_free(tr_device *dev, tr_mem_kind kind, void *p) {
    strict_impl *s = impl_of(dev);
    int i = find(s, p);
    if (i < 0 || s->r[i].base != p) {
        TR_ERROR("cpu-strict: free of %p, which is not a device allocation", p);
        return;
    }
    munmap(s->r[i].base, s->r[i].len);
    s->used[kind] -= s->r[i].len < s->used[kind] ? s->r[i].len : s->used[kind];
    s->r[i] = s->r[--s->n];
}

static tr_status strict_copy(tr_device *dev, void *dst, const void *src, size_t bytes,
                             tr_copy_dir dir) {
    strict_impl *s = impl_of(dev);
    /* The device side of each direction must be a device buffer (and the whole range inside
     * it); the host side must not be one. */
    const void *dev_ptrs[2] = {dir != TR_COPY_TO_HOST ? dst : NULL,
                               dir != TR_COPY_TO_DEVICE ? src : NULL};
    const void *host_ptr = dir == TR_COPY_TO_DEVICE ? src : dir == TR_COPY_TO_HOST ? dst : NULL;
    TR_TRY(check_ptrs(s, "a device copy", dev_ptrs, 2));
    for (int k = 0; k < 2; k++)
        if (dev_ptrs[k] && find(s, (const char *)dev_ptrs[k] + bytes - 1) != find(s, dev_ptrs[k])) {
            TR_ERROR("cpu-strict: a device copy of %zu bytes runs past its buffer", bytes);
            return TR_ERR_INVALID;
        }
    if (host_ptr && find(s, host_ptr) >= 0) {
        TR_ERROR("cpu-strict: a %s copy was handed a device buffer as its host side",
                 dir == TR_COPY_TO_DEVICE ? "host-to-device" : "device-to-host");
        return TR_ERR_INVALID;
    }
    open_all(s);
    memmove(dst, src, bytes);
    close_all(s);
    return TR_OK;
}

static tr_status strict_memset0(tr_device *dev, void *p, size_t bytes) {
    strict_impl *s = impl_of(dev);
    const void *ptrs[1] = {p};
    TR_TRY(check_ptrs(s, "a device memset", ptrs, 1));
    open_all(s);
    memset(p, 0, bytes);
    close_all(s);
    return TR_OK;
}

static tr_status strict_sync(tr_device *dev) {
    (void)dev;
    return TR_OK;
}

/* ------------------------------------------------------------------ comm --------------- */

typedef struct strict_comm {
    tr_comm *inner; /* the MPI backend */
    tr_device *dev;
} strict_comm;

static strict_comm *sc_of(const tr_comm *c) {
    return c->impl;
}

static int sc_group_size(const tr_comm *c, int g) {
    tr_comm *m = sc_of(c)->inner;
    return m->backend->group_size(m, g);
}
static int sc_group_rank(const tr_comm *c, int g) {
    tr_comm *m = sc_of(c)->inner;
    return m->backend->group_rank(m, g);
}
static int sc_world_rank_of(const tr_comm *c, int g, int r) {
    tr_comm *m = sc_of(c)->inner;
    return m->backend->world_rank_of(m, g, r);
}

static tr_status sc_start(tr_comm *c, const tr_comm_call *call, tr_comm_request *req) {
    strict_comm *sc = sc_of(c);
    strict_impl *s = impl_of(sc->dev);
    const void *ptrs[2] = {call->send, call->kind == TR_COMM_BARRIER ? NULL : call->recv};
    TR_TRY(check_ptrs(s, tr_comm_kind_name(call->kind), ptrs, 2));
    for (int i = 0; i < call->n_p2p; i++) {
        const void *b[1] = {call->p2p[i].buf};
        TR_TRY(check_ptrs(s, "a p2p batch", b, 1));
    }
    open_all(s); /* until release: MPI may use the buffers until the request completes */
    tr_status st = sc->inner->backend->start(sc->inner, call, req);
    if (st != TR_OK) close_all(s);
    return st;
}

static tr_status sc_test(tr_comm *c, tr_comm_request *req, bool *done) {
    tr_comm *m = sc_of(c)->inner;
    return m->backend->test(m, req, done);
}

static tr_status sc_wait(tr_comm *c, tr_comm_request *req) {
    tr_comm *m = sc_of(c)->inner;
    return m->backend->wait(m, req);
}

static void sc_release(tr_comm *c, tr_comm_request *req) {
    strict_comm *sc = sc_of(c);
    sc->inner->backend->release(sc->inner, req);
    close_all(impl_of(sc->dev));
}

static void sc_abort(tr_comm *c, int exit_code) {
    tr_comm *m = sc_of(c)->inner;
    m->backend->abort(m, exit_code);
}

static void sc_destroy(tr_comm *c) {
    strict_comm *sc = sc_of(c);
    tr_comm_destroy(sc->inner);
    free(sc);
    free(c);
}

static const tr_comm_backend strict_comm_backend = {
    .name = "mpi-strict",
    .group_size = sc_group_size,
    .group_rank = sc_group_rank,
    .world_rank_of = sc_world_rank_of,
    .start = sc_start,
    .test = sc_test,
    .wait = sc_wait,
    .release = sc_release,
    .abort = sc_abort,
    .destroy = sc_destroy,
};

static tr_status strict_comm_create(tr_device *dev, const struct tr_parallel_state *ps,
                                    const tr_comm_options *opt, bool nccl, tr_diags *diags,
                                    tr_comm **out) {
    (void)nccl; /* stands in for both: the point is where the buffers live */
    *out = NULL;
    tr_comm *c = calloc(1, sizeof *c);
    strict_comm *sc = calloc(1, sizeof *sc);
    tr_status st = c && sc ? tr_comm_mpi_create(ps, opt, diags, &sc->inner) : TR_ERR_NOMEM;
    if (st != TR_OK) {
        free(c);
        free(sc);
        return st;
    }
    sc->dev = dev;
    c->backend = &strict_comm_backend;
    c->impl = sc;
    c->diags = diags;
    c->timeout_s = sc->inner->timeout_s;
    c->reduce_mode = sc->inner->reduce_mode;
    *out = c;
    return TR_OK;
}

static size_t strict_peak(const tr_device *dev, tr_mem_kind kind) {
    return impl_of(dev)->peak[kind];
}

static void strict_log_peaks(const tr_device *dev) {
    tr_device_log_kind_peaks(impl_of(dev)->peak, "cpu-strict");
}

static void strict_close(tr_device *dev) {
    strict_impl *s = impl_of(dev);
    if (!s) return;
    for (int i = 0; i < s->n; i++) munmap(s->r[i].base, s->r[i].len);
    free(s->r);
    free(s);
    dev->impl = NULL;
    if (bound == dev) bound = NULL;
}

static const tr_device_backend strict_backend = {
    strict_alloc,       strict_free, strict_copy,      strict_memset0, strict_sync,
    strict_comm_create, strict_peak, strict_log_peaks, strict_close};

tr_status tr_device_strict_open(tr_device *dev, tr_diags *d) {
    (void)d;
    strict_impl *s = calloc(1, sizeof *s);
    if (!s) return TR_ERR_NOMEM;
    long page = sysconf(_SC_PAGESIZE);
    s->page = page > 0 ? (size_t)page : 4096;
    dev->kind = TR_DEVICE_CPU_STRICT;
    dev->name = "cpu-strict";
    dev->ops = &strict_ops;
    dev->be = &strict_backend;
    dev->impl = s;
    bound = dev;
    return TR_OK;
}
