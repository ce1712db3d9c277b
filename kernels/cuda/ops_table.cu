#include "kernels/cuda/cuda_impl.cuh"
#include "kernels/cuda/cuda_mixed.h"

static const tr_ops g_cuda_ops = {
    "cuda",
    tr_cuda_gemm,
    tr_cuda_gemm_lowp,
    tr_cuda_gemm_lowp_ex,
    tr_cuda_cast_lowp,
    tr_cuda_bias_add,
    tr_cuda_bias_grad,
    tr_cuda_add,
    tr_cuda_fill,
    tr_cuda_scale,
    tr_cuda_sum_squares,
    tr_cuda_round_lowp,
    tr_cuda_unscale_check,
    tr_cuda_copy_2d,
    tr_cuda_fill_2d,
    tr_cuda_loss_mean,
    tr_cuda_embedding_fwd,
    tr_cuda_embedding_bwd,
    tr_cuda_pos_embedding_fwd,
    tr_cuda_pos_embedding_bwd,
    tr_cuda_layernorm_fwd,
    tr_cuda_layernorm_bwd,
    tr_cuda_rmsnorm_fwd,
    tr_cuda_rmsnorm_bwd,
    tr_cuda_rope_table,
    tr_cuda_rope_fwd,
    tr_cuda_rope_bwd,
    tr_cuda_attention_fwd,
    tr_cuda_attention_bwd,
    tr_cuda_attention_merge,
    tr_cuda_gelu_fwd,
    tr_cuda_gelu_bwd,
    tr_cuda_swiglu_fwd,
    tr_cuda_swiglu_bwd,
    tr_cuda_dropout_fwd,
    tr_cuda_dropout_bwd,
    tr_cuda_ce_stats,
    tr_cuda_ce_merge,
    tr_cuda_ce_rebase,
    tr_cuda_ce_loss,
    tr_cuda_ce_bwd,
    tr_cuda_adamw,
    tr_cuda_sgd,
    tr_cuda_widen_lowp,
    tr_cuda_row_sum_squares,
    tr_cuda_col_scale,
    tr_cuda_col_dot,
    tr_cuda_norm_scale,
    tr_cuda_moe_topk,
    tr_cuda_moe_topk_bwd,
    tr_cuda_moe_permute,
    tr_cuda_moe_permute_bwd,
    tr_cuda_moe_unpermute,
    tr_cuda_moe_unpermute_bwd,
};

/* C++ before C++20 has no designated initialisers, so the order above must follow tr_ops; this
 * catches a member added to ops.h without a CUDA entry. */
static_assert(sizeof(tr_ops) == sizeof(void *) * 54, "tr_ops changed: update kernels/cuda");

extern "C" const tr_ops *tr_ops_cuda(void) {
    return &g_cuda_ops;
}
