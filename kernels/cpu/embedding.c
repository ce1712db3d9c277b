/* Token and learned positional embeddings, vocab-parallel aware. */
#include <string.h>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/threadpool.h"

typedef struct emb_ctx {
    float *out;
    const float *in;
    const int32_t *ids;
    int n, dim, start, end, batch, seq, pos;
} emb_ctx;

static void emb_fwd_rows(void *vc, int64_t r0, int64_t r1) {
    emb_ctx *c = vc;
    for (int64_t r = r0; r < r1; r++) {
        float *o = c->out + r * c->dim;
        int32_t id = c->ids[r];
        if (id >= c->start && id < c->end)
            memcpy(o, c->in + (int64_t)(id - c->start) * c->dim, (size_t)c->dim * sizeof *o);
        else
            memset(o, 0, (size_t)c->dim * sizeof *o);
    }
}

tr_status tr_cpu_embedding_fwd(float *out, const int32_t *ids, const float *table, int n, int dim,
                               int vocab_start, int vocab_end) {
    if (n < 0 || dim < 0 || vocab_end < vocab_start) return TR_ERR_INVALID;
    if (n && dim && (!out || !ids || (vocab_end > vocab_start && !table))) return TR_ERR_INVALID;
    if (!n || !dim) return TR_OK; /* empty rows: ids (maybe NULL) are never needed */
    emb_ctx c = {.out = out,
                 .in = table,
                 .ids = ids,
                 .n = n,
                 .dim = dim,
                 .start = vocab_start,
                 .end = vocab_end};
    tr_cpu_parallel_for(n, 64, emb_fwd_rows, &c);
    return TR_OK;
}

/* Repeated ids make a row-parallel scatter race, so tasks own column stripes instead: every
 * token is visited by every task, each touching only its own columns. Deterministic. */
static void emb_bwd_cols(void *vc, int64_t j0, int64_t j1) {
    emb_ctx *c = vc;
    for (int r = 0; r < c->n; r++) {
        int32_t id = c->ids[r];
        if (id < c->start || id >= c->end) continue;
        float *d = c->out + (int64_t)(id - c->start) * c->dim;
        const float *g = c->in + (int64_t)r * c->dim;
        for (int64_t j = j0; j < j1; j++) d[j] += g[j];
    }
}

tr_status tr_cpu_embedding_bwd(float *dtable, const int32_t *ids, const float *dout, int n, int dim,
                               int vocab_start, int vocab_end) {
    if (n < 0 || dim < 0 || vocab_end < vocab_start) return TR_ERR_INVALID;
    if (n && dim && (!dout || !ids || (vocab_end > vocab_start && !dtable))) return TR_ERR_INVALID;
    emb_ctx c = {.out = dtable,
                 .in = dout,
                 .ids = ids,
                 .n = n,
                 .dim = dim,
                 .start = vocab_start,
                 .end = vocab_end};
    tr_cpu_parallel_for(dim, 64, emb_bwd_cols, &c);
    return TR_OK;
}

static void pos_fwd_rows(void *vc, int64_t r0, int64_t r1) {
    emb_ctx *c = vc;
    for (int64_t r = r0; r < r1; r++) {
        int t = (int)(r % c->seq);
        float *x = c->out + r * c->dim;
        const float *w = c->in + (int64_t)(c->pos + t) * c->dim;
        for (int j = 0; j < c->dim; j++) x[j] += w[j];
    }
}

tr_status tr_cpu_pos_embedding_fwd(float *x, const float *wpe, int batch, int seq, int dim,
                                   int pos_offset) {
    if (batch < 0 || seq < 0 || dim < 0 || pos_offset < 0) return TR_ERR_INVALID;
    if (batch && seq && dim && (!x || !wpe)) return TR_ERR_INVALID;
    emb_ctx c = {.out = x, .in = wpe, .dim = dim, .batch = batch, .seq = seq, .pos = pos_offset};
    tr_cpu_parallel_for((int64_t)batch * seq, 16, pos_fwd_rows, &c);
    return TR_OK;
}

static void pos_bwd_rows(void *vc, int64_t t0, int64_t t1) {
    emb_ctx *c = vc;
    for (int64_t t = t0; t < t1; t++) {
        float *d = c->out + (c->pos + t) * c->dim;
        for (int b = 0; b < c->batch; b++) {
            const float *g = c->in + ((int64_t)b * c->seq + t) * c->dim;
            for (int j = 0; j < c->dim; j++) d[j] += g[j];
        }
    }
}

tr_status tr_cpu_pos_embedding_bwd(float *dwpe, const float *dx, int batch, int seq, int dim,
                                   int pos_offset) {
    if (batch < 0 || seq < 0 || dim < 0 || pos_offset < 0) return TR_ERR_INVALID;
    if (batch && seq && dim && (!dx || !dwpe)) return TR_ERR_INVALID;
    emb_ctx c = {.out = dwpe, .in = dx, .dim = dim, .batch = batch, .seq = seq, .pos = pos_offset};
    tr_cpu_parallel_for(seq, 4, pos_bwd_rows, &c);
    return TR_OK;
}
