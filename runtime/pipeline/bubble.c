/* Pipeline bubble: the paper's expected fraction (megatron-core.md §3.6) and the one the
 * simulated action lists actually produce with unit costs (forward 1, backward 2). */
#include "runtime/pipeline/pipeline.h"

double tr_pp_bubble_expected(int pp, int vpp, int m) {
    if (pp < 1 || vpp < 1 || m < 1) return 0.0;
    return (double)(pp - 1) / ((double)vpp * (double)m);
}

/* Bubble = idle time over compute time, the paper's definition, per rank; the iteration's
 * bubble is that of the rank with the least idle time relative to its work (all ranks do the
 * same work, so this is the makespan's). */
void tr_pp_bubble_from_sim(const tr_pp_sim *s, int pp, int vpp, int m, tr_pp_bubble *out) {
    out->expected = tr_pp_bubble_expected(pp, vpp, m);
    out->per_rank_max = 0.0;
    out->per_rank_min = -1.0;
    double busiest = 0.0;
    for (int r = 0; r < pp; r++) {
        if (s->busy[r] <= 0) continue;
        double f = (s->makespan - s->busy[r]) / s->busy[r];
        if (f > out->per_rank_max) out->per_rank_max = f;
        if (out->per_rank_min < 0 || f < out->per_rank_min) out->per_rank_min = f;
        if (s->busy[r] > busiest) busiest = s->busy[r];
    }
    if (out->per_rank_min < 0) out->per_rank_min = 0.0;
    out->simulated = busiest > 0 ? (s->makespan - busiest) / busiest : 0.0;
}
