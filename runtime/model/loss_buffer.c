/* See runtime/model/loss_buffer.h. */
#include "runtime/model/loss_buffer.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/device/device.h"

tr_status tr_loss_buffer_create(tr_loss_buffer *b, tr_device *dev, int cap) {
    memset(b, 0, sizeof *b);
    if (cap < 1) return TR_ERR_INVALID;
    b->dev = dev ? dev : tr_device_host();
    b->cap = cap;
    b->host = calloc((size_t)cap, sizeof *b->host);
    b->tokens = calloc((size_t)cap, sizeof *b->tokens);
    if (!b->host || !b->tokens) {
        tr_loss_buffer_free(b);
        return TR_ERR_NOMEM;
    }
    tr_status st = tr_device_alloc(b->dev, TR_MEM_WORKSPACE, (size_t)cap * sizeof *b->slots,
                                   (void **)&b->slots);
    if (st != TR_OK) tr_loss_buffer_free(b);
    return st;
}

void tr_loss_buffer_free(tr_loss_buffer *b) {
    if (b->slots) tr_device_free(b->dev, TR_MEM_WORKSPACE, b->slots);
    free(b->host);
    free(b->tokens);
    memset(b, 0, sizeof *b);
}

void tr_loss_buffer_begin(tr_loss_buffer *b, bool per_token) {
    b->n = 0;
    b->per_token = per_token;
    b->sum = 0.0;
    b->n_tokens = 0;
}

tr_status tr_loss_buffer_slot(tr_loss_buffer *b, float **slot) {
    *slot = NULL;
    if (!b->slots) return TR_ERR_INVALID;
    if (b->n == b->cap) TR_TRY(tr_loss_buffer_flush(b));
    *slot = b->slots + b->n;
    return TR_OK;
}

void tr_loss_buffer_commit(tr_loss_buffer *b, int64_t tokens) {
    if (b->n < b->cap) b->tokens[b->n++] = tokens;
}

tr_status tr_loss_buffer_flush(tr_loss_buffer *b) {
    if (!b->n) return TR_OK;
    TR_TRY(tr_device_to_host(b->dev, b->host, b->slots, (size_t)b->n * sizeof *b->host));
    for (int i = 0; i < b->n; i++) {
        float loss = b->host[i];
        b->sum += b->per_token ? (double)loss * (double)b->tokens[i] : loss;
        b->n_tokens += b->tokens[i];
    }
    b->n = 0;
    return TR_OK;
}
