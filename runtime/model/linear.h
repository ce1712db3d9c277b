/* A linear layer y = x W^T + b as the model sees it: the weight it holds is one shard of a
 * logical [out, in] matrix. A column-parallel layer holds rows (out/TP) and needs no input
 * communication in forward; a row-parallel layer holds columns (in/TP) and sums partial outputs
 * over the TP group (Megatron's ColumnParallelLinear / RowParallelLinear without sequence
 * parallelism: the column layer all-reduces its input gradient in backward, the row layer its
 * output in forward, before the bias, which it keeps whole). With one shard both are plain GEMMs.
 */
#ifndef TR_RUNTIME_MODEL_LINEAR_H
#define TR_RUNTIME_MODEL_LINEAR_H

#include "kernels/ops.h"
#include "runtime/model/model.h"

typedef enum tr_linear_kind { TR_LINEAR_COLUMN, TR_LINEAR_ROW } tr_linear_kind;

/* The linear layers of a transformer layer, in Megatron's order (also LoRA's target order). */
typedef enum tr_model_linear_id {
    TR_LIN_QKV,
    TR_LIN_PROJ,
    TR_LIN_FC1,
    TR_LIN_FC2
} tr_model_linear_id;

typedef struct tr_linear {
    const float *w, *b; /* w [out_local, in_local]; b may be NULL */
    float *dw, *db;     /* gradients (accumulated); db NULL when there is no bias */
    int in, out;        /* local (shard) sizes */
    tr_linear_kind kind;
    const tr_model *model; /* its TP group and shard */
    /* LoRA (runtime/peft/lora.h): y += scale * (x A^T) B^T with A [rank, in], B [out, rank]; a NULL
     * lora_a means no adapter. A frozen layer has dw (and db) NULL: no weight gradient. */
    const float *lora_a, *lora_b;
    float *lora_da, *lora_db;
    int lora_site; /* layer * TR_LORA_TARGETS + target: the adapter's dropout stream */
    /* DoRA: the magnitude m [out] and its gradient, and this step's m / ||V|| and 1 / ||V||
     * [out] each (runtime/model/adapters/dora.h); dora_m NULL: plain LoRA. */
    const float *dora_m;
    float *dora_dm, *dora_scale, *dora_inv;
    unsigned overlap; /* TR_TPO_* (model.h) this layer applies; 0 for none */
} tr_linear;

/* y [rows, out] = x [rows, in] W^T + b (overwrites y). rows counts whole sequences; with sequence
 * parallelism a row-parallel layer's y holds this rank's sequence chunk only (rows/tp). */
tr_status tr_linear_fwd(const tr_ops *ops, const tr_linear *l, const float *x, float *y, int rows);
/* A column-parallel layer's forward under sequence parallelism with its input's all-gather
 * (this rank's chunks local -> full, which the backward reads) pipelined with the GEMM
 * (TR_TPO_AG): the results are tr_linear_fwd's on the gathered input, bit for bit. */
tr_status tr_linear_fwd_gather(const tr_ops *ops, const tr_linear *l, const float *local,
                               float *full, float *y, int rows);
/* dW += dy^T x, db += column sums of dy (each skipped when NULL), and dx = dy W (overwritten;
 * skipped when dx is NULL); with an adapter also its gradients and its part of dx.
 * With sequence parallelism a column-parallel layer's dx and a row-parallel layer's dy are this
 * rank's sequence chunk (rows/tp). */
tr_status tr_linear_bwd(const tr_ops *ops, const tr_linear *l, const float *x, const float *dy,
                        float *dx, int rows);
/* The same with the input saved in half precision (bf16/fp16 bit patterns of spec.lowp, as
 * cast_lowp writes them): the GEMMs read it as a ready operand, so the results are those of the
 * fp32 input they were rounded from. Only for layers without an adapter (TR_ERR_INTERNAL). */
tr_status tr_linear_fwd_half(const tr_ops *ops, const tr_linear *l, const uint16_t *x, float *y,
                             int rows);
tr_status tr_linear_bwd_half(const tr_ops *ops, const tr_linear *l, const uint16_t *x,
                             const float *dy, float *dx, int rows);

/* Layer `layer`'s linear `id` and the output layer as tr_linear views of the model's parameters
 * and gradients; with LoRA the base weights carry no gradient and targeted layers their
 * adapter. */
tr_linear tr_model_layer_linear(const tr_model *m, int layer, tr_model_linear_id id);
tr_linear tr_model_output_linear(const tr_model *m);

#endif
