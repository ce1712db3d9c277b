/* One training iteration (runtime/train/trainer.h): this rank's microbatches forward and backward
 * on one rank, under data/tensor parallelism or through the pipeline executor, then the gradient
 * reduction, clipping and the optimizer step. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/data/datasets/sampler.h"
#include "runtime/train/trainer.h"

/* Context parallelism: how much of the microbatch's loss this rank's tokens carry. */
static void cp_share(trainer *t, int64_t global) {
    int64_t mine = 0;
    for (int64_t i = 0; i < (int64_t)t->mbs * t->seq; i++) mine += t->tgt[i] >= 0;
    t->cp_weight = global > 0 ? (double)mine / (double)global : 0.0;
}

/* Fine-tuning data: targets come masked from the dataset, and the model learns where each
 * packed document starts and the positions inside it. */
static tr_status load_sequences(trainer *t, int split, int64_t first, const int64_t *index) {
    int64_t global = 0;
    for (int b = 0; b < t->mbs; b++) {
        int64_t at = (int64_t)b * t->seq;
        tr_token_sequence seq = {t->ids + at, t->tgt + at, t->doc_start + at, t->pos + at};
        if (t->cp_size == 1) {
            TR_TRY(t->data.sequence(&t->data, split, index ? index[b] : first + b, &seq));
            continue;
        }
        /* Context parallelism: the whole packed sequence, then this rank's two pieces of each
         * document (dataset.pad_seq_to_mult made every length a multiple of 2 CP). */
        tr_token_sequence full = {t->full_ids, t->full_tgt, t->full_ds, t->full_pos};
        TR_TRY(t->data.sequence(&t->data, split, index ? index[b] : first + b, &full));
        TR_TRY(tr_cp_index(t->cp_size, t->cp_rank, t->full_ds, t->full_seq, t->cp_index,
                           seq.doc_start));
        for (int i = 0; i < t->seq; i++) {
            seq.ids[i] = t->full_ids[t->cp_index[i]];
            seq.targets[i] = t->full_tgt[t->cp_index[i]];
            seq.pos[i] = t->full_pos[t->cp_index[i]];
        }
        for (int i = 0; i < t->full_seq; i++) global += t->full_tgt[i] >= 0;
    }
    if (t->cp_size > 1) cp_share(t, global);
    return tr_model_set_sequences(&t->model, t->doc_start, t->pos);
}

/* Microbatch of the mbs samples index[0..mbs) of `split` (consecutive from index[0] when index
 * is NULL): inputs are tokens [0, seq), labels tokens [1, seq]. With dataset.eod_mask_loss the
 * loss is masked where the INPUT token is end-of-document, as Megatron's GPTDataset does (and as
 * runtime/data/datasets/gpt_dataset.c, checked against megatron-core, does). */
tr_status tr_trainer_load_microbatch(trainer *t, int split, int64_t first, const int64_t *index) {
    t->cp_weight = 1.0;
    if (t->data.sequence) return load_sequences(t, split, first, index);
    bool cp = t->cp_size > 1;
    int64_t global = 0;
    for (int b = 0; b < t->mbs; b++) {
        TR_TRY(t->data.sample(&t->data, split, index ? index[b] : first + b, t->sample));
        int32_t *ids = t->ids + (int64_t)b * t->seq, *tgt = t->tgt + (int64_t)b * t->seq;
        /* Context parallelism: the whole sequence first, then this rank's two chunks. */
        int32_t *fids = cp ? t->full_ids : ids, *ftgt = cp ? t->full_tgt : tgt;
        for (int i = 0; i < t->full_seq; i++) {
            fids[i] = t->sample[i];
            ftgt[i] = t->sample[i + 1];
            if (t->eod_mask && t->data.eod >= 0 && fids[i] == t->data.eod) ftgt[i] = -1;
        }
        if (!cp) continue;
        for (int i = 0; i < t->full_seq; i++) global += ftgt[i] >= 0;
        tr_cp_take(t->cp_size, t->cp_rank, fids, t->full_seq, ids);
        tr_cp_take(t->cp_size, t->cp_rank, ftgt, t->full_seq, tgt);
        for (int i = 0; i < t->seq; i++)
            t->pos[(int64_t)b * t->seq + i] =
                (int32_t)tr_cp_global_pos(t->cp_size, t->cp_rank, t->seq, i);
    }
    if (!cp) return TR_OK;
    cp_share(t, global);
    /* Global positions for RoPE and learned positions; the ring knows the causal pattern. */
    return tr_model_set_sequences(&t->model, NULL, t->pos);
}

/* The samples this rank reads in its microbatch mb of the global batch starting at `consumed`:
 * Megatron's pretraining sampler (rank r takes the r-th run of mbs samples of each group of
 * mbs x dp). The train split is read past its end in later epochs, so the sampler never runs
 * out. */
static tr_status microbatch_index(const trainer *t, int64_t consumed, int mb, int64_t *index) {
    tr_sampler s = {.total_samples = INT64_MAX / 2,
                    .consumed_samples = consumed,
                    .micro_batch_size = t->mbs,
                    .dp_rank = t->data_dp_rank,
                    .dp_size = t->data_dp_size,
                    .drop_last = true};
    return tr_sampler_micro_batch(&s, mb, index) == t->mbs ? TR_OK : TR_ERR_INVALID;
}

/* Test hook (tests/pp/stuck_peer.sh only): with TRESTLE_TEST_STALL_RANK=r and
 * TRESTLE_TEST_STALL_ITER=i in the environment, world rank r stops itself with SIGSTOP after the
 * forward of its first microbatch of iteration i, so its peers see a process that is alive (the
 * launcher notices nothing) but never answers, and must end through the communication timeout.
 * It prints its pid first so the test can kill it by pid, and the time, so the test can measure
 * from the fault. */
static void test_stall_hook(const trainer *t, int64_t iteration, int mb) {
    const char *rank_s = getenv("TRESTLE_TEST_STALL_RANK");
    const char *iter_s = getenv("TRESTLE_TEST_STALL_ITER");
    if (!rank_s || !iter_s || !t->o->comm || mb != 0) return;
    if (atoll(iter_s) != iteration) return;
    if (atoi(rank_s) != tr_comm_group_rank(t->o->comm, TR_COMM_WORLD)) return;
    /* TRESTLE_TEST_STALL_SIGNAL=KILL: the rank dies instead (kill -9), and the launcher sees it. */
    const char *sig_s = getenv("TRESTLE_TEST_STALL_SIGNAL");
    bool kill_it = sig_s && !strcmp(sig_s, "KILL");
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    fprintf(stderr, "test hook: rank %s %s (pid %ld) in iteration %lld at %lld.%03ld\n", rank_s,
            kill_it ? "dies" : "stalls", (long)getpid(), (long long)iteration,
            (long long)now.tv_sec, now.tv_nsec / 1000000);
    fflush(stderr);
    raise(kill_it ? SIGKILL : SIGSTOP);
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
        if (t->distributed) tr_train_dp_set_last_microbatch(&t->dp, mb == t->nmb - 1);
        st = microbatch_index(t, consumed, mb, idx);
        if (st == TR_OK) st = tr_trainer_load_microbatch(t, TR_SPLIT_TRAIN, 0, idx);
        /* The dropout masks follow the global microbatch, so every layout draws the masks of
         * the single-rank run. */
        int64_t global_mb = (int64_t)mb * t->data_dp_size + t->data_dp_rank;
        m->dropout_round =
            (uint64_t)(iteration - 1) * (uint64_t)(t->nmb * t->data_dp_size) + (uint64_t)global_mb;
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

static tr_status moe_dp_sum(void *ctx, double *v, int n) {
    trainer *t = ctx;
    return tr_train_dp_sum_tokens(&t->dp, v, n);
}

/* MoE, after the step's last backward: the balancing losses' values averaged over MoE layers and
 * microbatches (summed over the pipeline's stages and the sequence-parallel chunks, averaged over
 * data-parallel ranks), and the
 * expert-bias update from the step's token counts (summed over TP x DP x CP), which Megatron
 * makes in finalize_model_grads, skipped steps included. */
static tr_status moe_step(trainer *t, step_out *out) {
    tr_model *m = &t->model;
    const tr_moe_spec *s = &m->spec.moe;
    out->moe_lb = out->moe_z = NAN;
    if (s->experts <= 0) return TR_OK;
    double g[3];
    int n;
    tr_model_moe_stats(m, &g[0], &g[1], &n);
    g[2] = n;
    /* Sequence and context parallel: each rank's losses cover its part of the sequences
     * (Megatron's tracker sums them over tp-cp); the DP x CP sum below then counts each CP
     * group's total and its microbatches cp times alike. */
    if (m->spec.sequence_parallel || t->cp_size > 1)
        TR_TRY(tr_device_all_reduce_host(t->dev, t->o->comm, TR_GROUP_TP_CP, g, 2, TR_COMM_F64,
                                         TR_COMM_SUM));
    if (t->distributed) TR_TRY(tr_train_dp_sum(&t->dp, g, 3));
    if (t->have_pp)
        TR_TRY(tr_device_all_reduce_host(t->dev, t->o->comm, TR_GROUP_PP, g, 3, TR_COMM_F64,
                                         TR_COMM_SUM));
    if (g[2] > 0 && s->balance != TR_MOE_LB_NONE && s->aux_coeff > 0.0f) out->moe_lb = g[0] / g[2];
    if (g[2] > 0 && s->z_coeff > 0.0f) out->moe_z = g[1] / g[2];
    return tr_model_moe_step_end(m, t->distributed ? moe_dp_sum : NULL, t);
}

/* One iteration on one rank without a comm: accumulate, then clip and step. */
static tr_status train_step_single(trainer *t, int64_t iteration, int64_t consumed,
                                   int64_t sched_samples, step_out *out) {
    tr_model *m = &t->model;
    /* the op (threaded on the CPU) rather than a device memset: +0.0f is all-zero bits too,
     * and the DP path zeroes its buckets the same way (tr_ddp_start_iteration) */
    TR_TRY(m->ops->fill(m->grads, m->n_params, 0.0f));
    double sum = 0.0;
    int64_t tokens = 0;
    TR_TRY(accumulate(t, iteration, consumed, &sum, &tokens));
    TR_TRY(moe_step(t, out));
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
    TR_TRY(tr_optimizer_step_clipped(&t->opt, m->params, m->grads, out->lr, out->wd,
                                     tr_clip_coeff(t->opt.spec.clip_grad, out->grad_norm)));
    tr_model_params_stepped(m); /* the weight copy follows at the next forward */
    return TR_OK;
}

static tr_status pp_load(void *ctx, int mb, const int32_t **ids, const int32_t **targets) {
    trainer *t = ctx;
    TR_TRY(microbatch_index(t, t->cur_consumed, mb, t->pp_idx));
    TR_TRY(tr_trainer_load_microbatch(t, TR_SPLIT_TRAIN, 0, t->pp_idx));
    int64_t global_mb = (int64_t)mb * t->data_dp_size + t->data_dp_rank;
    t->model.dropout_round =
        (uint64_t)(t->cur_iteration - 1) * (uint64_t)(t->nmb * t->data_dp_size) +
        (uint64_t)global_mb;
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
    tr_train_dp_set_last_microbatch(&t->dp, last);
    return TR_OK;
}

static tr_status pp_finish_grads(void *ctx) {
    trainer *t = ctx;
    return tr_train_dp_finish_grads(&t->dp);
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
    TR_TRY(tr_train_dp_start_iteration(&t->dp, grad_scale));
    double sum = 0.0;
    int64_t tokens = 0;
    if (t->have_pp) {
        TR_TRY(accumulate_pp(t, iteration, consumed, &sum, &tokens));
    } else {
        TR_TRY(accumulate(t, iteration, consumed, &sum, &tokens));
        TR_TRY(tr_train_dp_finish_grads(&t->dp));
    }
    t->buckets_started_early += tr_train_dp_started_early(&t->dp);
    TR_TRY(moe_step(t, out));
    double g[2] = {sum, (double)tokens};
    TR_TRY(tr_train_dp_sum(&t->dp, g, 2));
    if (t->per_token_loss) {
        if (g[1] > 0) TR_TRY(tr_train_dp_scale_grads(&t->dp, 1.0f / (float)g[1]));
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

/* The iteration's MTP losses: each depth's mean over this rank's microbatches, averaged over DP
 * (Megatron's avg_group), from the loss stage (summed over the pipeline: the other stages have
 * none). */
static tr_status log_mtp(trainer *t) {
    int D = t->model.spec.mtp_layers;
    if (D <= 0) return TR_OK;
    float v[TR_TRAIN_LOG_MTP];
    double g[TR_TRAIN_LOG_MTP];
    float *all = D > TR_TRAIN_LOG_MTP ? malloc((size_t)D * sizeof *all) : v;
    if (!all) return TR_ERR_NOMEM;
    tr_status st = tr_model_mtp_losses(&t->model, all);
    int n = D < TR_TRAIN_LOG_MTP ? D : TR_TRAIN_LOG_MTP;
    for (int d = 0; d < n; d++) g[d] = all[d];
    if (all != v) free(all);
    TR_TRY(st);
    if (t->distributed) {
        TR_TRY(tr_device_all_reduce_host(t->dev, t->o->comm, TR_GROUP_DP, g, (size_t)n, TR_COMM_F64,
                                         TR_COMM_SUM));
        TR_TRY(tr_device_all_reduce_host(t->dev, t->o->comm, TR_GROUP_PP, g, (size_t)n, TR_COMM_F64,
                                         TR_COMM_SUM));
        for (int d = 0; d < n; d++) g[d] /= (double)t->dp_size;
    }
    tr_train_log_mtp(&t->log, g, n);
    return TR_OK;
}

tr_status tr_trainer_step(trainer *t, int64_t iteration, int64_t consumed, int64_t sched_samples,
                          step_out *out) {
    t->model.grad_loss_scale = tr_train_precision_grad_scale(&t->prec);
    double scale_used = t->prec.scaler.scale;
    TR_TRY(t->distributed ? train_step_dp(t, iteration, consumed, sched_samples, out)
                          : train_step_single(t, iteration, consumed, sched_samples, out));
    t->log.loss_scale = tr_train_precision_after_step(&t->prec, out->overflow);
    TR_TRY(log_mtp(t));
    if (out->overflow && t->o->log)
        fprintf(t->o->log,
                "iteration %lld: inf/NaN in the gradients at loss scale %.1f, step skipped; loss "
                "scale now %.1f\n",
                (long long)iteration, scale_used, t->prec.scaler.scale);
    return TR_OK;
}
