/* Evaluation (runtime/train/trainer.h): forward-only passes over the validation or test split,
 * split over data-parallel ranks and through the pipeline stages. */
#include "runtime/train/trainer.h"

/* Context parallelism: this rank's share of the microbatch's mean (trainer.h, cp_weight), so
 * the sum over the CP group is the whole microbatch's mean loss, as one rank computes it. */
static tr_status weigh_loss(void *ctx, float *loss) {
    trainer *t = ctx;
    if (t->cp_size == 1) return TR_OK;
    return t->model.ops->scale(loss, 1, (float)t->cp_weight);
}

static tr_status pp_eval_load(void *ctx, int mb, const int32_t **ids, const int32_t **targets) {
    trainer *t = ctx;
    int64_t global_mb = t->eval_first + (int64_t)mb * t->eval_stride + t->eval_offset;
    TR_TRY(tr_trainer_load_microbatch(t, t->eval_split, global_mb * t->mbs, NULL));
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
    tr_pp_exec_hooks h = {.ctx = t, .load = pp_eval_load, .eval_loss = weigh_loss};
    TR_TRY(tr_pp_exec_forward_only(&t->pp, &h, nmb, sum));
    return tr_device_all_reduce_host(t->dev, t->o->comm, TR_GROUP_PP, sum, 1, TR_COMM_F64,
                                     TR_COMM_SUM);
}

/* Mean loss over the first eval_iters batches of `split` (the same batches every time, so
 * successive evaluations are comparable); validation.full_validation reads the whole split. */
tr_status tr_trainer_evaluate(trainer *t, int split, int64_t eval_iters, double *loss) {
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
    int64_t dp = t->data_dp_size;
    int64_t shards = t->distributed && dp > 1 && nmb % dp == 0 ? dp : 1;
    t->eval_stride = shards;
    t->eval_offset = shards > 1 ? t->data_dp_rank : 0;
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
            s = tr_trainer_load_microbatch(t, split, global_mb * t->mbs, NULL);
            if (s == TR_OK) s = tr_loss_buffer_slot(&t->losses, &l);
            if (s == TR_OK) s = tr_model_forward_part(m, 0, 0, t->ids, t->tgt, NULL, NULL, l);
            if (s == TR_OK) s = weigh_loss(t, l);
            if (s == TR_OK) tr_loss_buffer_commit(&t->losses, 0);
        }
    if (s == TR_OK && !t->have_pp) {
        s = tr_loss_buffer_flush(&t->losses);
        sum = t->losses.sum;
    }
    /* Context parallelism: each CP rank has its share of every microbatch's mean (weigh_loss),
     * which the sum over the DP x CP group adds up. */
    bool meet = shards > 1 || t->cp_size > 1;
    if (s == TR_OK && meet) s = tr_train_dp_sum(&t->dp, &sum, 1);
    /* Every DP replica's copy was summed too when the batch was evaluated whole by each. */
    double copies = meet && shards == 1 ? (double)dp : 1.0;
    m->training = 1;
    *loss = sum / ((double)(eval_iters * nmb) * copies);
    return s;
}

tr_status tr_trainer_test_eval(trainer *t, int64_t iteration) {
    int64_t iters = t->c->validation.eval_iters;
    if (t->data.n_samples[TR_SPLIT_TEST] <= 0 || iters <= 0) {
        tr_diag_add(t->d, TR_SEV_WARNING, "train.no_test_data", NULL, "dataset.split",
                    "give the test split a share, e.g. dataset.split=90,5,5",
                    "validation.test_mode is set but the test split is empty");
        return TR_OK;
    }
    double loss;
    TR_TRY(tr_trainer_evaluate(t, TR_SPLIT_TEST, iters, &loss));
    tr_train_log_eval(&t->log, "test", iteration, loss);
    return TR_OK;
}
