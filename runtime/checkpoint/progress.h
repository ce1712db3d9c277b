/* A progress bar for long checkpoint reads and writes: drawn on a terminal, silent otherwise
 * (logs and CI output stay clean). */
#ifndef TR_CKPT_PROGRESS_H
#define TR_CKPT_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct tr_ckpt_progress {
    FILE *out; /* NULL = silent */
    const char *label;
    uint64_t total, done;
    double started, last_drawn;
};

/* Draws on stderr only when it is a terminal; force_to (tests) draws on that stream instead. */
void tr_ckpt_progress_init(struct tr_ckpt_progress *p, const char *label, uint64_t total,
                           FILE *force_to);
void tr_ckpt_progress_add(struct tr_ckpt_progress *p, uint64_t bytes);
void tr_ckpt_progress_finish(struct tr_ckpt_progress *p);

#endif
