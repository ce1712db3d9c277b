/* The training loop (Megatron's pretrain/train): per iteration, num_microbatches forward and
 * backward passes accumulate into the flat gradient buffer, then one clipped optimizer step
 * with the scheduled learning rate and weight decay. Evaluation every eval_interval for
 * eval_iters batches, a log line every log_interval (and a JSONL metrics record), NaN/Inf loss
 * detection, and a clean stop on SIGTERM/SIGINT after the current iteration. */
#ifndef TR_RUNTIME_TRAIN_H
#define TR_RUNTIME_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "core/diag.h"
#include "runtime/comm/comm.h"

struct tr_model;
struct tr_device;

typedef struct tr_train_opts {
    FILE *log;                /* the log lines; NULL for silence */
    const char *metrics_path; /* JSONL file (truncated), or NULL for none */
    /* TensorBoard event directory (logger.tensorboard_dir on the logging rank), or NULL. */
    const char *tensorboard_dir;
    int handle_signals; /* install SIGTERM/SIGINT handlers for the run */
    float *losses;      /* if set, the loss of iteration i goes to losses[i - 1] */
    int64_t losses_cap;
    /* The run's communicator (run_recipe under mpirun): with DP, TP or PP above 1 the loop runs
     * the parallel path over it (runtime/distributed, runtime/pipeline/executor.h). NULL: one rank,
     * no comm. */
    tr_comm *comm;
    /* Where the model runs (runtime/device/device.h; the comm must be this device's,
     * tr_device_comm_create). NULL: the host. */
    struct tr_device *device;
    /* Called once after the last iteration with the trained model (parameters final on every
     * rank), e.g. to compare layouts; a non-OK status ends the run with it. */
    tr_status (*on_finish)(void *ctx, const struct tr_model *m);
    void *on_finish_ctx;
    /* Mixed precision without the half-precision weight copy (tr_model_spec.no_weight_copy):
     * for tests that compare the two, which must agree bitwise. */
    int no_weight_copy;
    /* Mixed precision with every saved activation in fp32 (tr_model_spec.no_half_acts): for
     * tests that compare it with the half-precision saved activations, bitwise. */
    int no_half_acts;
} tr_train_opts;

typedef enum tr_stop_reason {
    TR_STOP_DONE,          /* train_iters reached */
    TR_STOP_EXIT_INTERVAL, /* train.exit_interval */
    TR_STOP_DURATION,      /* train.exit_duration_in_mins */
    TR_STOP_SIGNAL         /* SIGTERM or SIGINT: finished the iteration and stopped */
} tr_stop_reason;

typedef struct tr_train_result {
    int64_t iterations; /* iterations completed */
    int64_t consumed_samples;
    int64_t skipped_iterations; /* optimizer steps skipped (non-finite or too large grad norm) */
    double first_loss, last_loss;
    double last_eval_loss; /* NaN when no evaluation ran */
    /* Data parallel: gradient buckets whose reduction started during backward (overlap), summed
     * over iterations. */
    int64_t buckets_started_early;
    /* Data parallel: elements of the dense and the expert gradient buffers (padding included;
     * the second 0 without expert parallelism), what each DP collective moves. */
    int64_t grad_numel[2];
    tr_stop_reason stop;
    int signal; /* the signal that stopped the run, when stop == TR_STOP_SIGNAL */
    double seconds;
    /* Loss scaling: steps skipped for inf/NaN gradients (also in skipped_iterations) and the
     * scale at the end (NaN without a scaler). */
    int64_t overflow_iterations;
    double loss_scale;
} tr_train_result;

/* Trains the config's model from scratch on one rank, or in parallel (DP/TP/SP/PP) over o->comm.
 * Unsupported settings, unreadable data and a non-finite loss (with
 * rerun_state_machine.check_for_nan_in_loss) are diagnostics. */
tr_status tr_train_run(const tr_config *c, const tr_train_opts *o, tr_train_result *r, tr_diags *d);

#endif
