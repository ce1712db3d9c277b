/* Internal to runtime/model_*.c: the pieces forward and backward share. */
#ifndef TR_RUNTIME_MODEL_INTERNAL_H
#define TR_RUNTIME_MODEL_INTERNAL_H

#include <math.h>

#include "runtime/model.h"
#include "runtime/model_linear.h"

typedef enum tr_model_linear_id {
    TR_LIN_QKV,
    TR_LIN_PROJ,
    TR_LIN_FC1,
    TR_LIN_FC2
} tr_model_linear_id;

tr_status tr_model_norm_fwd(const tr_model *m, float *y, float *mean, float *rstd, const float *x,
                            const float *w, const float *b, int rows);
tr_linear tr_model_layer_linear(const tr_model *m, int layer, tr_model_linear_id id);
tr_linear tr_model_output_linear(const tr_model *m);
void tr_model_qkv_split(const tr_model *m, const float *qkv, float *q, float *k, float *v,
                        int64_t rows);
void tr_model_qkv_merge(const tr_model *m, float *qkv, const float *q, const float *k,
                        const float *v, int64_t rows);
tr_attn_desc tr_model_attn_desc(const tr_model *m);
/* Philox counter offset of dropout site `site` (0 embedding, 1 + 2i attention, 2 + 2i MLP). */
uint64_t tr_model_dropout_offset(const tr_model *m, int site);

#endif
