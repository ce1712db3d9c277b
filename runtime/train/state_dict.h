/* Which logical tensors a rank registers for a checkpoint under its current layout (the rules of
 * docs/checkpoints.md "What is registered"): layer parameters stacked over a leading layer axis,
 * TP slices of the logical tensors, SwiGLU's fc1 as separate gate and up tensors, the unpadded
 * vocabulary, one writer per slice (spread over DP with fully_parallel_save), optimizer state in
 * the same model space as the parameters, and scalars written by rank 0 (Megatron's sharded
 * state dict). Internal to runtime/train/checkpointing.c. */
#ifndef TR_RUNTIME_TRAIN_STATE_DICT_H
#define TR_RUNTIME_TRAIN_STATE_DICT_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/checkpoint/ckpt.h"
#include "runtime/train/checkpointing.h"

typedef struct tr_ckpt_list {
    tr_ckpt_tensor *t;
    char **names; /* owned, parallel to t */
    int n, cap;
} tr_ckpt_list;

void tr_ckpt_list_free(tr_ckpt_list *l);

/* How a rank takes part in parameter i: it writes its slice (once over its replicas), or it only
 * holds a copy to load (a tied embedding's copy on the last pipeline stage). */
typedef enum tr_ckpt_param_role { TR_CKPT_PARAM_WRITES, TR_CKPT_PARAM_LOADS } tr_ckpt_param_role;
tr_ckpt_param_role tr_train_ckpt_param_role(const tr_train_ckpt *k, int i);

/* Every parameter's slices under `prefix` ("" for the model, "optimizer.exp_avg." ...) with data
 * taken at the parameter's offset in `base`, a buffer laid out like the model's parameters.
 * for_save applies fully_parallel_save (loading always reads the whole local slices); turn0
 * shifts the rotation of writers, so that the state tensors of a parameter land elsewhere. */
tr_status tr_ckpt_list_add_params(tr_ckpt_list *l, const tr_train_ckpt *k, const char *prefix,
                                  float *base, int turn0, bool for_save);
/* The slices of parameter i alone, with data taken from `data` (laid out as the parameter):
 * what tr_ckpt_list_add_params registers for it (a converter reads one parameter at a time). */
tr_status tr_ckpt_list_add_param(tr_ckpt_list *l, const tr_train_ckpt *k, const char *prefix, int i,
                                 float *data, int turn0, bool for_save);

/* A scalar every rank registers; rank 0 writes it. */
tr_status tr_ckpt_list_add_scalar(tr_ckpt_list *l, const tr_train_ckpt *k, const char *name,
                                  int64_t *value);
/* A small replicated f64 vector (rank 0 writes it), e.g. the loss scaler's state. */
tr_status tr_ckpt_list_add_f64(tr_ckpt_list *l, const tr_train_ckpt *k, const char *name,
                               double *values, int64_t n);

#endif
