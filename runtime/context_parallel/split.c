/* The load-balanced split of a sequence over the CP ranks (runtime/context_parallel/cp.h). */
#include "runtime/context_parallel/cp.h"

int64_t tr_cp_global_pos(int size, int rank, int seq_local, int t) {
    if (size <= 1) return t;
    int c = seq_local / 2;
    int chunk = t < c ? rank : 2 * size - 1 - rank;
    return (int64_t)chunk * c + (t < c ? t : t - c);
}

tr_status tr_cp_index(int size, int rank, const int32_t *doc_start, int seq_full, int32_t *index,
                      int32_t *local_doc_start) {
    int at = 0;
    for (int s = 0; s < seq_full;) {
        int e = s + 1;
        while (doc_start && e < seq_full && doc_start[e] == doc_start[s]) e++;
        if (!doc_start) e = seq_full;
        if ((e - s) % (2 * size)) return TR_ERR_INVALID;
        int p = (e - s) / (2 * size), first = at;
        for (int h = 0; h < 2; h++) {
            int piece = h ? 2 * size - 1 - rank : rank;
            for (int i = 0; i < p; i++, at++) {
                index[at] = s + piece * p + i;
                if (local_doc_start) local_doc_start[at] = first;
            }
        }
        s = e;
    }
    return TR_OK;
}

int tr_cp_run(int size, int seq_local, int t, int end) {
    int c = seq_local / 2;
    return size > 1 && t < c && end > c ? c - t : end - t;
}

void tr_cp_take(int size, int rank, const int32_t *full, int seq_full, int32_t *local) {
    int n = seq_full / size;
    for (int t = 0; t < n; t++) local[t] = full[tr_cp_global_pos(size, rank, n, t)];
}
