/* A tokenized example and its per-token target flags (runtime/data/sft/sft.h). */
#include <stdlib.h>
#include <string.h>

#include "runtime/data/sft/sft.h"

tr_status tr_sft_example_append(tr_sft_example *e, const tr_token_ids *ids, bool target) {
    if (ids->n == 0) return TR_OK;
    int64_t n = e->n + (int64_t)ids->n;
    int64_t *ni = realloc(e->ids, (size_t)n * sizeof *ni);
    if (!ni) return TR_ERR_NOMEM;
    e->ids = ni;
    uint8_t *nt = realloc(e->target, (size_t)n);
    if (!nt) return TR_ERR_NOMEM;
    e->target = nt;
    for (size_t i = 0; i < ids->n; i++) {
        e->ids[e->n + (int64_t)i] = ids->ids[i];
        e->target[e->n + (int64_t)i] = target;
    }
    e->n = n;
    return TR_OK;
}

void tr_sft_example_free(tr_sft_example *e) {
    free(e->ids);
    free(e->target);
    memset(e, 0, sizeof *e);
}

void tr_sft_examples_free(tr_sft_examples *v) {
    for (int64_t i = 0; i < v->n; i++) tr_sft_example_free(&v->v[i]);
    free(v->v);
    memset(v, 0, sizeof *v);
}
