#include "runtime/checkpoint/progress.h"

#include <time.h>
#include <unistd.h>

#include "runtime/checkpoint/ckpt.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void tr_ckpt_progress_init(struct tr_ckpt_progress *p, const char *label, uint64_t total,
                           FILE *force_to) {
    p->out = force_to ? force_to : (isatty(STDERR_FILENO) ? stderr : NULL);
    p->label = label;
    p->total = total;
    p->done = 0;
    p->started = now_s();
    p->last_drawn = 0;
}

static void draw(struct tr_ckpt_progress *p, double t) {
    enum { WIDTH = 30 };
    double frac = p->total ? (double)p->done / (double)p->total : 1.0;
    if (frac > 1.0) frac = 1.0;
    int filled = (int)(frac * WIDTH);
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
    bar[WIDTH] = '\0';
    double el = t - p->started;
    double mbs = el > 0 ? (double)p->done / 1e6 / el : 0;
    fprintf(p->out, "\r%s [%s] %3d%% %.1f/%.1f MB %.0f MB/s", p->label, bar, (int)(frac * 100),
            (double)p->done / 1e6, (double)p->total / 1e6, mbs);
    fflush(p->out);
    p->last_drawn = t;
}

void tr_ckpt_progress_add(struct tr_ckpt_progress *p, uint64_t bytes) {
    p->done += bytes;
    if (!p->out) return;
    double t = now_s();
    if (t - p->last_drawn >= 0.1) draw(p, t);
}

void tr_ckpt_progress_finish(struct tr_ckpt_progress *p) {
    if (!p->out) return;
    draw(p, now_s());
    fputc('\n', p->out);
}
