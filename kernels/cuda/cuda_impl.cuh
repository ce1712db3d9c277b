/* Internal: the CUDA implementations behind tr_ops_cuda(), one file per op family; same
 * signatures and meaning as kernels/cpu/cpu_ops.h, on device pointers. */
#ifndef TR_CUDA_IMPL_CUH
#define TR_CUDA_IMPL_CUH

#include "kernels/cuda/cuda_common.cuh"

tr_status tr_cuda_gemm(tr_transpose ta, tr_transpose tb, int m, int n, int k, float alpha,
                       const float *a, int lda, const float *b, int ldb, float beta, float *c,
                       int ldc);
tr_status tr_cuda_bias_add(float *y, const float *bias, int rows, int cols);
tr_status tr_cuda_bias_grad(float *dbias, const float *dy, int rows, int cols);
tr_status tr_cuda_add(float *y, const float *x, int64_t n);
tr_status tr_cuda_fill(float *x, int64_t n, float value);
tr_status tr_cuda_scale(float *x, int64_t n, float s);
tr_status tr_cuda_sum_squares(float *out, const float *x, int64_t n);
tr_status tr_cuda_row_sum_squares(float *out, const float *x, int rows, int cols);
tr_status tr_cuda_col_scale(float *y, const float *s, int rows, int cols);
tr_status tr_cuda_col_dot(float *out, const float *a, const float *b, const float *s, int rows,
                          int cols);
tr_status tr_cuda_norm_scale(float *scale, float *inv, const float *mag, const float *sq, int n);
tr_status tr_cuda_copy_2d(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                          int64_t cols);
tr_status tr_cuda_fill_2d(float *x, int64_t ld, int64_t rows, int64_t cols, float value);
tr_status tr_cuda_loss_mean(float *out, const float *losses, const int32_t *targets, int rows);

tr_status tr_cuda_embedding_fwd(float *out, const int32_t *ids, const float *table, int n, int dim,
                                int vocab_start, int vocab_end);
tr_status tr_cuda_embedding_bwd(float *dtable, const int32_t *ids, const float *dout, int n,
                                int dim, int vocab_start, int vocab_end);
tr_status tr_cuda_pos_embedding_fwd(float *x, const float *wpe, int batch, int seq, int dim,
                                    int pos_offset);
tr_status tr_cuda_pos_embedding_bwd(float *dwpe, const float *dx, int batch, int seq, int dim,
                                    int pos_offset);

tr_status tr_cuda_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w,
                                const float *b, int rows, int dim, float eps, int zero_centered);
tr_status tr_cuda_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                                const float *w, const float *mean, const float *rstd, int rows,
                                int dim, int zero_centered);
tr_status tr_cuda_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int rows,
                              int dim, float eps, int zero_centered);
tr_status tr_cuda_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                              const float *rstd, int rows, int dim, int zero_centered);

tr_status tr_cuda_rope_table(float *cos_t, float *sin_t, const tr_rope_params *p, int seq,
                             int pos_offset);
tr_status tr_cuda_rope_fwd(float *y, const float *x, const float *cos_t, const float *sin_t,
                           int batch, int seq, int heads, int head_dim, int rot_dim);
tr_status tr_cuda_rope_bwd(float *dx, const float *dy, const float *cos_t, const float *sin_t,
                           int batch, int seq, int heads, int head_dim, int rot_dim);

tr_status tr_cuda_attention_fwd(float *out, float *lse, const float *q, const float *k,
                                const float *v, const tr_attn_desc *d);
tr_status tr_cuda_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                const float *k, const float *v, const float *out, const float *lse,
                                const tr_attn_desc *d);
tr_status tr_cuda_attention_merge(float *out, float *lse, int64_t lse_ld, const float *out_b,
                                  const float *lse_b, int rows, int heads, int head_dim);

tr_status tr_cuda_gelu_fwd(float *y, const float *x, int64_t n, int tanh_approx);
tr_status tr_cuda_gelu_bwd(float *dx, const float *dy, const float *x, int64_t n, int tanh_approx);
tr_status tr_cuda_swiglu_fwd(float *y, const float *x, int rows, int ffn);
tr_status tr_cuda_swiglu_bwd(float *dx, const float *dy, const float *x, int rows, int ffn);
tr_status tr_cuda_dropout_fwd(float *y, const float *x, int64_t n, float p, uint64_t seed,
                              uint64_t offset);
tr_status tr_cuda_dropout_bwd(float *dx, const float *dy, int64_t n, float p, uint64_t seed,
                              uint64_t offset);

tr_status tr_cuda_ce_stats(float *stats, const float *logits, const int32_t *targets, int rows,
                           int vocab_local, int vocab_start);
tr_status tr_cuda_ce_merge(float *stats, const float *other, int rows);
tr_status tr_cuda_ce_rebase(float *stats, const float *global_max, int rows);
tr_status tr_cuda_ce_loss(float *loss, const float *stats, const int32_t *targets, int rows);
tr_status tr_cuda_ce_bwd(float *logits, const float *stats, const int32_t *targets,
                         const float *dloss, int rows, int vocab_local, int vocab_start);

tr_status tr_cuda_adamw(float *param, const float *grad, float *m, float *v, int64_t n,
                        const tr_adamw_params *p);
tr_status tr_cuda_sgd(float *param, const float *grad, float *momentum_buf, int64_t n,
                      const tr_sgd_params *p);

tr_status tr_cuda_moe_topk(int32_t *idx, float *prob, const float *logits, const tr_route_desc *d);
tr_status tr_cuda_moe_topk_bwd(float *dlogits, const float *dprob, const float *logits,
                               const int32_t *idx, const tr_route_desc *d);
tr_status tr_cuda_moe_permute(float *xp, const float *x, const int32_t *row_a, int rows, int tokens,
                              int topk, int dim);
tr_status tr_cuda_moe_permute_bwd(float *dx, const float *dxp, const int32_t *pos, int rows,
                                  int tokens, int topk, int dim);
tr_status tr_cuda_moe_unpermute(float *y, const float *ye, const float *prob, const int32_t *pos,
                                int rows, int tokens, int topk, int dim);
tr_status tr_cuda_moe_unpermute_bwd(float *dye, float *dprob, const float *dy, const float *ye,
                                    const float *prob, const int32_t *row_a, const int32_t *pos,
                                    int rows, int tokens, int topk, int dim);

/* Deterministic column sums over rows (two passes: fixed row chunks, then the chunks in order),
 * ACCUMULATED into the destinations: sum_xhat[j] += sum_r dy[r,j] * xhat[r,j] where
 * xhat = (x - mean[r]) * rstd[r] (mean NULL: 0; x NULL: xhat = 1), and sum_dy[j] += sum_r dy[r,j].
 * Either destination may be NULL. Serves bias_grad and the norms' dw / db. */
tr_status tr_cuda_colsum(tr_cuda_ctx *ctx, float *sum_xhat, float *sum_dy, const float *dy,
                         const float *x, const float *mean, const float *rstd, int rows, int cols);

#endif
