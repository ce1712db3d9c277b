/* Per-rank schedule printing for `run_recipe --dry-run --print-schedule`. */
#include <stdlib.h>

#include "runtime/pipeline/pipeline.h"

static const char *kind_name(tr_pp_kind k) {
    return k == TR_PP_NO_PIPELINE ? "no pipeline (gradient accumulation)"
           : k == TR_PP_1F1B      ? "1F1B"
                                  : "interleaved 1F1B";
}

void tr_pp_schedule_print_one(FILE *out, const tr_pp_schedule *s, bool compact) {
    if (compact) {
        fprintf(out, "rank%d:", s->pp_rank);
        for (int i = 0; i < s->n; i++) {
            const tr_pp_action *a = &s->actions[i];
            if (a->op != TR_PP_FWD && a->op != TR_PP_BWD) continue;
            if (s->vpp > 1)
                fprintf(out, " %c%dc%d", a->op == TR_PP_FWD ? 'F' : 'B', a->mb, a->chunk);
            else
                fprintf(out, " %c%d", a->op == TR_PP_FWD ? 'F' : 'B', a->mb);
        }
        fputc('\n', out);
        return;
    }
    fprintf(out, "pp rank %d: %d actions\n", s->pp_rank, s->n);
    for (int i = 0; i < s->n; i++) {
        const tr_pp_action *a = &s->actions[i];
        fprintf(out, "  %4d  %-20s", i, tr_pp_op_name(a->op));
        switch (a->op) {
        case TR_PP_FWD:
        case TR_PP_BWD:
            fprintf(out, " mb %d chunk %d", a->mb, a->chunk);
            break;
        case TR_PP_WAIT:
            fprintf(out, " group %d", a->group);
            break;
        case TR_PP_EMBED_GRAD_ALLREDUCE:
            fprintf(out, " with pp rank %d", a->peer);
            break;
        case TR_PP_DP_GRAD_REDUCE:
            break;
        default:
            fprintf(out, " %s pp rank %d  mb %d chunk %d  %lld bytes  group %d",
                    a->op == TR_PP_SEND_ACT || a->op == TR_PP_SEND_GRAD ? "to" : "from", a->peer,
                    a->mb, a->chunk, (long long)a->bytes, a->group);
        }
        fputc('\n', out);
    }
}

tr_status tr_pp_schedule_print(FILE *out, const tr_config *c, int pp_rank, bool compact,
                               tr_diags *d) {
    tr_pp_plan p;
    TR_TRY(tr_pp_plan_from_config(c, &p, d));
    tr_pp_schedule *ranks = calloc((size_t)p.pp, sizeof *ranks);
    if (!ranks) return TR_ERR_NOMEM;
    tr_status st = TR_OK;
    for (int r = 0; r < p.pp && st == TR_OK; r++) st = tr_pp_schedule_build_plan(&p, r, &ranks[r]);
    tr_pp_sim sim = {0};
    if (st == TR_OK) st = tr_pp_check(ranks, p.pp, &sim, d);
    if (st == TR_OK) {
        tr_pp_bubble b;
        tr_pp_bubble_from_sim(&sim, p.pp, p.vpp, p.num_microbatches, &b);
        fprintf(out,
                "pipeline schedule: %s, PP=%d VPP=%d microbatches=%d group=%d, p2p %s%s, "
                "%lld bytes per message\n",
                kind_name(ranks[0].kind), p.pp, p.vpp, p.num_microbatches, p.group_size,
                p.batched ? "batched" : "one call per transfer",
                p.overlapped ? ", overlapped with compute" : "", (long long)p.message_bytes);
        fprintf(out,
                "static check: passed (sends and receives pair up, no deadlock)\n"
                "bubble: expected (p-1)/(v*m) = %.4f, simulated (F=1, B=2) = %.4f "
                "(per rank %.4f..%.4f)\n",
                b.expected, b.simulated, b.per_rank_min, b.per_rank_max);
        for (int r = 0; r < p.pp; r++)
            if (pp_rank < 0 || r == pp_rank) tr_pp_schedule_print_one(out, &ranks[r], compact);
        tr_pp_sim_free(&sim);
    }
    for (int r = 0; r < p.pp; r++) tr_pp_schedule_free(&ranks[r]);
    free(ranks);
    return st;
}
