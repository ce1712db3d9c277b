/* See runtime/train/train.h. */
#include "runtime/train/train.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/data/datasets/sampler.h"
#include "runtime/device/device.h"
#include "runtime/model/loss_buffer.h"
#include "runtime/peft/lora.h"
#include "runtime/model/model.h"
#include "runtime/optimizer/optimizer.h"
#include "runtime/pipeline/executor.h"
#include "runtime/optimizer/lr_schedule.h"
#include "runtime/train/ckpt.h"
#include "runtime/train/checks.h"
#include "runtime/data/train_data.h"
#include "runtime/train/dp.h"
#include "runtime/train/log.h"
#include "runtime/train/precision.h"
#include "runtime/train/signal.h"

typedef struct trainer {
    const tr_config *c;
    const tr_train_opts *o;
    tr_diags *d;
    tr_device *dev; /* o->device, or the host */
    tr_model model;
    tr_optimizer_spec opt_spec;
    tr_optimizer opt; /* the plain single-rank path */
    tr_train_dp dp;   /* the parallel path: DP, TP and/or PP over o->comm */
    tr_pp_exec pp;    /* pipeline parallel: the executor (have_pp) */
    bool have_pp;
    int64_t cur_iteration, cur_consumed; /* the iteration the executor's loads belong to */
    int64_t *pp_idx;                     /* [mbs]: the executor's sample indices */
    int eval_split;                      /* evaluation under PP: the split, the first global */
    int64_t eval_first;                  /* microbatch of the batch, and this rank's share of */
    int64_t eval_stride, eval_offset;    /* it (global microbatch first + mb*stride + offset) */
    bool distributed;                    /* the parallel path is in use */
    int dp_size, dp_rank;
    tr_lr_schedule sched;
    tr_token_dataset data;
    tr_train_log log;
    int mbs, nmb, gbs, seq;
    int32_t *sample, *ids, *tgt;
    int32_t *doc_start, *pos; /* fine-tuning data: the microbatch's documents and positions */
    int eod_mask;
    int per_token_loss; /* model.calculate_per_token_loss */
    int64_t buckets_started_early;
    tr_train_ckpt ckpt;      /* checkpoint load (setup) and saves (iteration boundaries) */
    tr_train_precision prec; /* loss scaling and half-precision gradient rounding */
    tr_loss_buffer losses;   /* the step's microbatch losses on the device, read once */
} trainer;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Fine-tuning data: targets come masked from the dataset, and the model learns where each
 * packed document starts and the positions inside it. */
static tr_status load_sequences(trainer *t, int split, int64_t first, const int64_t *index) {
    for (int b = 0; b < t->mbs; b++) {
        int64_t at = (int64_t)b * t->seq;
        tr_token_sequence seq = {t->ids + at, t->tgt + at, t->doc_start + at, t->pos + at};
        TR_TRY(t->data.sequence(&t->data, split, index ? index[b] : first + b, &seq));
    }
    return tr_model_set_sequences(&t->model, t->doc_start, t->pos);
}

/* Microbatch of the mbs samples index[0..mbs) of `split` (consecutive from index[0] when index
 * is NULL): inputs are tokens [0, seq), labels tokens [1, seq]. With dataset.eod_mask_loss the
 * loss is masked where the INPUT token is end-of-document, as Megatron's GPTDataset does (and as
 * runtime/data/datasets/gpt_dataset.c, checked against megatron-core, does). */
static tr_status load_microbatch(trainer *t, int split, int64_t first, const int64_t *index) {
    if (t->data.sequence) return load_sequences(t, split, first, index);
    for (int b = 0; b < t->mbs; b++) {
        TR_TRY(t->data.sample(&t->data, split, index ? index[b] : first + b, t->sample));
        int32_t *ids = t->ids + (int64_t)b * t->seq, *tgt = t->tgt + (int64_t)b * t->seq;
        for (int i = 0; i < t->seq; i++) {
            ids[i] = t->sample[i];
            tgt[i] = t->sample[i + 1];
            if (t->eod_mask && t->data.eod >= 0 && ids[i] == t->data.eod) tgt[i] = -1;
        }
    }
    return TR_OK;
}

static bool in_list(const tr_int_list *l, int64_t v) {
    for (int i = 0; !l->null && i < l->n; i++)
        if (l->v[i] == v) return true;
    return false;
}

typedef struct step_out {
    double loss, grad_norm, lr, wd;
    bool skipped;
    bool overflow; /* skipped for inf/NaN gradients (loss scaling) */
} step_out;

/* The samples this rank reads in its microbatch mb of the global batch starting at `consumed`:
 * Megatron's pretraining sampler (rank r takes the r-th run of mbs samples of each group of
 * mbs x dp). The train split is read past its end in later epochs, so the sampler never runs
 * out. */
static tr_status microbatch_index(const trainer *t, int64_t consumed, int mb, int64_t *index) {
    tr_sampler s = {.total_samples = INT64_MAX / 2,
                    .consumed_samples = consumed,
                    .micro_batch_size = t->mbs,
                    .dp_rank = t->dp_rank,
                    .dp_size = t->dp_size,
                    .drop_last = true};
    return tr_sampler_micro_batch(&s, mb, index) == t->mbs ? TR_OK : TR_ERR_INVALID;
}

/* Test hook (tests/pp/stuck_peer.sh only): with TRESTLE_TEST_STALL_RANK=r and
 * TRESTLE_TEST_STALL_ITER=i in the environment, world rank r stops itself with SIGSTOP after the
 * forward of its first microbatch of iteration i, so its peers see a process that is alive (the
 * launcher notices nothing) but never answers, and must end through the communication timeout.
 * It prints its pid first so the test can kill it by pid. */
static void test_stall_hook(const trainer *t, int64_t iteration, int mb) {
    const char *rank_s = getenv("TRESTLE_TEST_STALL_RANK");
    const char *iter_s = getenv("TRESTLE_TEST_STALL_ITER");
    if (!rank_s || !iter_s || !t->o->comm || mb != 0) return;
    if (atoll(iter_s) != iteration) return;
    if (atoi(rank_s) != tr_comm_group_rank(t->o->comm, TR_COMM_WORLD)) return;
    fprintf(stderr, "test hook: rank %s stalls (pid %ld) in iteration %lld\n", rank_s,
            (long)getpid(), (long long)iteration);
    fflush(stderr);
    raise(SIGSTOP);
}

/* Forward and backward of this rank's microbatches, gradients accumulated (and, with a comm,
 * synchronised); sum and tokens are this rank's loss sum (per-token: over tokens; else over
 * microbatch means) and trained-token count. */
static tr_status accumulate(trainer *t, int64_t iteration, int64_t consumed, double *sum,
                            int64_t *tokens) {
    tr_model *m = &t->model;
    int64_t index[64];
    int64_t *idx = t->mbs <= 64 ? index : malloc((size_t)t->mbs * sizeof *idx);
    if (!idx) return TR_ERR_NOMEM;
    tr_status st = TR_OK;
    tr_loss_buffer_begin(&t->losses, t->per_token_loss);
    for (int mb = 0; mb < t->nmb && st == TR_OK; mb++) {
        if (t->distributed) tr_ddp_set_last_microbatch(&t->dp.ddp, mb == t->nmb - 1);
        st = microbatch_index(t, consumed, mb, idx);
        if (st == TR_OK) st = load_microbatch(t, TR_SPLIT_TRAIN, 0, idx);
        /* The dropout masks follow the global microbatch, so every layout draws the masks of
         * the single-rank run. */
        int64_t global_mb = (int64_t)mb * t->dp_size + t->dp_rank;
        m->dropout_round =
            (uint64_t)(iteration - 1) * (uint64_t)(t->nmb * t->dp_size) + (uint64_t)global_mb;
        float *loss = NULL;
        if (st == TR_OK) st = tr_loss_buffer_slot(&t->losses, &loss);
        if (st == TR_OK) st = tr_model_forward_part(m, 0, 0, t->ids, t->tgt, NULL, NULL, loss);
        if (st == TR_OK) test_stall_hook(t, iteration, mb);
        /* Per-token loss: gradients of the token SUM now, divided by the global token count
         * after the reduction; otherwise the mean of the microbatch means (Megatron divides by
         * the local microbatch count here and averages over DP in the reduction). */
        float scale = t->per_token_loss ? (float)m->n_valid : 1.0f / (float)t->nmb;
        if (st == TR_OK) st = tr_model_backward(m, scale);
        if (st == TR_OK) tr_loss_buffer_commit(&t->losses, m->n_valid);
    }
    /* The step's one read of the losses. */
    if (st == TR_OK) st = tr_loss_buffer_flush(&t->losses);
    *sum = t->losses.sum;
    *tokens = t->losses.n_tokens;
    if (idx != index) free(idx);
    return st;
}

/* One iteration on one rank without a comm: accumulate, then clip and step. */
static tr_status train_step_single(trainer *t, int64_t iteration, int64_t consumed,
                                   int64_t sched_samples, step_out *out) {
    tr_model *m = &t->model;
    TR_TRY(tr_device_memset0(t->dev, m->grads, (size_t)m->n_params * sizeof(float)));
    double sum = 0.0;
    int64_t tokens = 0;
    TR_TRY(accumulate(t, iteration, consumed, &sum, &tokens));
    if (t->per_token_loss) {
        if (tokens > 0) TR_TRY(m->ops->scale(m->grads, m->n_params, 1.0f / (float)tokens));
        out->loss = tokens > 0 ? sum / (double)tokens : 0.0;
    } else {
        out->loss = sum / t->nmb;
    }
    out->lr = tr_lr_at(&t->sched, sched_samples);
    out->wd = tr_wd_at(&t->sched, sched_samples);
    tr_grad_range whole = {.offset = 0, .numel = m->n_params};
    bool found_inf = false;
    TR_TRY(tr_train_precision_grads(&t->prec, t->dev, m->grads, &whole, 1, &found_inf));
    if (found_inf) {
        out->overflow = out->skipped = true;
        out->grad_norm = NAN;
        return TR_OK;
    }
    TR_TRY(tr_grad_norm_on(t->dev, m->grads, m->n_params, &out->grad_norm));
    out->skipped =
        !isfinite(out->grad_norm) || out->grad_norm > t->opt.spec.grad_norm_skip_threshold;
    if (out->skipped) return TR_OK;
    TR_TRY(tr_clip_grads(m->ops, m->grads, m->n_params, t->opt.spec.clip_grad, out->grad_norm));
    TR_TRY(tr_optimizer_step(&t->opt, m->params, m->grads, out->lr, out->wd));
    tr_model_params_stepped(m); /* the weight copy follows at the next forward */
    return TR_OK;
}

static tr_status pp_load(void *ctx, int mb, const int32_t **ids, const int32_t **targets) {
    trainer *t = ctx;
    TR_TRY(microbatch_index(t, t->cur_consumed, mb, t->pp_idx));
    TR_TRY(load_microbatch(t, TR_SPLIT_TRAIN, 0, t->pp_idx));
    int64_t global_mb = (int64_t)mb * t->dp_size + t->dp_rank;
    t->model.dropout_round =
        (uint64_t)(t->cur_iteration - 1) * (uint64_t)(t->nmb * t->dp_size) + (uint64_t)global_mb;
    *ids = t->ids;
    *targets = t->tgt;
    return TR_OK;
}

static void pp_after_forward(void *ctx, int mb) {
    trainer *t = ctx;
    test_stall_hook(t, t->cur_iteration, mb);
}

static tr_status pp_before_backward(void *ctx, bool last) {
    trainer *t = ctx;
    tr_ddp_set_last_microbatch(&t->dp.ddp, last);
    return TR_OK;
}

static tr_status pp_finish_grads(void *ctx) {
    trainer *t = ctx;
    return tr_ddp_finish_grad_sync(&t->dp.ddp);
}

/* Pipeline parallel: the executor runs this rank's stages, finishing with the data-parallel
 * reduction and the tied embedding's all-reduce; the loss lives on the last stage, so it is
 * summed over the pipeline group (every rank logs and returns it). */
static tr_status accumulate_pp(trainer *t, int64_t iteration, int64_t consumed, double *sum,
                               int64_t *tokens) {
    t->cur_iteration = iteration;
    t->cur_consumed = consumed;
    tr_pp_exec_hooks h = {.ctx = t,
                          .load = pp_load,
                          .before_backward = pp_before_backward,
                          .after_forward = pp_after_forward,
                          .finish_grads = pp_finish_grads};
    TR_TRY(tr_pp_exec_iteration(&t->pp, &h, sum, tokens));
    double g[2] = {*sum, (double)*tokens};
    TR_TRY(
        tr_device_all_reduce_host(t->dev, t->o->comm, TR_GROUP_PP, g, 2, TR_COMM_F64, TR_COMM_SUM));
    *sum = g[0];
    *tokens = (int64_t)g[1];
    return TR_OK;
}

/* One data-parallel iteration: the gradient reduction starts during backward (overlap) or after
 * it; the loss is Megatron's: the mean over DP ranks of the mean of microbatch means, or the
 * global token sum over the global token count. */
static tr_status train_step_dp(trainer *t, int64_t iteration, int64_t consumed,
                               int64_t sched_samples, step_out *out) {
    float grad_scale = t->per_token_loss ? 1.0f : 1.0f / (float)t->dp_size;
    TR_TRY(tr_ddp_start_iteration(&t->dp.ddp, grad_scale));
    double sum = 0.0;
    int64_t tokens = 0;
    if (t->have_pp) {
        TR_TRY(accumulate_pp(t, iteration, consumed, &sum, &tokens));
    } else {
        TR_TRY(accumulate(t, iteration, consumed, &sum, &tokens));
        TR_TRY(tr_ddp_finish_grad_sync(&t->dp.ddp));
    }
    t->buckets_started_early += t->dp.ddp.started_early;
    double g[2] = {sum, (double)tokens};
    TR_TRY(tr_train_dp_sum(&t->dp, g, 2));
    if (t->per_token_loss) {
        if (g[1] > 0) TR_TRY(tr_ddp_scale_grads(&t->dp.ddp, 1.0f / (float)g[1]));
        out->loss = g[1] > 0 ? g[0] / g[1] : 0.0;
    } else {
        out->loss = g[0] / ((double)t->nmb * t->dp_size);
    }
    out->lr = tr_lr_at(&t->sched, sched_samples);
    out->wd = tr_wd_at(&t->sched, sched_samples);
    TR_TRY(tr_train_dp_check_grads(&t->dp, &t->prec, &out->overflow));
    if (out->overflow) {
        out->skipped = true;
        out->grad_norm = NAN;
        return TR_OK;
    }
    TR_TRY(
        tr_train_dp_update(&t->dp, &t->opt_spec, out->lr, out->wd, &out->grad_norm, &out->skipped));
    /* The all-gathered parameters may still be in flight: the forward refreshes each tensor's
     * weight copy after waiting for its gather. */
    tr_model_params_stepped(&t->model);
    return TR_OK;
}

static tr_status train_step(trainer *t, int64_t iteration, int64_t consumed, int64_t sched_samples,
                            step_out *out) {
    t->model.grad_loss_scale = tr_train_precision_grad_scale(&t->prec);
    double scale_used = t->prec.scaler.scale;
    TR_TRY(t->distributed ? train_step_dp(t, iteration, consumed, sched_samples, out)
                          : train_step_single(t, iteration, consumed, sched_samples, out));
    t->log.loss_scale = tr_train_precision_after_step(&t->prec, out->overflow);
    if (out->overflow && t->o->log)
        fprintf(t->o->log,
                "iteration %lld: inf/NaN in the gradients at loss scale %.1f, step skipped; loss "
                "scale now %.1f\n",
                (long long)iteration, scale_used, t->prec.scaler.scale);
    return TR_OK;
}

static tr_status pp_eval_load(void *ctx, int mb, const int32_t **ids, const int32_t **targets) {
    trainer *t = ctx;
    int64_t global_mb = t->eval_first + (int64_t)mb * t->eval_stride + t->eval_offset;
    TR_TRY(load_microbatch(t, t->eval_split, global_mb * t->mbs, NULL));
    *ids = t->ids;
    *targets = t->tgt;
    return TR_OK;
}

/* Pipeline parallel: this DP rank's nmb microbatches of the batch starting at global microbatch
 * `first`, forward through the stages; the last stage's loss sum is shared with the whole
 * pipeline group. */
static tr_status evaluate_pp(trainer *t, int split, int64_t first, int nmb, double *sum) {
    t->eval_split = split;
    t->eval_first = first;
    tr_pp_exec_hooks h = {.ctx = t, .load = pp_eval_load};
    TR_TRY(tr_pp_exec_forward_only(&t->pp, &h, nmb, sum));
    return tr_device_all_reduce_host(t->dev, t->o->comm, TR_GROUP_PP, sum, 1, TR_COMM_F64,
                                     TR_COMM_SUM);
}

/* Mean loss over the first eval_iters batches of `split` (the same batches every time, so
 * successive evaluations are comparable); validation.full_validation reads the whole split. */
static tr_status evaluate(trainer *t, int split, int64_t eval_iters, double *loss) {
    tr_model *m = &t->model;
    int64_t gbs = t->c->validation.eval_global_batch_size;
    if (gbs == TR_NULL_INT) gbs = t->gbs;
    int64_t nmb = gbs / t->mbs > 0 ? gbs / t->mbs : 1;
    if (t->c->validation.full_validation) {
        eval_iters = t->data.n_samples[split] / (nmb * t->mbs);
        if (eval_iters < 1) eval_iters = 1;
    }
    double sum = 0.0;
    m->training = 0;
    /* Data parallel: DP rank r evaluates global microbatches r, r + dp, ... of each batch (the
     * pretraining sampler's order) and the loss sums meet over DP; a batch that does not split
     * evenly is evaluated whole by every rank (identical results, replicated work). */
    int64_t shards = t->distributed && t->dp_size > 1 && nmb % t->dp_size == 0 ? t->dp_size : 1;
    t->eval_stride = shards;
    t->eval_offset = shards > 1 ? t->dp_rank : 0;
    int64_t local = nmb / shards;
    tr_status s = t->distributed ? tr_train_dp_params_ready(&t->dp) : TR_OK;
    for (int64_t it = 0; it < eval_iters && s == TR_OK && t->have_pp; it++) {
        double batch = 0.0;
        s = evaluate_pp(t, split, it * nmb, (int)local, &batch);
        sum += batch;
    }
    /* The losses stay on the device until the buffer fills or the evaluation ends; read in
     * order, they add up as one read per microbatch would. */
    tr_loss_buffer_begin(&t->losses, false);
    for (int64_t it = 0; it < eval_iters && s == TR_OK && !t->have_pp; it++)
        for (int64_t mb = 0; mb < local && s == TR_OK; mb++) {
            float *l = NULL;
            int64_t global_mb = it * nmb + mb * t->eval_stride + t->eval_offset;
            s = load_microbatch(t, split, global_mb * t->mbs, NULL);
            if (s == TR_OK) s = tr_loss_buffer_slot(&t->losses, &l);
            if (s == TR_OK) s = tr_model_forward_part(m, 0, 0, t->ids, t->tgt, NULL, NULL, l);
            if (s == TR_OK) tr_loss_buffer_commit(&t->losses, 0);
        }
    if (s == TR_OK && !t->have_pp) {
        s = tr_loss_buffer_flush(&t->losses);
        sum = t->losses.sum;
    }
    if (s == TR_OK && shards > 1) s = tr_train_dp_sum(&t->dp, &sum, 1);
    m->training = 1;
    *loss = sum / (double)(eval_iters * nmb);
    return s;
}

static int refuse_layout(tr_diags *d, const char *key, const char *what, int64_t size) {
    return tr_diag_add(d, TR_SEV_ERROR, "runtime.unsupported", NULL, key,
                       "set it to 1: the CPU training runtime implements data, tensor and "
                       "pipeline parallelism only",
                       "the CPU training runtime does not implement %s (size %lld) yet", what,
                       (long long)size) != TR_OK;
}

static int check_layout(const tr_config *c, bool distributed, tr_diags *d) {
    const tr_model_config *mc = &c->model;
    int bad = 0;
    if (mc->context_parallel_size > 1)
        bad |= refuse_layout(d, "model.context_parallel_size", "context parallelism",
                             mc->context_parallel_size);
    if (mc->expert_model_parallel_size > 1)
        bad |= refuse_layout(d, "model.expert_model_parallel_size", "expert parallelism",
                             mc->expert_model_parallel_size);
    if (!distributed && mc->pipeline_model_parallel_size > 1)
        bad |= tr_diag_add(d, TR_SEV_ERROR, "runtime.unsupported", NULL,
                           "model.pipeline_model_parallel_size",
                           "launch through run_recipe under mpirun (one rank per stage), or set "
                           "it to 1",
                           "pipeline parallelism (PP %lld) needs a communicator; this caller gave "
                           "none",
                           (long long)mc->pipeline_model_parallel_size) != TR_OK;
    else if (!distributed &&
             (c->derived.data_parallel_size > 1 || mc->tensor_model_parallel_size > 1))
        bad |= tr_diag_add(d, TR_SEV_ERROR, "runtime.unsupported", NULL, "derived.world_size",
                           "launch through run_recipe under mpirun (it creates the communicator)",
                           "data and tensor parallelism need a communicator; this caller gave "
                           "none") != TR_OK;
    return bad;
}

static tr_status setup(trainer *t, const tr_config *c, tr_diags *d) {
    tr_model_spec ms;
    tr_optimizer_spec os;
    int bad = tr_model_spec_from_config(c, &ms, d) != TR_OK;
    bad |= tr_lora_spec_from_config(c, &ms, d) != TR_OK;
    ms.no_weight_copy = t->o->no_weight_copy;
    ms.no_half_acts = t->o->no_half_acts;
    bad |= tr_optimizer_spec_from_config(c, &os, d) != TR_OK;
    bad |= tr_lr_schedule_from_config(c, &t->sched, d) != TR_OK;
    bad |= tr_train_check_features(c, d);
    bad |= tr_train_precision_from_config(c, &t->prec, d) != TR_OK;
    /* One rank keeps the plain loop (bitwise what it always computed); the distributed path
     * starts at two ranks. */
    t->distributed = t->o->comm != NULL && (c->derived.data_parallel_size > 1 ||
                                            c->model.tensor_model_parallel_size > 1 ||
                                            c->model.pipeline_model_parallel_size > 1);
    bad |= check_layout(c, t->distributed, d);
    if (c->train.train_iters == TR_NULL_INT || c->train.micro_batch_size == TR_NULL_INT ||
        c->train.global_batch_size == TR_NULL_INT)
        bad |= tr_diag_add(d, TR_SEV_ERROR, "runtime.no_iters", NULL,
                           "train.train_iters,train.micro_batch_size,train.global_batch_size",
                           "set train.train_iters, train.micro_batch_size and "
                           "train.global_batch_size",
                           "training needs an iteration count and batch sizes") != TR_OK;
    if (bad) return TR_ERR_CONFIG;
    t->mbs = (int)c->train.micro_batch_size;
    t->gbs = (int)c->train.global_batch_size;
    t->nmb = (int)c->derived.num_microbatches;
    t->seq = ms.seq;
    t->eod_mask = c->dataset.eod_mask_loss == 1;
    t->per_token_loss = c->model.calculate_per_token_loss;
    t->opt_spec = os;
    t->dp_size = 1;
    t->dp_rank = 0;
    if (t->distributed) {
        t->dp_size = tr_comm_group_size(t->o->comm, TR_GROUP_DP_CP);
        t->dp_rank = tr_comm_group_rank(t->o->comm, TR_GROUP_DP_CP);
        if (t->dp_size != c->derived.data_parallel_size) return TR_ERR_INVALID;
    }
    TR_TRY(tr_train_data_open(c, &t->data, d));
    if (ms.vocab < 256 && c->dataset.type == TR_DS_TEXT)
        return tr_diag_add(d, TR_SEV_ERROR, "data.text_vocab", NULL, "model.vocab_size",
                           "use a model with at least 256 token ids (the tiny recipes have 256)",
                           "byte-level text needs 256 token ids, the model has %d", ms.vocab);
    tr_tp_shard tp = {0, 1};
    if (t->distributed)
        tp = (tr_tp_shard){tr_comm_group_rank(t->o->comm, TR_GROUP_TP),
                           tr_comm_group_size(t->o->comm, TR_GROUP_TP)};
    int sp_seq = ms.sequence_parallel ? ms.seq : tp.size;
    if (ms.groups % tp.size || ms.ffn % tp.size || ms.vocab % tp.size || sp_seq % tp.size)
        return tr_diag_add(d, TR_SEV_ERROR, "runtime.tp_split", NULL,
                           "model.tensor_model_parallel_size",
                           "choose a TP size dividing the query groups, the MLP width, the "
                           "padded vocabulary and (sequence parallel) the sequence length",
                           "TP %d does not divide query groups %d, ffn %d, padded vocabulary %d "
                           "or sequence %d",
                           tp.size, ms.groups, ms.ffn, ms.vocab, ms.seq);
    /* Pipeline parallel: the model is this rank's stages only (docs/pipeline.md). */
    if (t->distributed && c->model.pipeline_model_parallel_size > 1) {
        t->have_pp = true; /* freed even when creation fails halfway */
        TR_TRY(tr_pp_exec_create(&t->pp, c, t->o->comm, d));
        TR_TRY(
            tr_model_create_parts_on(&t->model, t->dev, &ms, tp, t->mbs, t->pp.parts, t->pp.vpp));
        TR_TRY(tr_pp_exec_attach(&t->pp, &t->model, d));
        t->pp_idx = malloc((size_t)t->mbs * sizeof *t->pp_idx);
        if (!t->pp_idx) return TR_ERR_NOMEM;
    } else {
        tr_model_part whole = {0, ms.num_layers, true, true, 1};
        TR_TRY(tr_model_create_parts_on(&t->model, t->dev, &ms, tp, t->mbs, &whole, 1));
    }
    t->model.comm = t->o->comm;
    TR_TRY(tr_loss_buffer_create(&t->losses, t->dev, t->nmb > 0 ? t->nmb : 1));
    TR_TRY(tr_model_init_weights(&t->model, (uint64_t)c->rng.seed));
    t->model.dropout_seed = (uint64_t)c->rng.seed * 0x9E3779B97F4A7C15ull + 1;
    if (t->distributed)
        TR_TRY(tr_train_dp_setup(&t->dp, c, t->o->comm, &t->model, &os, d));
    else
        TR_TRY(tr_optimizer_create_on(&t->opt, t->dev, &os, t->model.info, t->model.n_info,
                                      t->model.n_params));
    int64_t bt = (int64_t)t->mbs * t->seq;
    t->sample = malloc((size_t)(t->seq + 1) * sizeof *t->sample);
    t->ids = malloc((size_t)bt * sizeof *t->ids);
    t->tgt = malloc((size_t)bt * sizeof *t->tgt);
    t->doc_start = malloc((size_t)bt * sizeof *t->doc_start);
    t->pos = malloc((size_t)bt * sizeof *t->pos);
    if (!t->sample || !t->ids || !t->tgt || !t->doc_start || !t->pos) return TR_ERR_NOMEM;
    /* checkpoint: load into the model and optimizer, and where the loop resumes */
    tr_train_ckpt_env ce = {.c = c,
                            .comm = t->distributed ? t->o->comm : NULL,
                            .model = &t->model,
                            .opt = t->distributed ? NULL : &t->opt,
                            .dp = t->distributed ? &t->dp : NULL,
                            .pp = t->have_pp ? &t->pp : NULL,
                            .scaler = &t->prec.scaler,
                            .log = t->o->log};
    return tr_train_ckpt_setup(&t->ckpt, &ce, d);
}

static void teardown(trainer *t) {
    tr_train_ckpt_free(&t->ckpt);
    tr_train_log_close(&t->log);
    tr_optimizer_free(&t->opt);
    if (t->have_pp) tr_pp_exec_free(&t->pp);
    tr_loss_buffer_free(&t->losses);
    tr_train_dp_free(&t->dp);
    tr_model_free(&t->model);
    tr_train_data_close(&t->data);
    free(t->pp_idx);
    free(t->sample);
    free(t->ids);
    free(t->tgt);
    free(t->doc_start);
    free(t->pos);
}

static tr_status nan_loss(tr_diags *d, int64_t iteration, double loss) {
    return tr_diag_add(d, TR_SEV_ERROR, "train.nan_loss", NULL,
                       "rerun_state_machine.check_for_nan_in_loss,optimizer.lr",
                       "lower optimizer.lr or raise scheduler.lr_warmup_iters; to keep going "
                       "anyway set rerun_state_machine.check_for_nan_in_loss=false",
                       "the loss of iteration %lld is %g", (long long)iteration, loss);
}

static tr_status test_eval(trainer *t, int64_t iteration) {
    int64_t iters = t->c->validation.eval_iters;
    if (t->data.n_samples[TR_SPLIT_TEST] <= 0 || iters <= 0) {
        tr_diag_add(t->d, TR_SEV_WARNING, "train.no_test_data", NULL, "dataset.split",
                    "give the test split a share, e.g. dataset.split=90,5,5",
                    "validation.test_mode is set but the test split is empty");
        return TR_OK;
    }
    double loss;
    TR_TRY(evaluate(t, TR_SPLIT_TEST, iters, &loss));
    tr_train_log_eval(&t->log, "test", iteration, loss);
    return TR_OK;
}

/* Whether to stop after iteration `it`: a signal, exit_interval or exit_duration_in_mins. */
static tr_stop_reason stop_reason(const trainer *t, int64_t it, int64_t iters, double t_start,
                                  int *signal) {
    const tr_train_config *tc = &t->c->train;
    int sig = t->o->handle_signals ? tr_train_signal_pending() : 0;
    if (sig) {
        *signal = sig;
        return TR_STOP_SIGNAL;
    }
    if (tc->exit_interval != TR_NULL_INT && it % tc->exit_interval == 0 && it < iters)
        return TR_STOP_EXIT_INTERVAL;
    if (tc->exit_duration_in_mins != TR_NULL_INT && it < iters &&
        now_s() - t_start > 60.0 * (double)tc->exit_duration_in_mins)
        return TR_STOP_DURATION;
    return TR_STOP_DONE;
}

/* A signal or the clock can reach the ranks after different iterations; every rank must stop
 * after the same one (else the others wait forever in the next collective). */
static tr_status agree_on_stop(trainer *t, tr_stop_reason *stop, int *signal) {
    int32_t v[2] = {(int32_t)*stop, (int32_t)*signal};
    TR_TRY(tr_device_all_reduce_host(t->dev, t->o->comm, TR_COMM_WORLD, v, 2, TR_COMM_I32,
                                     TR_COMM_MAX));
    *stop = (tr_stop_reason)v[0];
    *signal = v[1];
    return TR_OK;
}

/* Pipeline parallel: each stage's measured bubble (time blocked in transfer waits over the
 * iteration) next to the ideal (p - 1) / (v * m), on the iterations that log. Collective over
 * the pipeline group, so every rank calls it every iteration. */
static tr_status log_bubble(trainer *t, int64_t it, bool due) {
    if (!t->have_pp) return TR_OK;
    double b[64], mine = tr_pp_exec_bubble(&t->pp);
    int pp = t->pp.pp;
    if (pp > 64) return TR_OK;
    TR_TRY(tr_device_all_gather_host(t->dev, t->o->comm, TR_GROUP_PP, &mine, b, 1, TR_COMM_F64));
    if (!due || !t->o->log) return TR_OK;
    fprintf(t->o->log, "pipeline bubble (iteration %lld): measured", (long long)it);
    for (int i = 0; i < pp; i++) fprintf(t->o->log, " stage %d %.3f", i, b[i]);
    fprintf(t->o->log, "; expected (p-1)/(v*m) = %.3f\n",
            tr_pp_bubble_expected(pp, t->pp.vpp, t->pp.nmb));
    return TR_OK;
}

static tr_status loop(trainer *t, tr_train_result *r) {
    const tr_config *c = t->c;
    int64_t iters = c->train.train_iters;
    int64_t eval_interval = c->validation.eval_interval, eval_iters = c->validation.eval_iters;
    int64_t start_eval = c->validation.start_eval_at_iter;
    bool can_eval =
        eval_interval != TR_NULL_INT && eval_iters > 0 && t->data.n_samples[TR_SPLIT_VALID] > 0;
    if (eval_interval != TR_NULL_INT && eval_iters > 0 && !can_eval)
        tr_diag_add(t->d, TR_SEV_WARNING, "train.no_validation_data", NULL, "dataset.split",
                    "give the validation split a share, e.g. dataset.split=95,5,0",
                    "the validation split is empty: evaluation is skipped");
    /* Per device: the global batch's FLOPs shared by every rank of the run. */
    int world = t->o->comm ? tr_comm_group_size(t->o->comm, TR_COMM_WORLD) : 1;
    if (world < 1) world = 1;
    double flops_per_iter = 3.0 * tr_model_flops_per_seq(&t->model.full) * t->gbs / world;
    /* checkpoint: a resumed run continues the iteration count, data cursor and schedule */
    const tr_train_ckpt_pos *from = &t->ckpt.resume;
    int64_t consumed = from->consumed_samples, sched_samples = from->scheduler_samples;
    r->iterations = from->iteration;
    r->consumed_samples = consumed;
    r->skipped_iterations = from->skipped_iterations;
    int64_t last_eval_iter = -1;
    double t_start = now_s();
    r->last_eval_loss = NAN;
    r->loss_scale = NAN;
    if (c->validation.skip_train) { /* evaluation only, of the freshly initialised model */
        if (eval_iters > 0 && t->data.n_samples[TR_SPLIT_VALID] > 0) {
            TR_TRY(evaluate(t, TR_SPLIT_VALID, eval_iters, &r->last_eval_loss));
            tr_train_log_eval(&t->log, "validation", 0, r->last_eval_loss);
        }
        if (c->validation.test_mode) TR_TRY(test_eval(t, 0));
        r->seconds = now_s() - t_start;
        tr_train_log_end(&t->log, 0, r->stop, 0, r->seconds);
        return TR_OK;
    }
    for (int64_t it = from->iteration + 1; it <= iters; it++) {
        double t0 = now_s();
        step_out so = {0};
        if (in_list(&c->train.iterations_to_skip, it)) {
            so.loss = NAN;
            so.skipped = true;
        } else {
            TR_TRY(train_step(t, it, consumed, sched_samples, &so));
            if (c->rerun_state_machine.check_for_nan_in_loss && !isfinite(so.loss))
                return nan_loss(t->d, it, so.loss);
            if (!so.skipped) sched_samples += t->gbs;
        }
        consumed += t->gbs;
        if (so.skipped) r->skipped_iterations++;
        if (so.overflow) r->overflow_iterations++;
        r->loss_scale = t->log.loss_scale;
        r->iterations = it;
        r->consumed_samples = consumed;
        if (it == from->iteration + 1) r->first_loss = so.loss;
        r->last_loss = so.loss;
        if (t->o->losses && it <= t->o->losses_cap) t->o->losses[it - 1] = (float)so.loss;
        double seconds = now_s() - t0, pnorm = NAN;
        tr_stop_reason stop = stop_reason(t, it, iters, t_start, &r->signal);
        if (t->distributed) TR_TRY(agree_on_stop(t, &stop, &r->signal));
        bool stopping = stop != TR_STOP_DONE; /* logs its last iteration too */
        if (c->logger.log_params_norm && tr_train_log_due(&t->log, it, iters, stopping)) {
            if (t->distributed)
                TR_TRY(tr_train_dp_params_norm(&t->dp, &pnorm));
            else
                TR_TRY(tr_grad_norm_on(t->dev, t->model.params, t->model.n_params, &pnorm));
        }
        tr_train_log_iteration(&t->log, it, iters, stopping, consumed, so.loss, so.lr, so.grad_norm,
                               pnorm, so.skipped, seconds, flops_per_iter, (double)t->gbs * t->seq);
        TR_TRY(log_bubble(t, it, tr_train_log_due(&t->log, it, iters, stopping)));
        if (can_eval && it % eval_interval == 0 &&
            (start_eval == TR_NULL_INT || it >= start_eval)) {
            TR_TRY(evaluate(t, TR_SPLIT_VALID, eval_iters, &r->last_eval_loss));
            tr_train_log_eval(&t->log, "validation", it, r->last_eval_loss);
            last_eval_iter = it;
        }
        /* checkpoint: save_interval, or the last iteration of this run */
        tr_train_ckpt_pos at = {it, consumed, sched_samples, r->skipped_iterations};
        TR_TRY(tr_train_ckpt_after_iteration(&t->ckpt, &at, stop != TR_STOP_DONE || it == iters));
        if (stop != TR_STOP_DONE) {
            r->stop = stop;
            break;
        }
    }
    TR_TRY(tr_train_ckpt_finish(&t->ckpt)); /* checkpoint: an async save completes */
    if (can_eval && last_eval_iter != r->iterations && r->stop != TR_STOP_SIGNAL) {
        TR_TRY(evaluate(t, TR_SPLIT_VALID, eval_iters, &r->last_eval_loss));
        tr_train_log_eval(&t->log, "validation", r->iterations, r->last_eval_loss);
    }
    if (c->validation.test_mode && r->stop != TR_STOP_SIGNAL) TR_TRY(test_eval(t, r->iterations));
    r->seconds = now_s() - t_start;
    r->buckets_started_early = t->buckets_started_early;
    tr_train_log_end(&t->log, r->iterations, r->stop, r->signal, r->seconds);
    return TR_OK;
}

/* The logical model's parameters (whole tensors, not this rank's TP shards or stages). */
static int64_t count_params(const tr_model *m, bool trainable_only) {
    tr_model_part whole = {0, m->full.num_layers, true, true, 1};
    tr_param_info *info = NULL;
    int n_info = 0;
    int64_t numel = 0, n = 0;
    if (tr_model_param_list(&m->full, (tr_tp_shard){0, 1}, &whole, 1, &info, &n_info, &numel) !=
        TR_OK)
        return -1;
    for (int i = 0; i < n_info; i++) n += trainable_only && info[i].frozen ? 0 : info[i].numel;
    free(info);
    return n;
}

tr_status tr_train_run(const tr_config *c, const tr_train_opts *o, tr_train_result *r,
                       tr_diags *d) {
    trainer t;
    memset(&t, 0, sizeof t);
    memset(r, 0, sizeof *r);
    t.c = c;
    t.o = o;
    t.d = d;
    t.dev = o->device ? o->device : tr_device_host();
    tr_status s = setup(&t, c, d);
    if (s == TR_OK)
        s = tr_train_log_open(&t.log, o->log, o->metrics_path, c->logger.log_interval, d);
    if (s == TR_OK && o->log)
        fprintf(o->log,
                "model: %lld parameters (%d layers, hidden %d); %d microbatch(es) of %d x %d "
                "tokens per iteration; %lld training samples per epoch\n",
                (long long)count_params(&t.model, false), t.model.full.num_layers,
                t.model.full.hidden, t.nmb, t.mbs, t.seq,
                (long long)t.data.n_samples[TR_SPLIT_TRAIN]);
    if (s == TR_OK && o->log && t.model.spec.lora_rank)
        fprintf(o->log,
                "LoRA: rank %d, scale %g; %lld adapter parameters train, the rest is frozen\n",
                t.model.spec.lora_rank, (double)t.model.spec.lora_scale,
                (long long)count_params(&t.model, true));
    tr_train_signals sig = {0};
    if (s == TR_OK && o->handle_signals) tr_train_signals_install(&sig);
    if (s == TR_OK) s = loop(&t, r);
    if (s == TR_OK && t.distributed) s = tr_train_dp_params_ready(&t.dp);
    if (s == TR_OK) s = tr_device_sync(t.dev);
    if (s == TR_OK) tr_device_log_peaks(t.dev);
    if (s == TR_OK && o->on_finish) s = o->on_finish(o->on_finish_ctx, &t.model);
    tr_train_signals_restore(&sig);
    teardown(&t);
    return s;
}
