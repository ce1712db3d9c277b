/* See runtime/train.h. */
#include "runtime/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/model.h"
#include "runtime/optimizer.h"
#include "runtime/schedule_lr.h"
#include "runtime/train_checks.h"
#include "runtime/train_data.h"
#include "runtime/train_log.h"
#include "runtime/train_signal.h"

typedef struct trainer {
    const tr_config *c;
    const tr_train_opts *o;
    tr_diags *d;
    tr_model model;
    tr_optimizer opt;
    tr_lr_schedule sched;
    tr_token_dataset data;
    tr_train_log log;
    int mbs, nmb, gbs, seq;
    int32_t *sample, *ids, *tgt;
    int eod_mask;
    int per_token_loss; /* model.calculate_per_token_loss */
} trainer;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Microbatch of mbs samples starting at sample `first` of `split`: inputs are tokens [0, seq),
 * labels tokens [1, seq]; end-of-document labels are masked when dataset.eod_mask_loss. */
static tr_status load_microbatch(trainer *t, int split, int64_t first) {
    for (int b = 0; b < t->mbs; b++) {
        TR_TRY(t->data.sample(&t->data, split, first + b, t->sample));
        int32_t *ids = t->ids + (int64_t)b * t->seq, *tgt = t->tgt + (int64_t)b * t->seq;
        for (int i = 0; i < t->seq; i++) {
            ids[i] = t->sample[i];
            tgt[i] = t->sample[i + 1];
            if (t->eod_mask && t->data.eod >= 0 && tgt[i] == t->data.eod) tgt[i] = -1;
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
} step_out;

/* One iteration: accumulate gradients over num_microbatches, then clip and step. */
static tr_status train_step(trainer *t, int64_t iteration, int64_t consumed, int64_t sched_samples,
                            step_out *out) {
    tr_model *m = &t->model;
    memset(m->grads, 0, (size_t)m->n_params * sizeof(float));
    double sum = 0.0;
    int64_t tokens = 0;
    for (int mb = 0; mb < t->nmb; mb++) {
        TR_TRY(load_microbatch(t, TR_SPLIT_TRAIN, consumed + (int64_t)mb * t->mbs));
        m->dropout_round = (uint64_t)(iteration - 1) * (uint64_t)t->nmb + (uint64_t)mb;
        float loss = 0.0f;
        TR_TRY(tr_model_forward(m, t->ids, t->tgt, &loss));
        /* Per-token loss: gradients of the token SUM now, divided by the batch's token count
         * below; otherwise the mean of the microbatch means. */
        float scale = t->per_token_loss ? (float)m->n_valid : 1.0f / (float)t->nmb;
        TR_TRY(tr_model_backward(m, scale));
        sum += t->per_token_loss ? (double)loss * (double)m->n_valid : loss;
        tokens += m->n_valid;
    }
    if (t->per_token_loss) {
        if (tokens > 0) TR_TRY(m->ops->scale(m->grads, m->n_params, 1.0f / (float)tokens));
        out->loss = tokens > 0 ? sum / (double)tokens : 0.0;
    } else {
        out->loss = sum / t->nmb;
    }
    out->lr = tr_lr_at(&t->sched, sched_samples);
    out->wd = tr_wd_at(&t->sched, sched_samples);
    TR_TRY(tr_grad_norm(m->ops, m->grads, m->n_params, &out->grad_norm));
    out->skipped =
        !isfinite(out->grad_norm) || out->grad_norm > t->opt.spec.grad_norm_skip_threshold;
    if (out->skipped) return TR_OK;
    TR_TRY(tr_clip_grads(m->ops, m->grads, m->n_params, t->opt.spec.clip_grad, out->grad_norm));
    return tr_optimizer_step(&t->opt, m->params, m->grads, out->lr, out->wd);
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
    tr_status s = TR_OK;
    for (int64_t it = 0; it < eval_iters && s == TR_OK; it++)
        for (int64_t mb = 0; mb < nmb && s == TR_OK; mb++) {
            float l = 0.0f;
            s = load_microbatch(t, split, (it * nmb + mb) * t->mbs);
            if (s == TR_OK) s = tr_model_forward(m, t->ids, t->tgt, &l);
            sum += l;
        }
    m->training = 1;
    *loss = sum / (double)(eval_iters * nmb);
    return s;
}

static tr_status setup(trainer *t, const tr_config *c, tr_diags *d) {
    tr_model_spec ms;
    tr_optimizer_spec os;
    int bad = tr_model_spec_from_config(c, &ms, d) != TR_OK;
    bad |= tr_optimizer_spec_from_config(c, &os, d) != TR_OK;
    bad |= tr_lr_schedule_from_config(c, &t->sched, d) != TR_OK;
    bad |= tr_train_check_features(c, d);
    if (c->derived.data_parallel_size != 1)
        bad |= tr_diag_add(d, TR_SEV_ERROR, "runtime.unsupported", NULL, "derived.world_size",
                           "run on one rank (data parallelism is a separate issue)",
                           "the CPU training runtime trains on one rank so far") != TR_OK;
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
    TR_TRY(tr_train_data_open(c, &t->data, d));
    if (ms.vocab < 256 && c->dataset.type == TR_DS_TEXT)
        return tr_diag_add(d, TR_SEV_ERROR, "data.text_vocab", NULL, "model.vocab_size",
                           "use a model with at least 256 token ids (the tiny recipes have 256)",
                           "byte-level text needs 256 token ids, the model has %d", ms.vocab);
    TR_TRY(tr_model_create(&t->model, &ms, (tr_tp_shard){0, 1}, tr_ops_cpu(), t->mbs));
    TR_TRY(tr_model_init_weights(&t->model, (uint64_t)c->rng.seed));
    t->model.dropout_seed = (uint64_t)c->rng.seed * 0x9E3779B97F4A7C15ull + 1;
    TR_TRY(tr_optimizer_create(&t->opt, &os, t->model.ops, t->model.info, t->model.n_info,
                               t->model.n_params));
    int64_t bt = (int64_t)t->mbs * t->seq;
    t->sample = malloc((size_t)(t->seq + 1) * sizeof *t->sample);
    t->ids = malloc((size_t)bt * sizeof *t->ids);
    t->tgt = malloc((size_t)bt * sizeof *t->tgt);
    return t->sample && t->ids && t->tgt ? TR_OK : TR_ERR_NOMEM;
}

static void teardown(trainer *t) {
    tr_train_log_close(&t->log);
    tr_optimizer_free(&t->opt);
    tr_model_free(&t->model);
    tr_train_data_close(&t->data);
    free(t->sample);
    free(t->ids);
    free(t->tgt);
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
    double flops_per_iter = 3.0 * tr_model_flops_per_seq(&t->model.spec) * t->gbs;
    int64_t consumed = 0, sched_samples = 0;
    int64_t last_eval_iter = -1;
    double t_start = now_s();
    r->last_eval_loss = NAN;
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
    for (int64_t it = 1; it <= iters; it++) {
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
        r->iterations = it;
        r->consumed_samples = consumed;
        if (it == 1) r->first_loss = so.loss;
        r->last_loss = so.loss;
        if (t->o->losses && it <= t->o->losses_cap) t->o->losses[it - 1] = (float)so.loss;
        double seconds = now_s() - t0, pnorm = NAN;
        tr_stop_reason stop = stop_reason(t, it, iters, t_start, &r->signal);
        bool stopping = stop != TR_STOP_DONE; /* logs its last iteration too */
        if (c->logger.log_params_norm && tr_train_log_due(&t->log, it, iters, stopping))
            TR_TRY(tr_grad_norm(t->model.ops, t->model.params, t->model.n_params, &pnorm));
        tr_train_log_iteration(&t->log, it, iters, stopping, consumed, so.loss, so.lr, so.grad_norm,
                               pnorm, so.skipped, seconds, flops_per_iter, (double)t->gbs * t->seq);
        if (can_eval && it % eval_interval == 0 &&
            (start_eval == TR_NULL_INT || it >= start_eval)) {
            TR_TRY(evaluate(t, TR_SPLIT_VALID, eval_iters, &r->last_eval_loss));
            tr_train_log_eval(&t->log, "validation", it, r->last_eval_loss);
            last_eval_iter = it;
        }
        if (stop != TR_STOP_DONE) {
            r->stop = stop;
            break;
        }
    }
    if (can_eval && last_eval_iter != r->iterations && r->stop != TR_STOP_SIGNAL) {
        TR_TRY(evaluate(t, TR_SPLIT_VALID, eval_iters, &r->last_eval_loss));
        tr_train_log_eval(&t->log, "validation", r->iterations, r->last_eval_loss);
    }
    if (c->validation.test_mode && r->stop != TR_STOP_SIGNAL) TR_TRY(test_eval(t, r->iterations));
    r->seconds = now_s() - t_start;
    tr_train_log_end(&t->log, r->iterations, r->stop, r->signal, r->seconds);
    return TR_OK;
}

static int64_t count_params(const tr_model *m) {
    int64_t n = 0;
    for (int i = 0; i < m->n_info; i++) n += m->info[i].numel;
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
    tr_status s = setup(&t, c, d);
    if (s == TR_OK)
        s = tr_train_log_open(&t.log, o->log, o->metrics_path, c->logger.log_interval, d);
    if (s == TR_OK && o->log)
        fprintf(o->log,
                "model: %lld parameters (%d layers, hidden %d); %d microbatch(es) of %d x %d "
                "tokens per iteration; %lld training samples per epoch\n",
                (long long)count_params(&t.model), t.model.spec.num_layers, t.model.spec.hidden,
                t.nmb, t.mbs, t.seq, (long long)t.data.n_samples[TR_SPLIT_TRAIN]);
    tr_train_signals sig = {0};
    if (s == TR_OK && o->handle_signals) tr_train_signals_install(&sig);
    if (s == TR_OK) s = loop(&t, r);
    tr_train_signals_restore(&sig);
    teardown(&t);
    return s;
}
