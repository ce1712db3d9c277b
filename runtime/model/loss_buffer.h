/* The microbatch losses of a step, kept where the device writes them and read to the host in
 * one copy when the loop needs them (the step's end, or when the buffer is full), so a device
 * forward never waits for its own loss. The host sums what it reads in microbatch order, with
 * the expression the loop always used, so the sums are bitwise those of one read per
 * microbatch. */
#ifndef TR_RUNTIME_LOSS_BUFFER_H
#define TR_RUNTIME_LOSS_BUFFER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"

struct tr_device;

typedef struct tr_loss_buffer {
    struct tr_device *dev;
    float *slots;    /* [cap] in the device's memory: the forwards' losses not yet read */
    float *host;     /* [cap] the read copy */
    int64_t *tokens; /* [cap] the trained tokens of each pending loss (known on the host) */
    int cap, n;
    bool per_token; /* sum adds loss * tokens (model.calculate_per_token_loss), else the loss */
    double sum;     /* over the losses read so far since tr_loss_buffer_begin */
    int64_t n_tokens;
} tr_loss_buffer;

/* cap >= 1 losses on dev (NULL: the host). */
tr_status tr_loss_buffer_create(tr_loss_buffer *b, struct tr_device *dev, int cap);
void tr_loss_buffer_free(tr_loss_buffer *b);

/* Starts a new sum (nothing may be pending). */
void tr_loss_buffer_begin(tr_loss_buffer *b, bool per_token);
/* Where the next forward writes its loss (device memory); reads the pending losses first when
 * the buffer is full. */
tr_status tr_loss_buffer_slot(tr_loss_buffer *b, float **slot);
/* The forward into the last slot has been queued; `tokens` of its rows train. */
void tr_loss_buffer_commit(tr_loss_buffer *b, int64_t tokens);
/* Reads the pending losses (one copy) and adds them to sum and n_tokens in order. */
tr_status tr_loss_buffer_flush(tr_loss_buffer *b);

#endif
