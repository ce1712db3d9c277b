/* The compute-op table. Every backend (kernels/cpu/, kernels/cuda/) fills one tr_ops with the same
 * semantics, so the model and training loop are written once against these pointers.
 *
 * Conventions (see docs/kernels.md for layouts):
 *  - all tensors are fp32 and row-major (except the bf16/fp16 bit patterns cast_lowp writes and
 *    gemm_lowp_ex may read); on CPU they are host pointers, on CUDA device pointers;
 *  - activations are [B, T, ...] with the token index t fastest after the batch index;
 *  - parameter gradients always ACCUMULATE (+=), so micro-batches can be summed into one flat
 *    gradient buffer; activation gradients are OVERWRITTEN, except the norms' dx, which
 *    accumulates because it lands in the residual stream;
 *  - element-wise ops accept out == in (in-place);
 *  - every op validates its sizes and returns TR_ERR_INVALID rather than touching memory out of
 *    range; TR_ERR_NOMEM when a scratch allocation fails. */
#ifndef TR_KERNELS_OPS_H
#define TR_KERNELS_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "kernels/common/moe_desc.h"
#include "kernels/common/rope_freq.h"

typedef enum tr_transpose { TR_NOTRANS = 0, TR_TRANS = 1 } tr_transpose;

/* The half-precision formats of mixed-precision training (docs/runtime.md, "Mixed precision"). */
typedef enum tr_lowp { TR_LOWP_BF16 = 1, TR_LOWP_F16 = 2 } tr_lowp;

/* A GEMM operand that may already be half precision: p is an fp32 buffer (lowp false) or a
 * buffer of bf16/fp16 bit patterns (uint16_t, lowp true) of the GEMM's dtype, as cast_lowp
 * writes them; ld is its leading dimension in elements. */
typedef struct tr_gemm_operand {
    const void *p;
    int ld;
    bool lowp;
} tr_gemm_operand;

typedef struct tr_attn_desc {
    int batch, seq, heads, groups, head_dim; /* heads % groups == 0 (GQA; groups == heads is MHA) */
    float scale;                             /* usually 1/sqrt(head_dim) */
    int causal;
    int block_q, block_k; /* tile sizes of the online softmax; 0 picks the backend default */
    /* [batch, seq] or NULL: query t of row b attends keys j with doc_start[b*seq+t] <= j <= t
     * (causal), the first position of its document (packed sequences); NULL means 0. Requires
     * causal; each row must start at 0 and every entry be t (a new document) or the previous
     * entry, else the op returns TR_ERR_INVALID. */
    const int32_t *doc_start;
    /* 0 or a tr_lowp: the backend may round q, k, v, dO and the probabilities P and dS to this
     * format before their products, accumulating in fp32 (as gemm_lowp does); out, lse and the
     * gradients keep their types. 0 is exact fp32. The CPU backend computes in fp32 for every
     * value (strictly more accurate); CUDA uses tensor cores for it (docs/cuda.md). */
    int lowp;
    /* Nonzero: the caller guarantees doc_start follows the rule above (the runtime builds it
     * from document boundaries), so a backend may skip validating it, which on a device costs
     * a read-back synchronisation per call. 0: doc_start is checked. */
    int doc_start_trusted;
    /* Dropout on the attention probabilities (training): 0 for none, else the drop probability
     * p, 0 < p < 1. out = (P * M / (1 - p)) V, P the softmax and M the mask of
     * kernels/common/attn_dropout.h for (dropout_seed, dropout_round, dropout_layer, batch row,
     * head head_offset + h, query t, key j), t and j the row's token indices; lse stays the
     * undropped softmax's. The backward takes the same fields and the dropped out, and
     * regenerates M. heads_total is the model's head count (tensor parallelism: q holds heads
     * [head_offset, head_offset + heads) of it; 0 means heads). The other fields are ignored
     * when dropout is 0. */
    float dropout;
    uint64_t dropout_seed, dropout_round;
    int dropout_layer;
    int head_offset, heads_total;
    /* The mask's coordinates of this call's batch row 0, query 0 and key 0 (added to b, t and
     * j): a block of a longer sequence (context parallelism's ring) draws the whole sequence's
     * mask. 0 for a whole sequence. */
    int dropout_row0, dropout_q0, dropout_k0;
} tr_attn_desc;

typedef struct tr_adamw_params {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step; /* 1 on the first update; drives bias correction */
    /* Each gradient is multiplied by this (in fp32) before it enters the moments: global-norm
     * clipping fused into the update instead of a pass that scales every gradient in place,
     * bitwise the same result. 0 reads as 1, so callers that do not clip may leave it out. */
    float grad_scale;
} tr_adamw_params;

typedef struct tr_sgd_params {
    float lr, momentum, weight_decay;
    int nesterov;
} tr_sgd_params;

typedef struct tr_ops {
    const char *name;

    /* C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C. For y = x W^T with W [out,in]:
     * forward gemm(N,T), input grad dx = dy W gemm(N,N), weight grad dW += dy^T x gemm(T,N,
     * beta=1). */
    tr_status (*gemm)(tr_transpose ta, tr_transpose tb, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc);
    /* gemm with A and B rounded to `dtype` (nearest even; fp16 overflows to inf) and the products
     * accumulated in fp32: a tensor-core GEMM on half-precision copies of fp32 buffers. A, B, C
     * are fp32 buffers; C, alpha and beta as in gemm. */
    tr_status (*gemm_lowp)(tr_lowp dtype, tr_transpose ta, tr_transpose tb, int m, int n, int k,
                           float alpha, const float *a, int lda, const float *b, int ldb,
                           float beta, float *c, int ldc);
    /* gemm_lowp whose operands may already be half precision (the model's weight copy, made
     * once per optimizer step): fp32 operands are rounded as gemm_lowp rounds them, half ones
     * are used as they are, so for equal rounded values the products are gemm_lowp's. bias
     * (fp32 [n], or NULL) is then added to every row of C, fused into the GEMM where the
     * backend can (CUDA bf16: cuBLASLt's BIAS epilogue), else as bias_add adds it; it requires
     * beta == 0 (TR_ERR_INVALID otherwise). k == 0 clears or scales C as gemm does, then adds
     * the bias. */
    tr_status (*gemm_lowp_ex)(tr_lowp dtype, tr_transpose ta, tr_transpose tb, int m, int n, int k,
                              float alpha, tr_gemm_operand a, tr_gemm_operand b, float beta,
                              float *c, int ldc, const float *bias);
    /* dst[i] = the bf16/fp16 bit pattern of src[i] rounded to nearest even (fp16 overflows to
     * inf; NaN becomes 0x7fff); dst and src must not overlap. */
    tr_status (*cast_lowp)(tr_lowp dtype, uint16_t *dst, const float *src, int64_t n);
    /* y[r,:] += bias  /  dbias += sum_r dy[r,:] */
    tr_status (*bias_add)(float *y, const float *bias, int rows, int cols);
    tr_status (*bias_grad)(float *dbias, const float *dy, int rows, int cols);

    /* Element-wise helpers for residuals, clipping and global norms. */
    tr_status (*add)(float *y, const float *x, int64_t n); /* y += x */
    tr_status (*fill)(float *x, int64_t n, float value);
    tr_status (*scale)(float *x, int64_t n, float s); /* x *= s */
    /* *out = sum x^2, accumulated in double in fixed blocks (thread-count independent) */
    tr_status (*sum_squares)(float *out, const float *x, int64_t n);
    /* x = x rounded to dtype, in place (gradients reduced in half precision). */
    tr_status (*round_lowp)(tr_lowp dtype, float *x, int64_t n);
    /* Loss scaling: g *= inv_scale, and *found_inf = 1 when any g was inf or NaN (left as it is
     * otherwise, so one flag collects several ranges). found_inf is backend memory like
     * sum_squares' out. */
    tr_status (*unscale_check)(float *g, int64_t n, float inv_scale, float *found_inf);
    /* Strided 2-D views, for layout changes the model makes on device buffers (splitting the
     * fused QKV rows, sequence-parallel block order, copies between activation buffers):
     * dst[r*ldd + c] = src[r*lds + c] for r < rows, c < cols; dst and src must not overlap.
     * fill_2d sets x[r*ld + c] = value (the padded vocabulary's logits). */
    tr_status (*copy_2d)(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                         int64_t cols);
    tr_status (*fill_2d)(float *x, int64_t ld, int64_t rows, int64_t cols, float value);
    /* *out = mean of losses[r] over the rows with targets[r] >= 0, summed in double in row
     * order and rounded once (0 when there are none): a microbatch's loss without reading the
     * per-row losses on the host. out is one float in the backend's memory. */
    tr_status (*loss_mean)(float *out, const float *losses, const int32_t *targets, int rows);

    /* Vocab-parallel embedding: this shard owns rows [vocab_start, vocab_end) of the table
     * (table holds only those rows); ids outside the range give zero rows in forward and
     * contribute nothing in backward, so a sum over shards equals the unsharded lookup. */
    tr_status (*embedding_fwd)(float *out, const int32_t *ids, const float *table, int n, int dim,
                               int vocab_start, int vocab_end);
    tr_status (*embedding_bwd)(float *dtable, const int32_t *ids, const float *dout, int n, int dim,
                               int vocab_start, int vocab_end);
    /* Learned positions (wpe has at least pos_offset + seq rows): x[b,t,:] += wpe[pos_offset + t]
     * / dwpe[pos_offset + t] += sum_b dx[b,t]. */
    tr_status (*pos_embedding_fwd)(float *x, const float *wpe, int batch, int seq, int dim,
                                   int pos_offset);
    tr_status (*pos_embedding_bwd)(float *dwpe, const float *dx, int batch, int seq, int dim,
                                   int pos_offset);

    /* Norms over the last dim of x [rows, dim]. Forward saves mean/rstd [rows] (rmsnorm: rstd
     * only). With zero_centered_gamma the stored weight is gamma - 1. dx ACCUMULATES. */
    tr_status (*layernorm_fwd)(float *y, float *mean, float *rstd, const float *x, const float *w,
                               const float *b, int rows, int dim, float eps, int zero_centered);
    tr_status (*layernorm_bwd)(float *dx, float *dw, float *db, const float *dy, const float *x,
                               const float *w, const float *mean, const float *rstd, int rows,
                               int dim, int zero_centered);
    tr_status (*rmsnorm_fwd)(float *y, float *rstd, const float *x, const float *w, int rows,
                             int dim, float eps, int zero_centered);
    tr_status (*rmsnorm_bwd)(float *dx, float *dw, const float *dy, const float *x, const float *w,
                             const float *rstd, int rows, int dim, int zero_centered);

    /* RoPE. The table is cos/sin [seq, rot_dim/2] for positions pos_offset..pos_offset+seq-1.
     * Apply to x [batch, seq, heads, head_dim], non-interleaved (rotate-half) on the first
     * rot_dim channels, the rest passed through. Backward is the inverse rotation. */
    tr_status (*rope_table)(float *cos_t, float *sin_t, const tr_rope_params *p, int seq,
                            int pos_offset);
    tr_status (*rope_fwd)(float *y, const float *x, const float *cos_t, const float *sin_t,
                          int batch, int seq, int heads, int head_dim, int rot_dim);
    tr_status (*rope_bwd)(float *dx, const float *dy, const float *cos_t, const float *sin_t,
                          int batch, int seq, int heads, int head_dim, int rot_dim);

    /* Flash-style attention. q, out [B,T,H,D]; k, v [B,T,G,D]; lse [B,H,T] (natural log of the
     * softmax denominator, scaled scores). Backward recomputes scores from q, k, v and lse;
     * dq, dk, dv are overwritten. */
    tr_status (*attention_fwd)(float *out, float *lse, const float *q, const float *k,
                               const float *v, const tr_attn_desc *d);
    tr_status (*attention_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *q,
                               const float *k, const float *v, const float *out, const float *lse,
                               const tr_attn_desc *d);
    /* The log-sum-exp merge of two attentions of the same queries over disjoint key sets
     * (context parallelism's ring): out [rows, heads, head_dim] with lse (row t of head h at
     * lse[h * lse_ld + t]) becomes the attention over both sets, given the other set's out_b
     * [rows, heads, head_dim] and lse_b [heads, rows]. A row whose lse is -inf (no keys yet)
     * takes out_b as it is, whatever out held. */
    tr_status (*attention_merge)(float *out, float *lse, int64_t lse_ld, const float *out_b,
                                 const float *lse_b, int rows, int heads, int head_dim);

    /* GeLU, exact (erf) or tanh approximation. Backward needs the forward input. */
    tr_status (*gelu_fwd)(float *y, const float *x, int64_t n, int tanh_approx);
    tr_status (*gelu_bwd)(float *dx, const float *dy, const float *x, int64_t n, int tanh_approx);
    /* SwiGLU on fc1's fused output x [rows, 2*ffn] = [gate | up]: y [rows, ffn] = silu(gate)*up. */
    tr_status (*swiglu_fwd)(float *y, const float *x, int rows, int ffn);
    tr_status (*swiglu_bwd)(float *dx, const float *dy, const float *x, int rows, int ffn);
    /* Inverted dropout with drop probability p. Element i uses Philox bits of global index
     * offset + i, so backward regenerates the same mask and no mask is stored. */
    tr_status (*dropout_fwd)(float *y, const float *x, int64_t n, float p, uint64_t seed,
                             uint64_t offset);
    tr_status (*dropout_bwd)(float *dx, const float *dy, int64_t n, float p, uint64_t seed,
                             uint64_t offset);

    /* Cross entropy over a vocab shard. logits [rows, vocab_local] cover global ids
     * [vocab_start, vocab_start + vocab_local). stats is planar [3, rows]: row max, sum of
     * exp(logit - max), and the target logit if this shard owns the target else 0. Targets < 0
     * are ignored (zero loss, zero grad). Shards combine with ce_merge (associative), or with an
     * all-reduce MAX of the max row, ce_rebase to that max, then all-reduce SUM of the rest. */
    tr_status (*ce_stats)(float *stats, const float *logits, const int32_t *targets, int rows,
                          int vocab_local, int vocab_start);
    tr_status (*ce_merge)(float *stats, const float *other, int rows);
    tr_status (*ce_rebase)(float *stats, const float *global_max, int rows);
    tr_status (*ce_loss)(float *loss, const float *stats, const int32_t *targets, int rows);
    /* Overwrites logits with dloss[r] * (softmax - onehot); dloss NULL means 1 per row. */
    tr_status (*ce_bwd)(float *logits, const float *stats, const int32_t *targets,
                        const float *dloss, int rows, int vocab_local, int vocab_start);

    /* Optimizers over a flat range of n parameters. */
    tr_status (*adamw)(float *param, const float *grad, float *m, float *v, int64_t n,
                       const tr_adamw_params *p);
    tr_status (*sgd)(float *param, const float *grad, float *momentum_buf, int64_t n,
                     const tr_sgd_params *p);

    /* cast_lowp's inverse: dst[i] = the fp32 value of the bf16/fp16 bit pattern src[i] (exact,
     * NaN and inf kept); dst and src must not overlap. Pipeline stages receive their input and
     * its gradient in half precision and compute in fp32. */
    tr_status (*widen_lowp)(tr_lowp dtype, float *dst, const uint16_t *src, int64_t n);

    /* Per-row and per-column reductions and scalings: DoRA's weight norms and magnitudes.
     * row_sum_squares: out[r] = sum over c of x[r,c]^2, in double, rounded once (overwrites).
     * col_scale: y[r,c] *= s[c].
     * col_dot: out[c] += s[c] * sum over r of a[r,c] * b[r,c], in double in row order.
     * norm_scale: inv[i] = 1 / sqrt(sq[i]) and scale[i] = mag[i] * inv[i]. */
    tr_status (*row_sum_squares)(float *out, const float *x, int rows, int cols);
    tr_status (*col_scale)(float *y, const float *s, int rows, int cols);
    tr_status (*col_dot)(float *out, const float *a, const float *b, const float *s, int rows,
                         int cols);
    tr_status (*norm_scale)(float *scale, float *inv, const float *mag, const float *sq, int n);

    /* MoE. moe_topk: idx and prob from logits as tr_route_desc says (overwrites).
     * moe_topk_bwd: dlogits [tokens, experts] (overwritten) from dprob, the gradient of prob,
     * through the scores of the chosen idx (the selection itself has no gradient). */
    tr_status (*moe_topk)(int32_t *idx, float *prob, const float *logits, const tr_route_desc *d);
    tr_status (*moe_topk_bwd)(float *dlogits, const float *dprob, const float *logits,
                              const int32_t *idx, const tr_route_desc *d);
    /* Token rows to expert rows and back. An assignment a = t * topk + j is token t's j-th
     * choice; row_a [rows] names each expert row's assignment (-1: a padding row) and pos
     * [tokens * topk] each assignment's row (-1: dropped), the two inverse where both are >= 0.
     * moe_permute: xp[r] = x[row_a[r] / topk], padding rows zero (overwrites).
     * moe_permute_bwd: dx[t] = sum over j of dxp[pos[t * topk + j]], in j order (overwrites).
     * moe_unpermute: y[t] = sum over j of prob[a] ye[pos[a]], a = t * topk + j, in j order,
     * dropped assignments skipped (overwrites).
     * moe_unpermute_bwd: dye[r] = prob[a] dy[a / topk] for a = row_a[r] (padding rows zero) and
     * dprob[a] = <dy[t], ye[pos[a]]> summed in double (0 when dropped); both overwritten.
     * An index outside its range (row_a outside [0, tokens * topk), pos outside [0, rows)) reads
     * as -1, so no values of the index arrays (backend memory) touch memory out of range; the
     * same holds for moe_topk_bwd's idx outside [0, experts) (skipped). */
    tr_status (*moe_permute)(float *xp, const float *x, const int32_t *row_a, int rows, int tokens,
                             int topk, int dim);
    tr_status (*moe_permute_bwd)(float *dx, const float *dxp, const int32_t *pos, int rows,
                                 int tokens, int topk, int dim);
    tr_status (*moe_unpermute)(float *y, const float *ye, const float *prob, const int32_t *pos,
                               int rows, int tokens, int topk, int dim);
    tr_status (*moe_unpermute_bwd)(float *dye, float *dprob, const float *dy, const float *ye,
                                   const float *prob, const int32_t *row_a, const int32_t *pos,
                                   int rows, int tokens, int topk, int dim);
} tr_ops;

const tr_ops *tr_ops_cpu(void);

#endif
