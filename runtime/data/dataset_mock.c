/* See runtime/data/dataset_mock.h. */
#include "runtime/data/dataset_mock.h"

#include <stdlib.h>

#include "kernels/common/philox.h"

enum { MOCK_DOCS = 100000, MOCK_MAX_LEN = 4096 };

typedef struct mock {
    int vocab;
    int64_t *start; /* token offset of each document, MOCK_DOCS + 1 entries */
    int64_t first_doc[4];
} mock;

static int32_t token_at(const mock *m, int32_t eod, int64_t p) {
    int64_t lo = 0, hi = MOCK_DOCS; /* find the document j with start[j] <= p < start[j+1] */
    while (hi - lo > 1) {
        int64_t mid = (lo + hi) / 2;
        if (m->start[mid] <= p)
            lo = mid;
        else
            hi = mid;
    }
    int64_t k = p - m->start[lo], len = m->start[lo + 1] - m->start[lo];
    return k == len - 1 ? eod : (int32_t)((k + 1) % m->vocab);
}

static tr_status mock_sample(const tr_token_dataset *ds, int split, int64_t index, int32_t *out) {
    const mock *m = ds->impl;
    int64_t n = ds->n_samples[split];
    if (split < 0 || split > 2 || n <= 0 || index < 0) return TR_ERR_INVALID;
    int64_t j = split == TR_SPLIT_TRAIN ? tr_train_data_shuffle(index, n, ds->seed) : index % n;
    int64_t base = m->start[m->first_doc[split]] + j * ds->seq;
    for (int t = 0; t <= ds->seq; t++) out[t] = token_at(m, ds->eod, base + t);
    return TR_OK;
}

static void mock_destroy(tr_token_dataset *ds) {
    mock *m = ds->impl;
    if (m) free(m->start);
    free(m);
    ds->impl = NULL;
}

tr_status tr_dataset_mock_open(tr_token_dataset *ds, int seq, int vocab, int32_t eod, uint64_t seed,
                               const double split[3]) {
    *ds = (tr_token_dataset){
        .seq = seq, .eod = eod, .seed = seed, .sample = mock_sample, .destroy = mock_destroy};
    if (seq < 1 || vocab < 2 || eod < 0 || eod >= vocab) return TR_ERR_INVALID;
    mock *m = calloc(1, sizeof *m);
    if (!m) return TR_ERR_NOMEM;
    ds->impl = m;
    m->vocab = vocab;
    m->start = malloc((MOCK_DOCS + 1) * sizeof *m->start);
    if (!m->start) {
        mock_destroy(ds);
        return TR_ERR_NOMEM;
    }
    m->start[0] = 0;
    for (int64_t j = 0; j < MOCK_DOCS; j++) {
        uint32_t r = tr_philox4x32_10((uint64_t)j, seed ^ 0x6d6f636bull).v[0];
        m->start[j + 1] = m->start[j] + 1 + (int64_t)(r % (MOCK_MAX_LEN - 1));
    }
    double acc = 0.0;
    m->first_doc[0] = 0;
    for (int s = 0; s < 3; s++) {
        acc += split[s];
        m->first_doc[s + 1] = s == 2 ? MOCK_DOCS : (int64_t)(acc * MOCK_DOCS + 0.5);
        int64_t tokens = m->start[m->first_doc[s + 1]] - m->start[m->first_doc[s]];
        ds->n_samples[s] = tokens > seq ? (tokens - 1) / seq : 0;
    }
    return TR_OK;
}
