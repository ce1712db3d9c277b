/* Internal: the CPU implementations behind tr_ops_cpu(), one file per op family. */
#ifndef TR_CPU_OPS_H
#define TR_CPU_OPS_H

#include "kernels/ops.h"

tr_status tr_cpu_gemm(tr_transpose ta, tr_transpose tb, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc);
tr_status tr_cpu_gemm_lowp(tr_lowp dtype, tr_transpose ta, tr_transpose tb, int m, int n, int k,
                           float alpha, const float *a, int lda, const float *b, int ldb,
                           float beta, float *c, int ldc);
tr_status tr_cpu_gemm_lowp_ex(tr_lowp dtype, tr_transpose ta, tr_transpose tb, int m, int n, int k,
                              float alpha, tr_gemm_operand a, tr_gemm_operand b, float beta,
                              float *c, int ldc, const float *bias);
tr_status tr_cpu_cast_lowp(tr_lowp dtype, uint16_t *dst, const float *src, int64_t n);
tr_status tr_cpu_round_lowp(tr_lowp dtype, float *x, int64_t n);
tr_status tr_cpu_widen_lowp(tr_lowp dtype, float *dst, const uint16_t *src, int64_t n);
tr_status tr_cpu_row_sum_squares(float *out, const float *x, int rows, int cols);
tr_status tr_cpu_col_scale(float *y, const float *s, int rows, int cols);
tr_status tr_cpu_col_dot(float *out, const float *a, const float *b, const float *s, int rows,
                         int cols);
tr_status tr_cpu_norm_scale(float *scale, float *inv, const float *mag, const float *sq, int n);
tr_status tr_cpu_unscale_check(float *g, int64_t n, float inv_scale, float *found_inf);
tr_status tr_cpu_bias_add(float *y, const float *bias, int rows, int cols);
tr_status tr_cpu_bias_grad(float *dbias, const float *dy, int rows, int cols);
tr_status tr_cpu_add(float *y, const float *x, int64_t n);
tr_status tr_cpu_fill(float *x, int64_t n, float value);
tr_status tr_cpu_scale(float *x, int64_t n, float s);
tr_status tr_cpu_sum_squares(float *out, const float *x, int64_t n);
tr_status tr_cpu_copy_2d(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                         int64_t cols);
tr_status tr_cpu_fill_2d(float *x, int64_t ld, int64_t rows, int64_t cols, float value);
tr_status tr_cpu_loss_mean(float *out, const float *losses, const int32_t *targets, int rows);

tr_status tr_cpu_embedding_fwd(float *out, const int32_t *ids, const float *table, int n, int dim,
                               int vocab_start, int vocab_end);
tr_status tr_cpu_embedding_bwd(float *dtable, const int32_t *ids, const float *dout, int n, int dim,
                               int vocab_start, int vocab_end);
tr_status tr_cpu_pos_embedding_fwd(float *x, const float *wpe, int batch, int seq, int dim,
                                   int pos_offset);
tr_status tr_cpu_pos_embedding_bwd(float *dwpe, const float *dx, int batch, int seq, int dim,
                                   int pos_offset);

tr_status tr_cpu_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w,
                               const float *b, int rows, int dim, float eps, int zero_centered);
tr_status tr_cpu_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                               const float *w, const float *mean, const float *rstd, int rows,
                               int dim, int zero_centered);
tr_status tr_cpu_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int rows,
                             int dim, float eps, int zero_centered);
tr_status tr_cpu_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                             const float *rstd, int rows, int dim, int zero_centered);

tr_status tr_cpu_rope_table(float *cos_t, float *sin_t, const tr_rope_params *p, int seq,
                            int pos_offset);
tr_status tr_cpu_rope_fwd(float *y, const float *x, const float *cos_t, const float *sin_t,
                          int batch, int seq, int heads, int head_dim, int rot_dim);
tr_status tr_cpu_rope_bwd(float *dx, const float *dy, const float *cos_t, const float *sin_t,
                          int batch, int seq, int heads, int head_dim, int rot_dim);

tr_status tr_cpu_attention_fwd(float *out, float *lse, const float *q, const float *k,
                               const float *v, const tr_attn_desc *d);
tr_status tr_cpu_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                               const float *k, const float *v, const float *out, const float *lse,
                               const tr_attn_desc *d);
tr_status tr_cpu_attention_merge(float *out, float *lse, int64_t lse_ld, const float *out_b,
                                 const float *lse_b, int rows, int heads, int head_dim);

tr_status tr_cpu_gelu_fwd(float *y, const float *x, int64_t n, int tanh_approx);
tr_status tr_cpu_gelu_bwd(float *dx, const float *dy, const float *x, int64_t n, int tanh_approx);
tr_status tr_cpu_swiglu_fwd(float *y, const float *x, int rows, int ffn);
tr_status tr_cpu_swiglu_bwd(float *dx, const float *dy, const float *x, int rows, int ffn);
tr_status tr_cpu_dropout_fwd(float *y, const float *x, int64_t n, float p, uint64_t seed,
                             uint64_t offset);
tr_status tr_cpu_dropout_bwd(float *dx, const float *dy, int64_t n, float p, uint64_t seed,
                             uint64_t offset);

tr_status tr_cpu_ce_stats(float *stats, const float *logits, const int32_t *targets, int rows,
                          int vocab_local, int vocab_start);
tr_status tr_cpu_ce_merge(float *stats, const float *other, int rows);
tr_status tr_cpu_ce_rebase(float *stats, const float *global_max, int rows);
tr_status tr_cpu_ce_loss(float *loss, const float *stats, const int32_t *targets, int rows);
tr_status tr_cpu_ce_bwd(float *logits, const float *stats, const int32_t *targets,
                        const float *dloss, int rows, int vocab_local, int vocab_start);

tr_status tr_cpu_adamw(float *param, const float *grad, float *m, float *v, int64_t n,
                       const tr_adamw_params *p);
tr_status tr_cpu_sgd(float *param, const float *grad, float *momentum_buf, int64_t n,
                     const tr_sgd_params *p);

tr_status tr_cpu_moe_topk(int32_t *idx, float *prob, const float *logits, const tr_route_desc *d);
tr_status tr_cpu_moe_topk_bwd(float *dlogits, const float *dprob, const float *logits,
                              const int32_t *idx, const tr_route_desc *d);
tr_status tr_cpu_moe_permute(float *xp, const float *x, const int32_t *row_a, int rows, int tokens,
                             int topk, int dim);
tr_status tr_cpu_moe_permute_bwd(float *dx, const float *dxp, const int32_t *pos, int rows,
                                 int tokens, int topk, int dim);
tr_status tr_cpu_moe_unpermute(float *y, const float *ye, const float *prob, const int32_t *pos,
                               int rows, int tokens, int topk, int dim);
tr_status tr_cpu_moe_unpermute_bwd(float *dye, float *dprob, const float *dy, const float *ye,
                                   const float *prob, const int32_t *row_a, const int32_t *pos,
                                   int rows, int tokens, int topk, int dim);

#endif
