/* A growable list of token ids (runtime/data/tokenizer/tokenizer.h). */
#include <stdlib.h>
#include <string.h>

#include "runtime/data/tokenizer/tokenizer.h"

tr_status tr_token_ids_push(tr_token_ids *v, int64_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        int64_t *ids = realloc(v->ids, cap * sizeof *ids);
        if (!ids) return TR_ERR_NOMEM;
        v->ids = ids;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return TR_OK;
}

void tr_token_ids_free(tr_token_ids *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}
