/* See runtime/train/log.h. */
#include "runtime/train/log.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/train/train.h"

tr_status tr_train_log_open(tr_train_log *l, FILE *out, const char *metrics_path, int64_t interval,
                            tr_diags *d) {
    memset(l, 0, sizeof *l);
    l->out = out;
    l->interval = interval > 0 ? interval : 1;
    l->loss_scale = NAN;
    l->moe_lb_now = l->moe_z_now = NAN;
    if (!metrics_path) return TR_OK;
    l->metrics = fopen(metrics_path, "w");
    if (!l->metrics)
        return tr_diag_add(d, TR_SEV_ERROR, "train.metrics_file", NULL, "logger.metrics_path",
                           "choose a writable path with logger.metrics_path=FILE",
                           "cannot write %s: %s", metrics_path, strerror(errno));
    return TR_OK;
}

void tr_train_log_close(tr_train_log *l) {
    if (l->metrics) fclose(l->metrics);
    l->metrics = NULL;
    free(l->moe_tokens);
    l->moe_tokens = NULL;
    tr_tb_close(&l->tb);
}

tr_status tr_train_log_moe_tokens(tr_train_log *l, const double *tokens, int layers, int experts,
                                  const uint64_t mask[4]) {
    size_t n = (size_t)layers * (size_t)experts;
    double *copy = realloc(l->moe_tokens, (n ? n : 1) * sizeof *copy);
    if (!copy) return TR_ERR_NOMEM;
    memcpy(copy, tokens, n * sizeof *copy);
    l->moe_tokens = copy;
    l->moe_layers = layers;
    l->moe_experts = experts;
    memcpy(l->moe_mask, mask, sizeof l->moe_mask);
    return TR_OK;
}

/* Per MoE layer: the min, mean and max of its tokens per expert, and the counts. */
static void json_moe_tokens(const tr_train_log *l) {
    fprintf(l->metrics, ",\"moe_tokens_per_expert\":[");
    bool first = true;
    for (int i = 0; i < l->moe_layers && i < 256; i++) {
        if (!((l->moe_mask[i / 64] >> (i % 64)) & 1u)) continue;
        const double *v = l->moe_tokens + (size_t)i * l->moe_experts;
        double lo = v[0], hi = v[0], sum = 0.0;
        for (int e = 0; e < l->moe_experts; e++) {
            lo = v[e] < lo ? v[e] : lo;
            hi = v[e] > hi ? v[e] : hi;
            sum += v[e];
        }
        fprintf(l->metrics, "%s{\"layer\":%d,\"min\":%.0f,\"mean\":%.9g,\"max\":%.0f,\"counts\":[",
                first ? "" : ",", i, lo, sum / l->moe_experts, hi);
        for (int e = 0; e < l->moe_experts; e++) fprintf(l->metrics, "%s%.0f", e ? "," : "", v[e]);
        fprintf(l->metrics, "]}");
        first = false;
    }
    fprintf(l->metrics, "]");
}

/* JSON has no NaN or Infinity: such values are written as null. */
static void json_num(FILE *f, const char *key, double v) {
    if (isfinite(v))
        fprintf(f, ",\"%s\":%.9g", key, v);
    else
        fprintf(f, ",\"%s\":null", key);
}

void tr_train_log_moe(tr_train_log *l, double lb, double z) {
    l->moe_lb_now = lb;
    l->moe_z_now = z;
    if (isfinite(lb)) {
        l->moe_lb += lb;
        l->n_lb++;
    }
    if (isfinite(z)) {
        l->moe_z += z;
        l->n_z++;
    }
}

bool tr_train_log_due(const tr_train_log *l, int64_t it, int64_t iters, bool stopping) {
    return it % l->interval == 0 || it == iters || stopping;
}

void tr_train_log_iteration(tr_train_log *l, int64_t it, int64_t iters, bool stopping,
                            int64_t consumed, double loss, double lr, double grad_norm,
                            double params_norm, bool skipped, double seconds, double flops,
                            double tokens) {
    l->n++;
    if (isfinite(loss)) {
        l->loss += loss;
        l->n_loss++;
    }
    l->skipped_total += skipped;
    l->seconds += seconds;
    l->flops += flops;
    l->tokens += tokens;
    tr_tb_iteration tb = {loss,    lr,    grad_norm, params_norm,   l->loss_scale,
                          seconds, flops, tokens,    l->moe_lb_now, l->moe_z_now};
    l->moe_lb_now = l->moe_z_now = NAN;
    tr_tb_log_iteration(&l->tb, it, &tb);
    if (!tr_train_log_due(l, it, iters, stopping)) return;
    double ms = 1e3 * l->seconds / l->n, tps = l->seconds > 0 ? l->tokens / l->seconds : 0.0;
    double tflops = l->seconds > 0 ? l->flops / l->seconds / 1e12 : 0.0;
    double avg = l->n_loss ? l->loss / l->n_loss : NAN;
    if (l->out) {
        fprintf(l->out,
                " iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration "
                "(ms): %.1f | tokens/s: %.0f | throughput per device (TFLOP/s): %.3f | learning "
                "rate: %.6E | lm loss: %.6E |",
                (long long)it, (long long)iters, (long long)consumed, ms, tps, tflops, lr, avg);
        for (int d = 0; d < l->n_mtp; d++)
            fprintf(l->out, " mtp_%d loss: %.6E |", d + 1, l->mtp[d] / l->mtp_iters);
        if (isfinite(l->loss_scale)) fprintf(l->out, " loss scale: %.1f |", l->loss_scale);
        fprintf(l->out, " grad norm: %.3f | number of skipped iterations: %3d |", grad_norm,
                l->skipped_total);
        if (l->n_lb) fprintf(l->out, " load_balancing_loss: %.6E |", l->moe_lb / l->n_lb);
        if (l->n_z) fprintf(l->out, " z_loss: %.6E |", l->moe_z / l->n_z);
        fprintf(l->out, "\n");
        if (isfinite(params_norm)) fprintf(l->out, "   params norm: %.3f\n", params_norm);
        fflush(l->out);
    }
    if (l->metrics) {
        fprintf(l->metrics, "{\"type\":\"train\",\"iteration\":%lld,\"consumed_samples\":%lld",
                (long long)it, (long long)consumed);
        json_num(l->metrics, "loss", avg);
        for (int d = 0; d < l->n_mtp; d++) {
            char key[32];
            snprintf(key, sizeof key, "mtp_%d_loss", d + 1);
            json_num(l->metrics, key, l->mtp[d] / l->mtp_iters);
        }
        json_num(l->metrics, "lr", lr);
        json_num(l->metrics, "grad_norm", grad_norm);
        if (isfinite(l->loss_scale)) json_num(l->metrics, "loss_scale", l->loss_scale);
        if (isfinite(params_norm)) json_num(l->metrics, "params_norm", params_norm);
        if (l->n_lb) json_num(l->metrics, "load_balancing_loss", l->moe_lb / l->n_lb);
        if (l->n_z) json_num(l->metrics, "z_loss", l->moe_z / l->n_z);
        if (l->moe_tokens) json_moe_tokens(l);
        json_num(l->metrics, "ms_per_iter", ms);
        json_num(l->metrics, "tokens_per_s", tps);
        json_num(l->metrics, "tflops_per_device", tflops);
        fprintf(l->metrics, ",\"skipped_iterations\":%d}\n", l->skipped_total);
        fflush(l->metrics);
    }
    free(l->moe_tokens);
    l->moe_tokens = NULL;
    l->n = l->n_loss = l->n_lb = l->n_z = 0;
    l->loss = l->seconds = l->flops = l->tokens = l->moe_lb = l->moe_z = 0.0;
    for (int d = 0; d < l->n_mtp; d++) l->mtp[d] = 0.0;
    l->mtp_iters = 0;
}

void tr_train_log_mtp(tr_train_log *l, const double *losses, int n) {
    l->n_mtp = n < TR_TRAIN_LOG_MTP ? n : TR_TRAIN_LOG_MTP;
    for (int d = 0; d < l->n_mtp; d++) l->mtp[d] += losses[d];
    l->mtp_iters++;
}

void tr_train_log_eval(tr_train_log *l, const char *split, int64_t it, double loss) {
    tr_tb_log_eval(&l->tb, split, it, loss);
    double ppl = exp(fmin(loss, 20.0));
    if (l->out) {
        fprintf(l->out, " %s loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.6E |\n",
                split, (long long)it, loss, ppl);
        fflush(l->out);
    }
    if (l->metrics) {
        fprintf(l->metrics, "{\"type\":\"%s\",\"iteration\":%lld",
                split[0] == 't' ? "test" : "eval", (long long)it);
        json_num(l->metrics, "loss", loss);
        json_num(l->metrics, "ppl", ppl);
        fprintf(l->metrics, "}\n");
        fflush(l->metrics);
    }
}

void tr_train_log_end(tr_train_log *l, int64_t it, int stop, int signal, double seconds) {
    if (!l->out) return;
    if (stop == TR_STOP_SIGNAL)
        fprintf(l->out, "received signal %d (%s): stopped cleanly after iteration %lld\n", signal,
                strsignal(signal), (long long)it);
    else if (stop == TR_STOP_EXIT_INTERVAL)
        fprintf(l->out, "exiting at iteration %lld (train.exit_interval)\n", (long long)it);
    else if (stop == TR_STOP_DURATION)
        fprintf(l->out, "exiting at iteration %lld (train.exit_duration_in_mins)\n", (long long)it);
    fprintf(l->out, "training finished: %lld iterations in %.1f s\n", (long long)it, seconds);
    fflush(l->out);
}
