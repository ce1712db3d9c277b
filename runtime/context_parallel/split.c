/* The load-balanced split of a sequence over the CP ranks (runtime/context_parallel/cp.h). */
#include "runtime/context_parallel/cp.h"

int64_t tr_cp_global_pos(int size, int rank, int seq_local, int t) {
    int c = seq_local / 2;
    int chunk = t < c ? rank : 2 * size - 1 - rank;
    return (int64_t)chunk * c + (t < c ? t : t - c);
}

void tr_cp_take(int size, int rank, const int32_t *full, int seq_full, int32_t *local) {
    int n = seq_full / size;
    for (int t = 0; t < n; t++) local[t] = full[tr_cp_global_pos(size, rank, n, t)];
}
