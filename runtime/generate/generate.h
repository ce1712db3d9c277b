/* Text generation from a trained (or imported) model: a per-layer KV cache so that each new
 * token costs one token's forward, not the whole prefix's, and the sampling rules (greedy,
 * top-k, top-p with a temperature). The maths is the model's (runtime/model/forward.c) for one
 * sequence on the host: the same norms, grouped QKV split, q/k norms, RoPE or learned positions,
 * SwiGLU or GeLU MLP, final norm and head, with the attention over the cached keys. */
#ifndef TR_GENERATE_GENERATE_H
#define TR_GENERATE_GENERATE_H

#include <stdint.h>

#include "core/status.h"
#include "runtime/model/model.h"

typedef struct tr_gen {
    const tr_model *m;
    int max_len, len; /* positions the cache holds, and holds now */
    float *k, *v;     /* [layers][max_len][groups * head_dim], keys after RoPE / q-k norm */
    float *cos_t, *sin_t;
    float *x, *h, *qkv, *q, *att, *mlp, *act, *mean, *rstd, *scores;
    float *logits; /* [vocab_real]: the last token's */
    int chunk;     /* tokens one step may take (the scratch rows) */
} tr_gen;

/* A cache for max_len positions of a whole model on one rank, in host memory, without
 * adapters (merge them first); TR_ERR_INVALID otherwise, or when max_len exceeds a learned
 * position table. */
tr_status tr_gen_init(tr_gen *g, const tr_model *m, int max_len);
void tr_gen_free(tr_gen *g);
/* Runs ids[0..n) at the next positions (a prompt, or one sampled token) through the model,
 * appending their keys and values, and leaves the last one's logits in g->logits. */
tr_status tr_gen_step(tr_gen *g, const int32_t *ids, int n);

typedef struct tr_sample_params {
    float temperature; /* 0: greedy (argmax; the lowest id among equal maxima) */
    int top_k;         /* 0: all */
    float top_p;       /* 1: all; else the smallest set of most likely ids whose mass >= top_p */
    uint64_t seed;
} tr_sample_params;

/* The next id from logits[0..vocab) under p; *rng is the stream's state (start it at p->seed). */
int tr_gen_sample(const float *logits, int vocab, const tr_sample_params *p, uint64_t *rng);

#endif
