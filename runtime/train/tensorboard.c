/* See runtime/train/tensorboard.h. The Event and Summary field numbers are TensorFlow's
 * (event.proto: wall_time 1 double, step 2 int64, file_version 3 string, summary 5; summary.proto:
 * value 1, Value.tag 1 string, Value.simple_value 2 float). */
#include "runtime/train/tensorboard.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

/* Bitwise (no table: no state to build); event records are a few hundred bytes. */
static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
}

uint32_t tr_tb_masked_crc32c(const void *data, size_t n) {
    uint32_t c = crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

/* A protobuf message under construction; events are small, so a fixed buffer suffices. */
typedef struct pb {
    uint8_t b[512];
    size_t n;
    bool overflow;
} pb;

static void put(pb *m, const void *p, size_t n) {
    if (m->n + n > sizeof m->b) {
        m->overflow = true;
        return;
    }
    memcpy(m->b + m->n, p, n);
    m->n += n;
}

static void varint(pb *m, uint64_t v) {
    uint8_t t[10];
    size_t k = 0;
    do {
        t[k] = (uint8_t)(v & 0x7F);
        v >>= 7;
        if (v) t[k] |= 0x80;
        k++;
    } while (v);
    put(m, t, k);
}

static void le(pb *m, uint64_t v, int bytes) {
    uint8_t t[8];
    for (int i = 0; i < bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(m, t, (size_t)bytes);
}

static void field_bytes(pb *m, int field, const void *p, size_t n) {
    varint(m, (uint64_t)field << 3 | 2);
    varint(m, n);
    put(m, p, n);
}

static void field_double(pb *m, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    varint(m, (uint64_t)field << 3 | 1);
    le(m, u, 8);
}

static void field_float(pb *m, int field, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    varint(m, (uint64_t)field << 3 | 5);
    le(m, u, 4);
}

static double wall_time(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

static void write_record(tr_tb *tb, const pb *event) {
    if (!tb->f || event->overflow) return;
    pb head = {0};
    le(&head, event->n, 8);
    uint32_t len_crc = tr_tb_masked_crc32c(head.b, 8);
    le(&head, len_crc, 4);
    uint32_t data_crc = tr_tb_masked_crc32c(event->b, event->n);
    fwrite(head.b, 1, head.n, tb->f);
    fwrite(event->b, 1, event->n, tb->f);
    uint8_t t[4];
    for (int i = 0; i < 4; i++) t[i] = (uint8_t)(data_crc >> (8 * i));
    fwrite(t, 1, 4, tb->f);
    /* TensorBoard reads a growing file; a record cut by a crash is what it skips. */
    fflush(tb->f);
}

void tr_tb_scalar(tr_tb *tb, const char *tag, int64_t step, double value) {
    if (!tb->f || !isfinite(value)) return;
    pb val = {0}, summary = {0}, event = {0};
    field_bytes(&val, 1, tag, strlen(tag));
    field_float(&val, 2, (float)value);
    field_bytes(&summary, 1, val.b, val.n);
    field_double(&event, 1, wall_time());
    varint(&event, 2 << 3 | 0);
    varint(&event, (uint64_t)step);
    field_bytes(&event, 5, summary.b, summary.n);
    if (!val.overflow && !summary.overflow) write_record(tb, &event);
}

static tr_status mkdirs(const char *dir, tr_diags *d) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return tr_diag_add(d, TR_SEV_ERROR, "train.tensorboard_dir", NULL, "logger.tensorboard_dir",
                           "choose a shorter path", "logger.tensorboard_dir is too long");
    for (char *p = path + 1;; p++) {
        bool end = *p == '\0';
        if (*p == '/' || end) {
            *p = '\0';
            if (mkdir(path, 0755) != 0 && errno != EEXIST)
                return tr_diag_add(d, TR_SEV_ERROR, "train.tensorboard_dir", NULL,
                                   "logger.tensorboard_dir",
                                   "choose a writable directory with logger.tensorboard_dir=DIR",
                                   "cannot create %s: %s", path, strerror(errno));
            if (end) break;
            *p = '/';
        }
    }
    return TR_OK;
}

tr_status tr_tb_open(tr_tb *tb, const char *dir, const tr_config *c, tr_diags *d) {
    memset(tb, 0, sizeof *tb);
    if (!dir) return TR_OK;
    TR_TRY(mkdirs(dir, d));
    char host[256] = "localhost", path[4400];
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    snprintf(path, sizeof path, "%s/events.out.tfevents.%lld.%s", dir, (long long)wall_time(),
             host);
    tb->f = fopen(path, "wb");
    if (!tb->f)
        return tr_diag_add(d, TR_SEV_ERROR, "train.tensorboard_dir", NULL, "logger.tensorboard_dir",
                           "choose a writable directory with logger.tensorboard_dir=DIR",
                           "cannot write %s: %s", path, strerror(errno));
    const tr_logger_config *l = &c->logger;
    tb->interval = l->tensorboard_log_interval;
    tb->world_size = c->derived.world_size;
    tb->loss_scale = l->log_loss_scale_to_tensorboard;
    tb->validation_ppl = l->log_validation_ppl_to_tensorboard;
    tb->memory = l->log_memory_to_tensorboard;
    tb->world = l->log_world_size_to_tensorboard;
    tb->throughput = l->log_throughput_to_tensorboard;
    tb->timers = l->log_timers_to_tensorboard;
    pb event = {0};
    static const char version[] = "brain.Event:2";
    field_double(&event, 1, wall_time());
    field_bytes(&event, 3, version, sizeof version - 1);
    write_record(tb, &event);
    return TR_OK;
}

void tr_tb_close(tr_tb *tb) {
    if (tb->f) fclose(tb->f);
    tb->f = NULL;
}

/* This process's resident and peak memory in bytes: what the host device allocates. */
static void memory(double *rss, double *peak) {
    *rss = *peak = NAN;
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) == 2)
            *rss = (double)resident * (double)sysconf(_SC_PAGESIZE);
        fclose(f);
    }
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) *peak = 1024.0 * (double)ru.ru_maxrss;
}

void tr_tb_log_iteration(tr_tb *tb, int64_t it, const tr_tb_iteration *v) {
    if (!tb->f || tb->interval < 1 || it % tb->interval != 0) return;
    tr_tb_scalar(tb, "lm loss", it, v->loss);
    tr_tb_scalar(tb, "learning-rate", it, v->lr);
    tr_tb_scalar(tb, "grad-norm", it, v->grad_norm);
    tr_tb_scalar(tb, "params-norm", it, v->params_norm);
    if (tb->loss_scale) tr_tb_scalar(tb, "loss-scale", it, v->loss_scale);
    if (tb->world) tr_tb_scalar(tb, "world-size", it, (double)tb->world_size);
    if (tb->timers) tr_tb_scalar(tb, "iteration-time", it, 1e3 * v->seconds);
    if (tb->throughput && v->seconds > 0) {
        tr_tb_scalar(tb, "throughput", it, v->flops / v->seconds / 1e12);
        tr_tb_scalar(tb, "tokens-per-second", it, v->tokens / v->seconds);
    }
    /* MoE balance, under Megatron's tags (its MoE metrics tracker) */
    if (isfinite(v->moe_lb)) tr_tb_scalar(tb, "load_balancing_loss", it, v->moe_lb);
    if (isfinite(v->moe_z)) tr_tb_scalar(tb, "z_loss", it, v->moe_z);
    if (tb->memory) {
        double rss, peak;
        memory(&rss, &peak);
        tr_tb_scalar(tb, "mem-rss-bytes", it, rss);
        tr_tb_scalar(tb, "mem-max-rss-bytes", it, peak);
    }
}

void tr_tb_log_eval(tr_tb *tb, const char *split, int64_t it, double loss) {
    if (!tb->f) return;
    bool test = split[0] == 't';
    tr_tb_scalar(tb, test ? "lm loss test" : "lm loss validation", it, loss);
    if (tb->validation_ppl)
        tr_tb_scalar(tb, test ? "lm loss test ppl" : "lm loss validation ppl", it,
                     exp(fmin(loss, 20.0)));
}
