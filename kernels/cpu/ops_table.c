#include "kernels/cpu/cpu_ops.h"

static const tr_ops g_cpu_ops = {
    .name = "cpu",
    .gemm = tr_cpu_gemm,
    .bias_add = tr_cpu_bias_add,
    .bias_grad = tr_cpu_bias_grad,
    .add = tr_cpu_add,
    .fill = tr_cpu_fill,
    .scale = tr_cpu_scale,
    .sum_squares = tr_cpu_sum_squares,
    .embedding_fwd = tr_cpu_embedding_fwd,
    .embedding_bwd = tr_cpu_embedding_bwd,
    .pos_embedding_fwd = tr_cpu_pos_embedding_fwd,
    .pos_embedding_bwd = tr_cpu_pos_embedding_bwd,
    .layernorm_fwd = tr_cpu_layernorm_fwd,
    .layernorm_bwd = tr_cpu_layernorm_bwd,
    .rmsnorm_fwd = tr_cpu_rmsnorm_fwd,
    .rmsnorm_bwd = tr_cpu_rmsnorm_bwd,
    .rope_table = tr_cpu_rope_table,
    .rope_fwd = tr_cpu_rope_fwd,
    .rope_bwd = tr_cpu_rope_bwd,
    .attention_fwd = tr_cpu_attention_fwd,
    .attention_bwd = tr_cpu_attention_bwd,
    .gelu_fwd = tr_cpu_gelu_fwd,
    .gelu_bwd = tr_cpu_gelu_bwd,
    .swiglu_fwd = tr_cpu_swiglu_fwd,
    .swiglu_bwd = tr_cpu_swiglu_bwd,
    .dropout_fwd = tr_cpu_dropout_fwd,
    .dropout_bwd = tr_cpu_dropout_bwd,
    .ce_stats = tr_cpu_ce_stats,
    .ce_merge = tr_cpu_ce_merge,
    .ce_rebase = tr_cpu_ce_rebase,
    .ce_loss = tr_cpu_ce_loss,
    .ce_bwd = tr_cpu_ce_bwd,
    .adamw = tr_cpu_adamw,
    .sgd = tr_cpu_sgd,
};

const tr_ops *tr_ops_cpu(void) {
    return &g_cpu_ops;
}
