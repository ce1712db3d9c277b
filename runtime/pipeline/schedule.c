/* One iteration's action list per pp rank (megatron-core.md §3.1-3.3): the compute order of
 * Megatron's no-pipeline, 1F1B and interleaved schedules, then the transfers around it. */
#include <stdlib.h>
#include <string.h>

#include "runtime/pipeline/pipeline.h"

typedef struct step {
    bool bwd;
    int mb, chunk;
} step;

tr_status tr_pp_schedule_push(tr_pp_schedule *s, tr_pp_action a) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        tr_pp_action *p = realloc(s->actions, (size_t)cap * sizeof *p);
        if (!p) return TR_ERR_NOMEM;
        s->actions = p;
        s->cap = cap;
    }
    s->actions[s->n++] = a;
    return TR_OK;
}

/* The emitters' push: the list is presized to its bound (tr_pp_schedule_build_plan), so the
 * store is all it does; the planner builds lists of thousands of actions per layout. */
static inline tr_status push(tr_pp_schedule *s, tr_pp_action a) {
    if (s->n < s->cap) {
        s->actions[s->n++] = a;
        return TR_OK;
    }
    return tr_pp_schedule_push(s, a);
}

void tr_pp_schedule_free(tr_pp_schedule *s) {
    free(s->actions);
    memset(s, 0, sizeof *s);
}

/* For each group of G microbatches, every chunk in turn; a short last group (M % G >= PP) is
 * handled the same way with fewer microbatches. */
tr_status tr_pp_interleaved_table(int m, int vpp, int group_size, tr_pp_slot **out) {
    tr_pp_slot *t = malloc((size_t)(m * vpp) * sizeof *t);
    if (!t) return TR_ERR_NOMEM;
    int k = 0;
    for (int lo = 0; lo < m; lo += group_size) {
        int hi = lo + group_size < m ? lo + group_size : m;
        for (int ch = 0; ch < vpp; ch++)
            for (int mb = lo; mb < hi; mb++) t[k++] = (tr_pp_slot){mb, ch};
    }
    *out = t;
    return TR_OK;
}

int tr_pp_interleaved_warmup(int pp, int pp_rank, int vpp, int group_size, int m) {
    int w = (pp - pp_rank - 1) * 2 + (vpp - 1) * group_size;
    return w < m * vpp ? w : m * vpp;
}

static tr_status compute_order(const tr_pp_plan *p, int r, step **out, int *n) {
    int m = p->num_microbatches, v = p->vpp, total = m * v;
    step *s = malloc((size_t)(2 * total) * sizeof *s);
    if (!s) return TR_ERR_NOMEM;
    int k = 0;
    if (p->pp == 1) {
        for (int mb = 0; mb < m; mb++)
            for (int pass = 0; pass < 2; pass++)
                for (int ch = 0; ch < v; ch++)
                    s[k++] = (step){pass == 1, mb, pass ? v - 1 - ch : ch};
    } else {
        int w = p->pp - r - 1 < m ? p->pp - r - 1 : m, steady = m - w;
        for (int i = 0; i < w; i++) s[k++] = (step){false, i, 0};
        for (int i = 0; i < steady; i++) {
            s[k++] = (step){false, w + i, 0};
            s[k++] = (step){true, i, 0};
        }
        for (int i = steady; i < m; i++) s[k++] = (step){true, i, 0};
    }
    *out = s;
    *n = k;
    return TR_OK;
}

/* The list being built, with what every transfer of the rank reads computed once: the
 * planner builds lists of thousands of actions per layout. */
typedef struct emitter {
    tr_pp_schedule *s;
    const tr_pp_plan *p;
    int next_group;
    int prev, next, last; /* the neighbouring pp ranks; the last virtual stage */
    bool odd;             /* blocking calls in the odd ranks' order (rank_in_order) */
    tr_pp_counts *sink;   /* tr_pp_schedule_count_plan: each action counted, none stored */
    bool any;             /* an action was emitted; `prev_op` and `prev_group` are the last's */
    tr_pp_op prev_op;
    int prev_group;
} emitter;

static tr_status emit_one(emitter *e, tr_pp_action a) {
    e->any = true;
    e->prev_op = a.op;
    e->prev_group = a.group;
    if (!e->sink) return push(e->s, a);
    tr_pp_counts_add(e->sink, &a);
    return TR_OK;
}

/* The transfer a compute step needs before it runs (`in`) or produces after it (`out`), as an
 * action without a group; op < 0 when there is none. */
static tr_pp_action transfer(const emitter *e, const step *x, bool in) {
    const tr_pp_plan *p = e->p;
    int stage = x->chunk * p->pp + e->s->pp_rank;
    tr_pp_action a = {TR_PP_NONE, x->mb, x->chunk, -1, -1, p->message_bytes};
    if (p->pp == 1) return a;
    if (!x->bwd && in && stage > 0) a.op = TR_PP_RECV_ACT, a.peer = e->prev;
    if (!x->bwd && !in && stage < e->last) a.op = TR_PP_SEND_ACT, a.peer = e->next;
    if (x->bwd && in && stage < e->last) a.op = TR_PP_RECV_GRAD, a.peer = e->next;
    if (x->bwd && !in && stage > 0) a.op = TR_PP_SEND_GRAD, a.peer = e->prev;
    return a;
}

/* Megatron's _p2p_ops order so that one-at-a-time blocking transfers pair up between
 * neighbours: even ranks send_next, recv_prev, send_prev, recv_next; odd ranks recv_prev,
 * send_next, recv_next, send_prev. Batched groups use the even order on every rank, which keeps
 * activations ahead of gradients on a shared (src, dst) channel when PP = 2. */
static const unsigned char call_rank[2][TR_PP_RECV_GRAD + 1] = {
    /* FWD, BWD (never posted), SEND_ACT, RECV_ACT, SEND_GRAD, RECV_GRAD */
    {4, 4, 0, 1, 2, 3}, /* even */
    {4, 4, 1, 0, 3, 2}, /* odd */
};
static int rank_in_order(tr_pp_op op, bool odd) {
    return op >= 0 && op <= TR_PP_RECV_GRAD ? call_rank[odd][op] : 4;
}

/* Posts up to four transfers as one group; *group is -1 when all are empty. Without batching a
 * blocking exchange is one blocking call per transfer, in Megatron's even/odd order. */
static tr_status post_n(emitter *e, tr_pp_action *ops, int n_in, bool wait_now, int *group) {
    *group = -1;
    tr_pp_action v[4];
    int n = 0;
    for (int i = 0; i < n_in; i++)
        if (ops[i].op != TR_PP_NONE) v[n++] = ops[i];
    if (!n) return TR_OK;
    for (int i = 1; i < n; i++) /* insertion sort by the call order */
        for (int j = i;
             j > 0 && rank_in_order(v[j].op, e->odd) < rank_in_order(v[j - 1].op, e->odd); j--) {
            tr_pp_action t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    bool each_alone = wait_now && !e->p->batched;
    for (int i = 0; i < n; i++) {
        if (i == 0 || each_alone) *group = e->next_group++;
        v[i].group = *group;
        TR_TRY(emit_one(e, v[i]));
        if (each_alone) TR_TRY(emit_one(e, (tr_pp_action){TR_PP_WAIT, -1, -1, -1, *group, 0}));
    }
    if (wait_now && !each_alone)
        TR_TRY(emit_one(e, (tr_pp_action){TR_PP_WAIT, -1, -1, -1, *group, 0}));
    return TR_OK;
}

static tr_status post(emitter *e, tr_pp_action a, tr_pp_action b, bool wait_now, int *group) {
    tr_pp_action ops[2] = {a, b};
    return post_n(e, ops, 2, wait_now, group);
}

static tr_status wait_for(emitter *e, int group) {
    if (group < 0) return TR_OK;
    /* A group posted with wait_now was already waited right after posting. */
    if (e->any && e->prev_op == TR_PP_WAIT && e->prev_group == group) return TR_OK;
    return emit_one(e, (tr_pp_action){TR_PP_WAIT, -1, -1, -1, group, 0});
}

static tr_status push_compute(emitter *e, const step *x) {
    tr_pp_action a = {x->bwd ? TR_PP_BWD : TR_PP_FWD, x->mb, x->chunk, -1, -1, 0};
    return emit_one(e, a);
}

static const tr_pp_action NONE = {TR_PP_NONE, -1, -1, -1, -1, 0};

/* Blocking: between steps i-1 and i one exchange {send out(i-1), recv in(i)}, as Megatron's
 * fused send_forward_recv_backward and friends. Overlapped: the exchange before step i also
 * prefetches the input of step i+1 and is waited on only before step i+1, so both transfers
 * run under step i's compute. */
static tr_status emit(emitter *e, const step *x, int n) {
    const tr_pp_plan *p = e->p;
    int g;
    if (!p->overlapped) {
        for (int i = 0; i <= n; i++) {
            tr_pp_action out = i > 0 ? transfer(e, &x[i - 1], false) : NONE;
            tr_pp_action in = i < n ? transfer(e, &x[i], true) : NONE;
            TR_TRY(post(e, out, in, true, &g));
            if (i < n) TR_TRY(push_compute(e, &x[i]));
        }
        return TR_OK;
    }
    int pending;
    TR_TRY(post(e, NONE, n > 0 ? transfer(e, &x[0], true) : NONE, false, &pending));
    for (int i = 0; i < n; i++) {
        tr_pp_action out = i > 0 ? transfer(e, &x[i - 1], false) : NONE;
        tr_pp_action in = i + 1 < n ? transfer(e, &x[i + 1], true) : NONE;
        TR_TRY(post(e, out, in, false, &g));
        TR_TRY(wait_for(e, pending));
        pending = g;
        TR_TRY(push_compute(e, &x[i]));
    }
    TR_TRY(wait_for(e, pending));
    TR_TRY(post(e, n > 0 ? transfer(e, &x[n - 1], false) : NONE, NONE, true, &g));
    return TR_OK;
}

/* ---- interleaved: Megatron's control flow, whose receives run ahead of use ----
 * Received tensors queue per chunk, and each chunk consumes its microbatches in increasing
 * order, so the k-th receive into chunk c's queue carries microbatch k. */
typedef struct ileave {
    emitter *e;
    int r, pp, v, total, w;
    tr_pp_slot *t;
    int *act_next, *grad_next; /* [v]: next microbatch each queue receives */
} ileave;

static int chunk_at(const ileave *x, int k, bool fwd) {
    int i = k >= 0 && k < x->total ? k : ((k % x->total) + x->total) % x->total; /* Python's */
    int c = x->t[i].chunk;
    return fwd ? c : x->v - 1 - c;
}

static step step_at(const ileave *x, int k, bool fwd) {
    return (step){!fwd, x->t[k].mb, chunk_at(x, k, fwd)};
}

/* Megatron's recv_tensor_from_previous_stage: whether the exchange after virtual step k
 * receives, and into which chunk. The leading rank (first for forward, last for backward) is
 * PP - 1 steps ahead of the rank that feeds it across the wrap-around. */
static bool next_recv(const ileave *x, int k, bool fwd, int *chunk) {
    bool leading = fwd ? x->r == 0 : x->r == x->pp - 1;
    if (!leading) {
        *chunk = chunk_at(x, k + 1, fwd);
        return true;
    }
    int c = chunk_at(x, k - (x->pp - 1), fwd);
    *chunk = fwd ? c + 1 : c - 1;
    return c != (fwd ? x->v - 1 : 0);
}

static tr_pp_action recv_of(ileave *x, bool act, int chunk, bool want) {
    tr_pp_action a = NONE;
    if (!want) return a;
    a.op = act ? TR_PP_RECV_ACT : TR_PP_RECV_GRAD;
    a.mb = act ? x->act_next[chunk]++ : x->grad_next[chunk]++;
    a.chunk = chunk;
    a.peer = act ? x->e->prev : x->e->next;
    a.bytes = x->e->p->message_bytes;
    return a;
}

static tr_status compute(ileave *x, const step *st) {
    return push_compute(x->e, st);
}

static tr_status emit_interleaved(emitter *e, int r) {
    const tr_pp_plan *p = e->p;
    ileave x = {e, r, p->pp, p->vpp, p->num_microbatches * p->vpp, 0, NULL, NULL, NULL};
    x.w = tr_pp_interleaved_warmup(p->pp, r, p->vpp, p->group_size, p->num_microbatches);
    TR_TRY(tr_pp_interleaved_table(p->num_microbatches, p->vpp, p->group_size, &x.t));
    x.act_next = calloc((size_t)p->vpp, sizeof(int));
    x.grad_next = calloc((size_t)p->vpp, sizeof(int));
    tr_status st = x.act_next && x.grad_next ? TR_OK : TR_ERR_NOMEM;
    bool ov = p->overlapped, all_warmup = x.w == x.total;
    int rest = x.total - x.w, fwd_pending = -1, bwd_pending = -1, g, c;
#define DO(expr)                                                                                   \
    if (st == TR_OK) st = (expr)
    tr_pp_action first = recv_of(&x, true, 0, r != 0);
    DO(post_n(e, &first, 1, true, &g));
    for (int k = 0; k < x.w && st == TR_OK; k++) {
        DO(wait_for(e, fwd_pending));
        fwd_pending = -1;
        step f = step_at(&x, k, true);
        DO(compute(&x, &f));
        bool rp = next_recv(&x, k, true, &c) && k != x.total - 1;
        tr_pp_action ops[2] = {transfer(e, &f, false), recv_of(&x, true, c, rp)};
        DO(post_n(e, ops, 2, !ov, &fwd_pending));
        if (k == x.w - 1 && !all_warmup) {
            /* the first backward's gradient is fetched with the last warmup exchange */
            tr_pp_action gr = recv_of(&x, false, p->vpp - 1, r != p->pp - 1);
            DO(post_n(e, &gr, 1, !ov, ov ? &bwd_pending : &g));
        }
    }
    for (int k = 0; k < rest && st == TR_OK; k++) {
        int fk = k + x.w;
        step f = step_at(&x, fk, true), b = step_at(&x, k, false);
        bool rp = next_recv(&x, fk, true, &c) && k != rest - 1;
        int cb;
        bool rn = next_recv(&x, k, false, &cb);
        if (ov) {
            DO(wait_for(e, fwd_pending));
            DO(compute(&x, &f));
            tr_pp_action fo[2] = {transfer(e, &f, false), recv_of(&x, true, c, rp)};
            DO(post_n(e, fo, 2, false, &fwd_pending));
            DO(wait_for(e, bwd_pending));
            DO(compute(&x, &b));
            tr_pp_action bo[2] = {transfer(e, &b, false), recv_of(&x, false, cb, rn)};
            DO(post_n(e, bo, 2, false, &bwd_pending));
        } else {
            DO(compute(&x, &f));
            DO(compute(&x, &b));
            tr_pp_action ops[4] = {transfer(e, &f, false), recv_of(&x, true, c, rp),
                                   transfer(e, &b, false), recv_of(&x, false, cb, rn)};
            DO(post_n(e, ops, 4, true, &g));
        }
    }
    DO(wait_for(e, fwd_pending));
    if (all_warmup) {
        tr_pp_action gr = recv_of(&x, false, p->vpp - 1, r != p->pp - 1);
        DO(post_n(e, &gr, 1, true, &g));
    }
    for (int k = rest; k < x.total && st == TR_OK; k++) {
        DO(wait_for(e, bwd_pending));
        bwd_pending = -1;
        step b = step_at(&x, k, false);
        DO(compute(&x, &b));
        int cb;
        bool rn = next_recv(&x, k, false, &cb) && k != x.total - 1;
        tr_pp_action ops[2] = {transfer(e, &b, false), recv_of(&x, false, cb, rn)};
        DO(post_n(e, ops, 2, true, &g));
    }
    DO(wait_for(e, bwd_pending));
#undef DO
    free(x.t);
    free(x.act_next);
    free(x.grad_next);
    return st;
}

/* The list of pp_rank into out, or with a sink its actions counted there and out only the
 * header (no actions). */
static tr_status build(const tr_pp_plan *p, int pp_rank, tr_pp_schedule *out, tr_pp_counts *sink) {
    memset(out, 0, sizeof *out);
    if (p->pp < 1 || p->vpp < 1 || p->num_microbatches < 1 || pp_rank < 0 || pp_rank >= p->pp)
        return TR_ERR_INVALID;
    out->pp_rank = pp_rank;
    out->pp = p->pp;
    out->vpp = p->vpp;
    out->num_microbatches = p->num_microbatches;
    out->kind = p->pp == 1 ? TR_PP_NO_PIPELINE : p->vpp == 1 ? TR_PP_1F1B : TR_PP_INTERLEAVED;
    out->batched = p->batched;
    out->overlapped = p->overlapped;
    out->message_bytes = p->message_bytes;
    /* Presized to a bound, so building never reallocates: a compute step brings at most its
     * own action, two transfers and their two WAITs (one more transfer and WAIT on the last
     * warmup step), plus a few around the loops; push grows the list should the bound be off. */
    if (!sink) {
        int64_t bound = 12 * (int64_t)p->num_microbatches * p->vpp + 16;
        if (bound > (1 << 24)) bound = 1 << 24;
        out->actions = malloc((size_t)bound * sizeof *out->actions);
        if (!out->actions) return TR_ERR_NOMEM;
        out->cap = (int)bound;
    }
    emitter e = {.s = out,
                 .p = p,
                 .prev = (pp_rank - 1 + p->pp) % p->pp,
                 .next = (pp_rank + 1) % p->pp,
                 .last = p->pp * p->vpp - 1,
                 .odd = !p->batched && pp_rank % 2,
                 .sink = sink};
    tr_status st;
    if (p->vpp > 1) {
        st = emit_interleaved(&e, pp_rank);
    } else {
        step *x;
        int n;
        st = compute_order(p, pp_rank, &x, &n);
        if (st == TR_OK) {
            st = emit(&e, x, n);
            free(x);
        }
    }
    /* DP reduction finishes after the last backward; Megatron's finalize_model_grads then
     * all-reduces the word embedding's grads between the first and last stage (tied, or the
     * MTP depths' copy). */
    if (st == TR_OK) st = emit_one(&e, (tr_pp_action){TR_PP_DP_GRAD_REDUCE, -1, -1, -1, -1, 0});
    if (st == TR_OK && p->shared_embedding && p->pp > 1 && (pp_rank == 0 || pp_rank == p->pp - 1))
        st = emit_one(&e, (tr_pp_action){TR_PP_EMBED_GRAD_ALLREDUCE, -1, -1,
                                         pp_rank == 0 ? p->pp - 1 : 0, -1, 0});
    if (st != TR_OK) tr_pp_schedule_free(out);
    return st;
}

tr_status tr_pp_schedule_build_plan(const tr_pp_plan *p, int pp_rank, tr_pp_schedule *out) {
    return build(p, pp_rank, out, NULL);
}

tr_status tr_pp_schedule_count_plan(const tr_pp_plan *p, int pp_rank, tr_pp_counts *k) {
    tr_pp_schedule header;
    TR_TRY(build(p, pp_rank, &header, k));
    return k->st;
}

static int dtype_bytes(int32_t t) {
    return t == TR_DTYPE_FP32 ? 4 : 2;
}

int32_t tr_pp_message_dtype(const tr_config *c) {
    const tr_model_config *m = &c->model;
    return m->pipeline_dtype >= 0 ? m->pipeline_dtype : m->params_dtype;
}

tr_status tr_pp_plan_from_config(const tr_config *c, tr_pp_plan *out, tr_diags *d) {
    const tr_model_config *m = &c->model;
    memset(out, 0, sizeof *out);
    out->pp = (int)m->pipeline_model_parallel_size;
    out->vpp = m->virtual_pipeline_model_parallel_size == TR_NULL_INT
                   ? 1
                   : (int)m->virtual_pipeline_model_parallel_size;
    out->num_microbatches = (int)c->derived.num_microbatches;
    out->group_size = m->microbatch_group_size_per_vp_stage == TR_NULL_INT
                          ? out->pp
                          : (int)m->microbatch_group_size_per_vp_stage;
    out->batched = m->batch_p2p_comm;
    out->overlapped = m->overlap_p2p_comm && out->vpp > 1;
    out->shared_embedding = tr_pp_shares_embedding(c);
    int64_t tokens = m->seq_length / m->context_parallel_size;
    if (m->sequence_parallel && m->tensor_model_parallel_size > 1)
        tokens /= m->tensor_model_parallel_size;
    int64_t mbs = c->train.micro_batch_size == TR_NULL_INT ? 1 : c->train.micro_batch_size;
    out->message_bytes = tokens * mbs * m->hidden_size * dtype_bytes(tr_pp_message_dtype(c));
    int m_ = out->num_microbatches, g = out->group_size;
    bool ok = out->pp >= 1 && out->vpp >= 1 && m_ >= 1;
    if (ok && out->vpp > 1)
        ok = out->pp > 1 && g >= out->pp && g <= m_ && (m_ % g == 0 || m_ % g >= out->pp);
    if (!ok) {
        tr_diag_add(d, TR_SEV_ERROR, "pipeline.schedule_config", NULL,
                    "model.pipeline_model_parallel_size,model.virtual_pipeline_model_parallel_size,"
                    "derived.num_microbatches,model.microbatch_group_size_per_vp_stage",
                    "run validate() first; it names the rule and the fix",
                    "no pipeline schedule for PP=%d, VPP=%d, num_microbatches=%d, group size %d",
                    out->pp, out->vpp, m_, g);
        return TR_ERR_CONFIG;
    }
    return TR_OK;
}

tr_status tr_pp_schedule_build(const tr_config *c, int pp_rank, tr_pp_schedule *out, tr_diags *d) {
    memset(out, 0, sizeof *out);
    tr_pp_plan p;
    TR_TRY(tr_pp_plan_from_config(c, &p, d));
    if (pp_rank < 0 || pp_rank >= p.pp) {
        tr_diag_add(d, TR_SEV_ERROR, "pipeline.schedule_rank", NULL,
                    "model.pipeline_model_parallel_size", "pass a pp rank in [0, PP)",
                    "pp rank %d is outside [0, %d)", pp_rank, p.pp);
        return TR_ERR_INVALID;
    }
    TR_TRY(tr_pp_schedule_build_plan(&p, pp_rank, out));
    out->message_dtype = tr_pp_message_dtype(c);
    return TR_OK;
}

const char *tr_pp_op_name(tr_pp_op op) {
    static const char *names[] = {"FWD",           "BWD",       "SEND_ACT", "RECV_ACT",
                                  "SEND_GRAD",     "RECV_GRAD", "WAIT",     "EMBED_GRAD_ALLREDUCE",
                                  "DP_GRAD_REDUCE"};
    return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "?";
}
