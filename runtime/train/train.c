/* See runtime/train/train.h: the loop over iterations, evaluation and checkpoint points, stop
 * conditions and the end of a run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/train/signal.h"
#include "runtime/train/trainer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool in_list(const tr_int_list *l, int64_t v) {
    for (int i = 0; !l->null && i < l->n; i++)
        if (l->v[i] == v) return true;
    return false;
}

static tr_status nan_loss(tr_diags *d, int64_t iteration, double loss) {
    return tr_diag_add(d, TR_SEV_ERROR, "train.nan_loss", NULL,
                       "rerun_state_machine.check_for_nan_in_loss,optimizer.lr",
                       "lower optimizer.lr or raise scheduler.lr_warmup_iters; to keep going "
                       "anyway set rerun_state_machine.check_for_nan_in_loss=false",
                       "the loss of iteration %lld is %g", (long long)iteration, loss);
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
    /* Every rank now stops after this iteration: the save that follows gets the full timeout
     * instead of the short grace a stop signal gives a blocked wait. */
    if (*stop == TR_STOP_SIGNAL) tr_comm_set_stop_flag(NULL);
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

/* MoE: the log interval's tokens per expert of every MoE layer, summed over the data-parallel
 * ranks and the pipeline's stages, for the record of a logged iteration. Collective when due
 * (every rank agrees on that). */
static tr_status log_moe_tokens(trainer *t, bool due) {
    tr_model *m = &t->model;
    /* the MTP depths' layers follow the decoder's (numbered after them), MoE when its last is */
    int E = m->spec.moe.experts, L = m->spec.num_layers + m->spec.mtp_layers;
    if (E <= 0 || !due) return TR_OK;
    uint64_t mask[TR_MOE_MAX_LAYERS / 64];
    memcpy(mask, m->spec.moe.layers, sizeof mask);
    for (int i = m->spec.num_layers; i < L && i < TR_MOE_MAX_LAYERS; i++)
        if (tr_moe_is_layer(&m->spec.moe, m->spec.num_layers - 1)) mask[i / 64] |= 1ull << (i % 64);
    double *v = malloc((size_t)L * E * sizeof *v);
    if (!v) return TR_ERR_NOMEM;
    tr_model_moe_tokens(m, v);
    tr_status st = TR_OK;
    if (t->distributed) st = tr_train_dp_sum_tokens(&t->dp, v, L * E);
    if (st == TR_OK && t->have_pp)
        st = tr_device_all_reduce_host(t->dev, t->o->comm, TR_GROUP_PP, v, (size_t)L * E,
                                       TR_COMM_F64, TR_COMM_SUM);
    if (st == TR_OK) st = tr_train_log_moe_tokens(&t->log, v, L, E, mask);
    free(v);
    return st;
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
    /* Whole sequences: under CP the model holds seq / CP rows of each. */
    tr_model_spec whole = t->model.full;
    whole.seq = t->full_seq;
    double flops_per_iter = 3.0 * tr_model_flops_per_seq(&whole) * t->gbs / world;
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
            TR_TRY(tr_trainer_evaluate(t, TR_SPLIT_VALID, eval_iters, &r->last_eval_loss));
            tr_train_log_eval(&t->log, "validation", 0, r->last_eval_loss);
        }
        if (c->validation.test_mode) TR_TRY(tr_trainer_test_eval(t, 0));
        r->seconds = now_s() - t_start;
        tr_train_log_end(&t->log, 0, r->stop, 0, r->seconds);
        return TR_OK;
    }
    for (int64_t it = from->iteration + 1; it <= iters; it++) {
        double t0 = now_s();
        step_out so = {.moe_lb = NAN, .moe_z = NAN};
        if (in_list(&c->train.iterations_to_skip, it)) {
            so.loss = NAN;
            so.skipped = true;
        } else {
            TR_TRY(tr_trainer_step(t, it, consumed, sched_samples, &so));
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
        tr_train_log_moe(&t->log, so.moe_lb, so.moe_z);
        TR_TRY(log_moe_tokens(t, tr_train_log_due(&t->log, it, iters, stopping)));
        tr_train_log_iteration(&t->log, it, iters, stopping, consumed, so.loss, so.lr, so.grad_norm,
                               pnorm, so.skipped, seconds, flops_per_iter,
                               (double)t->gbs * t->full_seq);
        TR_TRY(log_bubble(t, it, tr_train_log_due(&t->log, it, iters, stopping)));
        if (can_eval && it % eval_interval == 0 &&
            (start_eval == TR_NULL_INT || it >= start_eval)) {
            TR_TRY(tr_trainer_evaluate(t, TR_SPLIT_VALID, eval_iters, &r->last_eval_loss));
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
        TR_TRY(tr_trainer_evaluate(t, TR_SPLIT_VALID, eval_iters, &r->last_eval_loss));
        tr_train_log_eval(&t->log, "validation", r->iterations, r->last_eval_loss);
    }
    if (c->validation.test_mode && r->stop != TR_STOP_SIGNAL)
        TR_TRY(tr_trainer_test_eval(t, r->iterations));
    r->seconds = now_s() - t_start;
    r->buckets_started_early = t->buckets_started_early;
    for (int k = 0; t->distributed && k < t->dp.n_bufs; k++)
        r->grad_numel[k] = t->dp.bufs[k].layout.numel;
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
    tr_status s = tr_trainer_setup(&t, c, d);
    if (s == TR_OK)
        s = tr_train_log_open(&t.log, o->log, o->metrics_path, c->logger.log_interval, d);
    if (s == TR_OK) s = tr_tb_open(&t.log.tb, o->tensorboard_dir, c, d);
    if (s == TR_OK && o->log)
        fprintf(o->log,
                "model: %lld parameters (%d layers, hidden %d); %d microbatch(es) of %d x %d "
                "tokens per iteration; %lld training samples per epoch\n",
                (long long)count_params(&t.model, false), t.model.full.num_layers,
                t.model.full.hidden, t.nmb, t.mbs, t.full_seq,
                (long long)t.data.n_samples[TR_SPLIT_TRAIN]);
    if (s == TR_OK && o->log && t.model.spec.lora_rank)
        fprintf(o->log,
                "%s: rank %d, scale %g; %lld adapter parameters train, the rest is frozen\n",
                t.model.spec.lora_dora ? "DoRA" : "LoRA", t.model.spec.lora_rank,
                (double)t.model.spec.lora_scale, (long long)count_params(&t.model, true));
    tr_train_signals sig = {0};
    if (s == TR_OK && o->handle_signals) tr_train_signals_install(&sig);
    if (s == TR_OK) s = loop(&t, r);
    if (s == TR_OK && t.distributed) s = tr_train_dp_params_ready(&t.dp);
    if (s == TR_OK) s = tr_device_sync(t.dev);
    if (s == TR_OK) tr_device_log_peaks(t.dev);
    if (s == TR_OK && o->on_finish) s = o->on_finish(o->on_finish_ctx, &t.model);
    tr_train_signals_restore(&sig);
    tr_trainer_teardown(&t);
    return s;
}
