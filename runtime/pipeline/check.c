/* The static schedule check: run every pp rank's action list together in a simulator with
 * rendezvous transfers (a transfer completes only when both sides have posted it; the k-th send
 * on a (src, dst) channel meets the k-th receive there, as NCCL matches them), so anything that
 * passes cannot hang or cross-wire at run time under either blocking or batched semantics. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pipeline/pipeline.h"

typedef struct rank_state {
    const tr_pp_schedule *s;
    int pc;
    double clock, busy;
    int *group_total, *group_done; /* [n] by group id */
    double *group_time;
    bool *group_waited;
    int *recv_at[2];  /* [m * v]: action index of the activation / gradient receive */
    int *fwd, *bwd;   /* [m * v]: times run */
    int *match;       /* [n]: matched action index on the peer, -1 while pending */
    double *post;     /* [n]: post time */
    int coll_arrived; /* collectives reached */
    double coll_time[4];
} rank_state;

typedef struct channel {
    int *sends, *recvs; /* action indices in post order */
    int ns, nr, matched, cap;
} channel;

typedef struct sim {
    int pp, v, m;
    rank_state *r;
    channel *ch; /* [src * pp + dst] */
    tr_diags *d;
    bool failed;
} sim;

static bool is_transfer(tr_pp_op op) {
    return op >= TR_PP_SEND_ACT && op <= TR_PP_RECV_GRAD;
}
static bool is_send(tr_pp_op op) {
    return op == TR_PP_SEND_ACT || op == TR_PP_SEND_GRAD;
}
static bool is_act(tr_pp_op op) {
    return op == TR_PP_SEND_ACT || op == TR_PP_RECV_ACT;
}

/* The boundary between virtual stages b and b+1 that a transfer crosses. */
static int boundary(const sim *S, int rank, const tr_pp_action *a) {
    int stage = a->chunk * S->pp + rank;
    return a->op == TR_PP_SEND_ACT || a->op == TR_PP_RECV_GRAD ? stage : stage - 1;
}

static void describe(char *buf, size_t cap, const tr_pp_action *a) {
    if (is_transfer(a->op))
        snprintf(buf, cap, "%s peer %d tag (mb %d, chunk %d) %lld bytes", tr_pp_op_name(a->op),
                 a->peer, a->mb, a->chunk, (long long)a->bytes);
    else if (a->op == TR_PP_WAIT)
        snprintf(buf, cap, "WAIT group %d", a->group);
    else if (a->op == TR_PP_FWD || a->op == TR_PP_BWD)
        snprintf(buf, cap, "%s (mb %d, chunk %d)", tr_pp_op_name(a->op), a->mb, a->chunk);
    else
        snprintf(buf, cap, "%s peer %d", tr_pp_op_name(a->op), a->peer);
}

static void fail(sim *S, const char *id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(sim *S, const char *id, const char *fmt, ...) {
    if (S->failed) return;
    S->failed = true;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tr_diag_add(S->d, TR_SEV_ERROR, id, NULL,
                "model.pipeline_model_parallel_size,model.virtual_pipeline_model_parallel_size,"
                "derived.num_microbatches",
                "this is a schedule bug, not a config error: report it with the printed schedule "
                "(run_recipe --dry-run --print-schedule)",
                "%s", msg);
}

static bool push_index(channel *c, bool send, int idx) {
    if (c->ns == c->cap || c->nr == c->cap) {
        int cap = c->cap ? 2 * c->cap : 32;
        int *s = realloc(c->sends, (size_t)cap * sizeof *s);
        if (!s) return false;
        c->sends = s;
        int *r = realloc(c->recvs, (size_t)cap * sizeof *r);
        if (!r) return false;
        c->recvs = r;
        c->cap = cap;
    }
    if (send)
        c->sends[c->ns++] = idx;
    else
        c->recvs[c->nr++] = idx;
    return true;
}

static void complete(sim *S, int rank, int idx, double t) {
    rank_state *R = &S->r[rank];
    int g = R->s->actions[idx].group;
    R->group_done[g]++;
    if (t > R->group_time[g]) R->group_time[g] = t;
}

static void match_channel(sim *S, int src, int dst) {
    channel *c = &S->ch[src * S->pp + dst];
    while (!S->failed && c->matched < c->ns && c->matched < c->nr) {
        int si = c->sends[c->matched], ri = c->recvs[c->matched];
        const tr_pp_action *a = &S->r[src].s->actions[si], *b = &S->r[dst].s->actions[ri];
        bool same = is_act(a->op) == is_act(b->op) && a->mb == b->mb &&
                    boundary(S, src, a) == boundary(S, dst, b) && a->bytes == b->bytes;
        if (!same) {
            char da[160], db[160];
            describe(da, sizeof da, a);
            describe(db, sizeof db, b);
            fail(S, "pipeline.schedule_mismatch",
                 "transfer %d from pp rank %d to %d does not match: rank %d action %d is %s, "
                 "rank %d action %d is %s",
                 c->matched, src, dst, src, si, da, dst, ri, db);
            return;
        }
        double t =
            S->r[src].post[si] > S->r[dst].post[ri] ? S->r[src].post[si] : S->r[dst].post[ri];
        S->r[src].match[si] = ri;
        S->r[dst].match[ri] = si;
        complete(S, src, si, t);
        complete(S, dst, ri, t);
        c->matched++;
    }
}

static bool peer_ok(const sim *S, int rank, const tr_pp_action *a) {
    int prev = (rank - 1 + S->pp) % S->pp, next = (rank + 1) % S->pp;
    bool toward_next = a->op == TR_PP_SEND_ACT || a->op == TR_PP_RECV_GRAD;
    return a->peer == (toward_next ? next : prev) && a->mb >= 0 && a->mb < S->m && a->chunk >= 0 &&
           a->chunk < S->v && a->group >= 0 && a->group < S->r[rank].s->n;
}

/* Runs rank `rank` until it blocks or ends; returns whether it advanced. */
static bool advance(sim *S, int rank) {
    rank_state *R = &S->r[rank];
    const tr_pp_schedule *s = R->s;
    bool moved = false;
    while (R->pc < s->n && !S->failed) {
        const tr_pp_action *a = &s->actions[R->pc];
        char da[160];
        describe(da, sizeof da, a);
        if (a->op == TR_PP_FWD || a->op == TR_PP_BWD) {
            if (a->mb < 0 || a->mb >= S->m || a->chunk < 0 || a->chunk >= S->v) {
                fail(S, "pipeline.schedule_coverage", "pp rank %d action %d: %s is out of range",
                     rank, R->pc, da);
                return moved;
            }
            int k = a->mb * S->v + a->chunk, stage = a->chunk * S->pp + rank;
            bool bwd = a->op == TR_PP_BWD;
            bool needs_input = S->pp > 1 && (bwd ? stage < S->pp * S->v - 1 : stage > 0);
            int ri = R->recv_at[bwd][k];
            if (needs_input && (ri < 0 || !R->group_waited[s->actions[ri].group])) {
                fail(S, "pipeline.schedule_dependency",
                     "pp rank %d action %d: %s runs before its input %s has been received", rank,
                     R->pc, da, bwd ? "gradient" : "activation");
                return moved;
            }
            if (bwd && !R->fwd[k]) {
                fail(S, "pipeline.schedule_dependency",
                     "pp rank %d action %d: %s runs before its forward", rank, R->pc, da);
                return moved;
            }
            (bwd ? R->bwd : R->fwd)[k]++;
            double cost = bwd ? 2.0 : 1.0;
            R->clock += cost;
            R->busy += cost;
        } else if (is_transfer(a->op)) {
            if (!peer_ok(S, rank, a)) {
                fail(S, "pipeline.schedule_peer",
                     "pp rank %d action %d: %s names the wrong peer or an invalid tag/group "
                     "(activations go to pp rank %d, gradients to pp rank %d)",
                     rank, R->pc, da, (rank + 1) % S->pp, (rank - 1 + S->pp) % S->pp);
                return moved;
            }
            int k = a->mb * S->v + a->chunk;
            if (is_send(a->op) && !(a->op == TR_PP_SEND_ACT ? R->fwd : R->bwd)[k]) {
                fail(S, "pipeline.schedule_dependency",
                     "pp rank %d action %d: %s is posted before the step that produces it", rank,
                     R->pc, da);
                return moved;
            }
            if (!is_send(a->op)) R->recv_at[a->op == TR_PP_RECV_GRAD][k] = R->pc;
            R->post[R->pc] = R->clock;
            R->group_total[a->group]++;
            int src = is_send(a->op) ? rank : a->peer, dst = is_send(a->op) ? a->peer : rank;
            if (!push_index(&S->ch[src * S->pp + dst], is_send(a->op), R->pc)) {
                fail(S, "pipeline.schedule_nomem", "out of memory while checking the schedule");
                return moved;
            }
            match_channel(S, src, dst);
        } else if (a->op == TR_PP_WAIT) {
            int g = a->group;
            if (g < 0 || g >= s->n || !R->group_total[g]) {
                fail(S, "pipeline.schedule_wait",
                     "pp rank %d action %d: %s waits on a group "
                     "that was never posted",
                     rank, R->pc, da);
                return moved;
            }
            if (R->group_done[g] < R->group_total[g]) return moved;
            if (R->group_time[g] > R->clock) R->clock = R->group_time[g];
            R->group_waited[g] = true;
        } else if (a->op == TR_PP_EMBED_GRAD_ALLREDUCE) {
            int k = R->coll_arrived;
            if (a->peer < 0 || a->peer >= S->pp || k >= 4) {
                fail(S, "pipeline.schedule_peer", "pp rank %d action %d: %s is malformed", rank,
                     R->pc, da);
                return moved;
            }
            if (R->coll_time[k] < 0) R->coll_time[k] = R->clock;
            rank_state *P = &S->r[a->peer];
            if (P->coll_time[k] < 0) return moved;
            R->clock = R->coll_time[k] > P->coll_time[k] ? R->coll_time[k] : P->coll_time[k];
            R->coll_arrived++;
        }
        R->pc++;
        moved = true;
    }
    return moved;
}

/* Names the first blocked rank and what it waits for, then the peer's own blocking point. */
static void report_deadlock(sim *S) {
    for (int r = 0; r < S->pp; r++) {
        rank_state *R = &S->r[r];
        if (R->pc >= R->s->n) continue;
        const tr_pp_action *w = &R->s->actions[R->pc];
        const tr_pp_action *pending = w;
        int pidx = R->pc;
        for (int i = 0; i < R->pc && w->op == TR_PP_WAIT; i++)
            if (is_transfer(R->s->actions[i].op) && R->s->actions[i].group == w->group &&
                R->match[i] < 0) {
                pending = &R->s->actions[i];
                pidx = i;
                break;
            }
        int peer = pending->peer;
        char dw[160], dp[160], dq[160] = "finished";
        describe(dw, sizeof dw, w);
        describe(dp, sizeof dp, pending);
        if (peer >= 0 && peer < S->pp && S->r[peer].pc < S->r[peer].s->n)
            describe(dq, sizeof dq, &S->r[peer].s->actions[S->r[peer].pc]);
        fail(S, "pipeline.schedule_deadlock",
             "deadlock: every unfinished pp rank is blocked; pp rank %d at action %d (%s) waits "
             "for action %d (%s), while pp rank %d is at action %d (%s)",
             r, R->pc, dw, pidx, dp, peer, peer >= 0 && peer < S->pp ? S->r[peer].pc : -1, dq);
        return;
    }
}

static void final_checks(sim *S) {
    for (int src = 0; src < S->pp && !S->failed; src++)
        for (int dst = 0; dst < S->pp && !S->failed; dst++) {
            channel *c = &S->ch[src * S->pp + dst];
            if (c->ns == c->nr) continue;
            bool extra_send = c->ns > c->nr;
            int rank = extra_send ? src : dst, idx = extra_send ? c->sends[c->nr] : c->recvs[c->ns];
            char da[160];
            describe(da, sizeof da, &S->r[rank].s->actions[idx]);
            fail(S, "pipeline.schedule_unmatched",
                 "pp rank %d action %d: %s has no matching %s on pp rank %d", rank, idx, da,
                 extra_send ? "receive" : "send", extra_send ? dst : src);
        }
    for (int r = 0; r < S->pp && !S->failed; r++)
        for (int k = 0; k < S->m * S->v && !S->failed; k++) {
            rank_state *R = &S->r[r];
            if (R->fwd[k] == 1 && R->bwd[k] == 1) continue;
            fail(S, "pipeline.schedule_coverage",
                 "pp rank %d runs microbatch %d of chunk %d forward %d times and backward %d "
                 "times (once each expected)",
                 r, k / S->v, k % S->v, R->fwd[k], R->bwd[k]);
        }
    for (int r = 0; r < S->pp && !S->failed; r++) {
        rank_state *R = &S->r[r];
        for (int i = 0; i < R->s->n && !S->failed; i++) {
            const tr_pp_action *a = &R->s->actions[i];
            if (is_transfer(a->op) && !R->group_waited[a->group]) {
                char da[160];
                describe(da, sizeof da, a);
                fail(S, "pipeline.schedule_wait",
                     "pp rank %d action %d: %s is never waited on, so its buffer may be reused "
                     "or read too early",
                     r, i, da);
            }
        }
    }
}

static tr_status sim_alloc(sim *S, const tr_pp_schedule *ranks) {
    S->r = calloc((size_t)S->pp, sizeof *S->r);
    S->ch = calloc((size_t)(S->pp * S->pp), sizeof *S->ch);
    if (!S->r || !S->ch) return TR_ERR_NOMEM;
    size_t mv = (size_t)(S->m * S->v);
    for (int r = 0; r < S->pp; r++) {
        rank_state *R = &S->r[r];
        size_t n = (size_t)ranks[r].n + 1;
        R->s = &ranks[r];
        R->group_total = calloc(n, sizeof(int));
        R->group_done = calloc(n, sizeof(int));
        R->group_time = calloc(n, sizeof(double));
        R->group_waited = calloc(n, sizeof(bool));
        R->match = malloc(n * sizeof(int));
        R->post = calloc(n, sizeof(double));
        R->fwd = calloc(mv, sizeof(int));
        R->bwd = calloc(mv, sizeof(int));
        R->recv_at[0] = malloc(mv * sizeof(int));
        R->recv_at[1] = malloc(mv * sizeof(int));
        if (!R->group_total || !R->group_done || !R->group_time || !R->group_waited || !R->match ||
            !R->post || !R->fwd || !R->bwd || !R->recv_at[0] || !R->recv_at[1])
            return TR_ERR_NOMEM;
        memset(R->match, 0xff, n * sizeof(int));
        memset(R->recv_at[0], 0xff, mv * sizeof(int));
        memset(R->recv_at[1], 0xff, mv * sizeof(int));
        for (int k = 0; k < 4; k++) R->coll_time[k] = -1;
    }
    return TR_OK;
}

static void sim_free(sim *S) {
    for (int r = 0; S->r && r < S->pp; r++) {
        rank_state *R = &S->r[r];
        free(R->group_total), free(R->group_done), free(R->group_time), free(R->group_waited);
        free(R->match), free(R->post), free(R->fwd), free(R->bwd);
        free(R->recv_at[0]), free(R->recv_at[1]);
    }
    for (int i = 0; S->ch && i < S->pp * S->pp; i++) free(S->ch[i].sends), free(S->ch[i].recvs);
    free(S->r);
    free(S->ch);
}

tr_status tr_pp_check(const tr_pp_schedule *ranks, int pp, tr_pp_sim *out, tr_diags *d) {
    if (out) memset(out, 0, sizeof *out);
    if (pp < 1) return TR_ERR_INVALID;
    sim S = {pp, ranks[0].vpp, ranks[0].num_microbatches, NULL, NULL, d, false};
    tr_status st = sim_alloc(&S, ranks);
    if (st != TR_OK) {
        sim_free(&S);
        return st;
    }
    for (bool moved = true; moved && !S.failed;) {
        moved = false;
        for (int r = 0; r < pp; r++) moved |= advance(&S, r);
    }
    bool all_done = true;
    for (int r = 0; r < pp; r++) all_done &= S.r[r].pc >= S.r[r].s->n;
    if (!S.failed && !all_done) report_deadlock(&S);
    if (!S.failed) final_checks(&S);
    if (!S.failed && out) {
        out->busy = calloc((size_t)pp, sizeof(double));
        out->finish = calloc((size_t)pp, sizeof(double));
        if (!out->busy || !out->finish) {
            tr_pp_sim_free(out);
            sim_free(&S);
            return TR_ERR_NOMEM;
        }
        for (int r = 0; r < pp; r++) {
            out->busy[r] = S.r[r].busy;
            out->finish[r] = S.r[r].clock;
            if (S.r[r].clock > out->makespan) out->makespan = S.r[r].clock;
        }
    }
    st = S.failed ? TR_ERR_CONFIG : TR_OK;
    sim_free(&S);
    return st;
}

void tr_pp_sim_free(tr_pp_sim *s) {
    free(s->busy);
    free(s->finish);
    s->busy = s->finish = NULL;
}

tr_status tr_pp_schedule_check_all(const tr_config *c, tr_diags *d) {
    tr_pp_plan p;
    TR_TRY(tr_pp_plan_from_config(c, &p, d));
    tr_pp_schedule *ranks = calloc((size_t)p.pp, sizeof *ranks);
    if (!ranks) return TR_ERR_NOMEM;
    tr_status st = TR_OK;
    for (int r = 0; r < p.pp && st == TR_OK; r++) st = tr_pp_schedule_build_plan(&p, r, &ranks[r]);
    if (st == TR_OK) st = tr_pp_check(ranks, p.pp, NULL, d);
    for (int r = 0; r < p.pp; r++) tr_pp_schedule_free(&ranks[r]);
    free(ranks);
    return st;
}
