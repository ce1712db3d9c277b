/* See runtime/generate/generate.h: greedy, or a draw from the temperature-scaled softmax over
 * the top-k ids, cut to the top-p mass (the order transformers' samplers apply them in). */
#include <math.h>
#include <stdlib.h>

#include "runtime/generate/generate.h"

/* splitmix64: a small, seedable stream, the same on every platform. */
static double uniform(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

typedef struct cand {
    float logit;
    int id;
} cand;

/* Descending logits, ties by the lower id, so the order is total. */
static int by_logit(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

int tr_gen_sample(const float *logits, int vocab, const tr_sample_params *p, uint64_t *rng) {
    if (p->temperature <= 0.0f) {
        int best = 0;
        for (int i = 1; i < vocab; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    cand *c = malloc((size_t)vocab * sizeof *c);
    if (!c) return -1;
    for (int i = 0; i < vocab; i++) c[i] = (cand){logits[i] / p->temperature, i};
    qsort(c, (size_t)vocab, sizeof *c, by_logit);
    int n = p->top_k > 0 && p->top_k < vocab ? p->top_k : vocab;
    double *w = malloc((size_t)n * sizeof *w), sum = 0.0;
    if (!w) {
        free(c);
        return -1;
    }
    for (int i = 0; i < n; i++) sum += (w[i] = exp((double)c[i].logit - (double)c[0].logit));
    if (p->top_p > 0.0f && p->top_p < 1.0f) {
        /* Keep the most likely ids until their mass reaches top_p (at least one). */
        double mass = 0.0;
        int keep = 0;
        while (keep < n && (keep == 0 || mass < (double)p->top_p * sum)) mass += w[keep++];
        n = keep;
        sum = mass;
    }
    double u = uniform(rng) * sum, acc = 0.0;
    int id = c[n - 1].id;
    for (int i = 0; i < n; i++)
        if ((acc += w[i]) > u) {
            id = c[i].id;
            break;
        }
    free(w);
    free(c);
    return id;
}
