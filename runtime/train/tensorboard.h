/* TensorBoard event files, written without TensorFlow: TFRecord framing (length, masked CRC32C
 * of the length, the payload, masked CRC32C of the payload) around Event protos (wall_time,
 * step, a Summary of scalar values) that a small protobuf encoder here writes. One file per run,
 * events.out.tfevents.<seconds>.<host>, in logger.tensorboard_dir; the tags are Megatron's
 * (lm loss, learning-rate, grad-norm, ...), so its dashboards read Trestle runs. */
#ifndef TR_RUNTIME_TRAIN_TENSORBOARD_H
#define TR_RUNTIME_TRAIN_TENSORBOARD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/config.h"

typedef struct tr_tb {
    FILE *f; /* NULL: no TensorBoard */
    int64_t interval, world_size;
    bool loss_scale, validation_ppl, memory, world, throughput, timers;
} tr_tb;

/* The values of one iteration (NaN: not known, not written). */
typedef struct tr_tb_iteration {
    double loss, lr, grad_norm, params_norm, loss_scale, seconds, flops, tokens;
    double moe_lb, moe_z; /* this iteration's MoE balancing losses; NaN without MoE */
} tr_tb_iteration;

/* Create dir (and its parents) and the run's event file, with the logger section's switches. */
tr_status tr_tb_open(tr_tb *tb, const char *dir, const tr_config *c, tr_diags *d);
void tr_tb_close(tr_tb *tb);
/* Masked CRC32C of TFRecord framing (exposed for the unit test's known values). */
uint32_t tr_tb_masked_crc32c(const void *data, size_t n);
/* One scalar event. */
void tr_tb_scalar(tr_tb *tb, const char *tag, int64_t step, double value);
/* Iteration it's scalars when it falls on tensorboard_log_interval. */
void tr_tb_log_iteration(tr_tb *tb, int64_t it, const tr_tb_iteration *v);
/* An evaluation's loss (split "validation" or "test"), and its perplexity when asked. */
void tr_tb_log_eval(tr_tb *tb, const char *split, int64_t it, double loss);

#endif
