/* The training log in Megatron's spirit: one line every log_interval iterations with values
 * averaged over the interval, evaluation lines, and the same numbers as JSONL records. */
#ifndef TR_RUNTIME_TRAIN_LOG_H
#define TR_RUNTIME_TRAIN_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/diag.h"
#include "runtime/train/tensorboard.h"

enum { TR_TRAIN_LOG_MTP = 8 }; /* MTP depths logged (the first ones) */

typedef struct tr_train_log {
    FILE *out, *metrics;
    int64_t interval;
    /* sums over the current interval */
    int n, n_loss, skipped_total;
    double loss, seconds, flops, tokens;
    /* The current fp16/static loss scale, printed on the log line as Megatron does; NaN (the
     * default) when the run has no loss scaler. */
    double loss_scale;
    /* MoE: sums over the interval of the iterations' load_balancing_loss and z_loss */
    double moe_lb, moe_z;
    double moe_lb_now, moe_z_now; /* the latest iteration's (NaN: none), for TensorBoard */
    int n_lb, n_z;
    /* MoE: the interval's tokens per expert [layers, experts] for the next record (owned; NULL:
     * none), which layers are MoE (bit per layer as tr_moe_spec.layers) */
    double *moe_tokens;
    int moe_layers, moe_experts;
    uint64_t moe_mask[4];
    tr_tb tb; /* TensorBoard events (logger.tensorboard_dir), opened by tr_train_run */
    /* Multi-token prediction: each depth's loss summed over the interval's iterations
     * (tr_train_log_mtp), printed and written as "mtp_<d> loss" next to the lm loss. */
    double mtp[TR_TRAIN_LOG_MTP];
    int n_mtp, mtp_iters;
} tr_train_log;

tr_status tr_train_log_open(tr_train_log *l, FILE *out, const char *metrics_path, int64_t interval,
                            tr_diags *d);
void tr_train_log_close(tr_train_log *l);
/* Does iteration `it` print? Every interval, the last of `iters`, and the last one of a run
 * that stops early (`stopping`). */
bool tr_train_log_due(const tr_train_log *l, int64_t it, int64_t iters, bool stopping);
/* An MoE iteration's load_balancing_loss and z_loss (NaN: the model has none), averaged over the
 * interval and printed and written with the next logged iteration. */
void tr_train_log_moe(tr_train_log *l, double lb, double z);
/* The interval's tokens per expert of every layer (tokens [layers, experts], copied), written
 * with the next record as "moe_tokens_per_expert" (per MoE layer: min, mean, max, counts). */
tr_status tr_train_log_moe_tokens(tr_train_log *l, const double *tokens, int layers, int experts,
                                  const uint64_t mask[4]);
/* params_norm NaN: not logged. */
void tr_train_log_iteration(tr_train_log *l, int64_t it, int64_t iters, bool stopping,
                            int64_t consumed, double loss, double lr, double grad_norm,
                            double params_norm, bool skipped, double seconds, double flops,
                            double tokens);
/* This iteration's mean loss of each of n MTP depths (before tr_train_log_iteration). */
void tr_train_log_mtp(tr_train_log *l, const double *losses, int n);
/* split: "validation" or "test". */
void tr_train_log_eval(tr_train_log *l, const char *split, int64_t it, double loss);
void tr_train_log_end(tr_train_log *l, int64_t it, int stop, int signal, double seconds);

#endif
