/* The MoE layer: its parameters (Megatron's names, experts as logical per-expert tensors so a
 * checkpoint reshards over any expert layout), its buffers, and the forward / backward that chain
 * router, permutation, experts, unpermutation and the shared expert. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/device/device.h"
#include "runtime/moe/internal.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int tr_moe_param_count(const tr_moe_spec *s) {
    int ep = s->ep_size > 1 ? s->ep_size : 1;
    int n = 1 + (s->expert_bias ? 1 : 0) + 2 * (s->experts / ep);
    if (s->shared_ffn > 0) n += 2 + (s->shared_gate ? 1 : 0);
    return n + tr_moe_lora_param_count(s);
}

static tr_moe_param param(const char *name, int rows, int cols, int init, bool no_decay) {
    tr_moe_param p = {
        .rows = rows, .cols = cols, .init = init, .no_decay = no_decay, .split_dim = -1};
    memcpy(p.name, name, sizeof p.name);
    return p;
}

tr_status tr_moe_params(const tr_moe_spec *s, int layer, int hidden, bool swiglu,
                        tr_moe_param *out) {
    char base[48];
    snprintf(base, sizeof base, "decoder.layers.%d", layer);
    return tr_moe_params_at(s, base, hidden, swiglu, out);
}

tr_status tr_moe_params_at(const tr_moe_spec *s, const char *base, int hidden, bool swiglu,
                           tr_moe_param *out) {
    char n[sizeof out->name];
    int at = 0;
    int fc1 = swiglu ? 2 * s->ffn : s->ffn, sfc1 = swiglu ? 2 * s->shared_ffn : s->shared_ffn;
#define NAME(...)                                                                                  \
    do {                                                                                           \
        int len_ = snprintf(n, sizeof n, __VA_ARGS__);                                             \
        if (len_ < 0 || (size_t)len_ >= sizeof n) return TR_ERR_INVALID;                           \
    } while (0)
    NAME("%s.mlp.router.weight", base);
    out[at++] = param(n, s->experts, hidden, TR_MOE_INIT_NORMAL, false);
    if (s->expert_bias) {
        /* Megatron's buffer, updated from token counts: never touched by the optimizer */
        NAME("%s.mlp.router.expert_bias", base);
        out[at] = param(n, 1, s->experts, TR_MOE_INIT_ZERO, true);
        out[at++].frozen = true;
    }
    int ep = s->ep_size > 1 ? s->ep_size : 1, local = s->experts / ep;
    int etp = s->etp_size > 1 ? s->etp_size : 1;
    if (s->experts % ep || s->ep_rank < 0 || s->ep_rank >= ep || s->ffn % etp)
        return TR_ERR_INVALID;
    for (int e = s->ep_rank * local; e < (s->ep_rank + 1) * local; e++) {
        /* ETP: fc1 column-parallel (its output rows split), fc2 row-parallel (its input columns) */
        NAME("%s.mlp.experts.local_experts.%d.linear_fc1.weight", base, e);
        out[at] = param(n, fc1 / etp, hidden, TR_MOE_INIT_NORMAL, false);
        out[at].split_dim = etp > 1 ? 0 : -1;
        out[at].swiglu_split = etp > 1 && swiglu;
        out[at++].expert = true;
        NAME("%s.mlp.experts.local_experts.%d.linear_fc2.weight", base, e);
        out[at] = param(n, hidden, s->ffn / etp, TR_MOE_INIT_SCALED, false);
        out[at].split_dim = etp > 1 ? 1 : -1;
        out[at++].expert = true;
    }
    if (s->shared_ffn > 0) {
        NAME("%s.mlp.shared_experts.linear_fc1.weight", base);
        out[at++] = param(n, sfc1, hidden, TR_MOE_INIT_NORMAL, false);
        NAME("%s.mlp.shared_experts.linear_fc2.weight", base);
        out[at++] = param(n, hidden, s->shared_ffn, TR_MOE_INIT_SCALED, false);
        if (s->shared_gate) {
            NAME("%s.mlp.shared_experts.gate_weight", base);
            out[at++] = param(n, 1, hidden, TR_MOE_INIT_NORMAL, false);
        }
    }
#undef NAME
    for (int i = 0; i < at && s->lora_rank > 0; i++) out[i].frozen = true;
    return tr_moe_lora_params(s, base, hidden, swiglu, out + at);
}

void tr_moe_bind(tr_moe_layer *L, float *params, float *grads, const int64_t *offsets) {
    int at = 0;
    tr_moe_view *v[2] = {&L->p, &L->g};
    float *base[2] = {params, grads};
    for (int w = 0; w < 2; w++) {
        at = 0;
        v[w]->router = base[w] + offsets[at++];
        v[w]->bias = L->s.expert_bias ? base[w] + offsets[at++] : NULL;
        for (int e = 0; e < L->El; e++) {
            v[w]->fc1[e] = base[w] + offsets[at++];
            v[w]->fc2[e] = base[w] + offsets[at++];
        }
        v[w]->s_fc1 = v[w]->s_fc2 = v[w]->s_gate = NULL;
        if (L->s.shared_ffn > 0) {
            v[w]->s_fc1 = base[w] + offsets[at++];
            v[w]->s_fc2 = base[w] + offsets[at++];
            if (L->s.shared_gate) v[w]->s_gate = base[w] + offsets[at++];
        }
    }
    if (L->s.lora_rank > 0) { /* the frozen base: no gradients (LoRA) */
        memset(L->g.fc1, 0, (size_t)L->El * sizeof *L->g.fc1);
        memset(L->g.fc2, 0, (size_t)L->El * sizeof *L->g.fc2);
        L->g.router = L->g.s_fc1 = L->g.s_fc2 = L->g.s_gate = NULL;
    }
    tr_moe_lora_bind(L, params, grads, offsets + at);
}

/* n floats (rounded up to 16) at *off of base (NULL: only counted). */
static float *carve(float *base, int64_t *off, int64_t n) {
    float *p = base ? base + *off : NULL;
    *off += (n + 15) / 16 * 16;
    return p;
}

/* A state's tensors in groups: those recomputation may drop (TR_MOE_RC_*: routing and expert
 * rows, the experts' activation, the shared expert) and the aux loss's weights, always kept per
 * slot because a global aux loss's running counts have moved on by the backward. */
enum { G_ROUTE = 1, G_ACT = 2, G_SHARED = 4, G_AUX = 8 };

static unsigned dropped_groups(unsigned rc) {
    unsigned g = 0;
    if (rc & TR_MOE_RC_ALL) g |= G_ROUTE | G_ACT | G_SHARED;
    if (rc & TR_MOE_RC_ACT) g |= G_ACT;
    if (rc & TR_MOE_RC_SHARED) g |= G_SHARED;
    return g;
}

/* The floats of the groups `groups` of one state (st NULL: only counted) and its ints into
 * *n_ints (iat NULL: only counted). */
static int64_t layout_state(const tr_moe_layer *L, float *at, tr_moe_state *st, int32_t *iat,
                            unsigned groups, int64_t *n_ints) {
    int64_t T = L->T, h = L->d.hidden, E = L->E, k = L->k, R = L->max_rows;
    int64_t SF = L->s.shared_ffn > 0 ? L->s.shared_ffn : 0, SF1 = L->s_fc1_dim;
    int64_t o = 0, io = 0;
    tr_moe_state s = {0};
    if (groups & G_ROUTE) {
        s.x = carve(at, &o, T * h);
        s.noise = L->s.jitter > 0.0f ? carve(at, &o, T * h) : NULL;
        s.logits = carve(at, &o, T * E);
        s.prob = carve(at, &o, T * k);
    }
    if (groups & G_AUX) s.aux_n = carve(at, &o, (int64_t)L->d.batch * E);
    if (groups & G_ROUTE) {
        s.xp = carve(at, &o, R * h);
        s.fc1 = carve(at, &o, R * L->fc1_dim);
    }
    if (groups & G_ACT) s.act = carve(at, &o, R * L->s.ffn);
    if (groups & G_ROUTE) s.ye = carve(at, &o, R * h);
    if (SF && (groups & G_SHARED)) {
        s.s_fc1 = carve(at, &o, T * SF1);
        s.s_act = carve(at, &o, T * SF);
        s.s_y = carve(at, &o, T * h);
        s.s_gate = carve(at, &o, T);
    }
    int64_t ni[4] = {T * k, T * k, R, E + 1};
    int32_t **ip[4] = {&s.idx, &s.pos, &s.row_a, &s.off};
    for (int i = 0; i < 4 && (groups & G_ROUTE); i++) {
        *ip[i] = iat ? iat + io : NULL;
        io += (ni[i] + 15) / 16 * 16;
    }
    if (st) *st = s;
    if (n_ints) *n_ints = io;
    return o;
}

/* The dropped groups' tensors of a slot's state: those of the shared recompute state. */
static void share_groups(tr_moe_state *st, const tr_moe_state *from, unsigned groups) {
    if (groups & G_ROUTE) {
        st->x = from->x, st->noise = from->noise, st->logits = from->logits;
        st->prob = from->prob, st->xp = from->xp, st->fc1 = from->fc1, st->ye = from->ye;
        st->idx = from->idx, st->pos = from->pos, st->row_a = from->row_a, st->off = from->off;
    }
    if (groups & G_ACT) st->act = from->act;
    if (groups & G_SHARED) {
        st->s_fc1 = from->s_fc1, st->s_act = from->s_act;
        st->s_y = from->s_y, st->s_gate = from->s_gate;
    }
}

/* Floats and ints of one slot's state and of the recompute state (sizes + 16 for alignment). */
static void state_sizes(const tr_moe_layer *L, int64_t *per, int64_t *iper, int64_t *set,
                        int64_t *iset) {
    unsigned drop = dropped_groups(L->d.rc), all = G_ROUTE | G_ACT | G_SHARED | G_AUX;
    *per = layout_state(L, NULL, NULL, NULL, all & ~drop, iper) + 16;
    *set = drop ? layout_state(L, NULL, NULL, NULL, drop, iset) : 0;
    if (!drop) *iset = 0;
}

static int64_t layout_scratch(tr_moe_layer *L, float *at, bool bind) {
    int64_t T = L->T, h = L->d.hidden, R = L->max_rows, SF = L->s.shared_ffn;
    int64_t RE = L->ep_rows > R ? L->ep_rows : R; /* rows the local experts run over */
    if (L->etp_rows > RE) RE = L->etp_rows;
    int64_t o = 0;
    float *d_rows = carve(at, &o, R * h), *d_act = carve(at, &o, RE * L->s.ffn);
    float *d_fc1 = carve(at, &o, RE * L->fc1_dim), *d_x = carve(at, &o, R * h);
    float *d_logits = carve(at, &o, T * L->E), *d_prob = carve(at, &o, T * L->k);
    float *d_out = carve(at, &o, T * h);
    float *s_dy = NULL, *s_dact = NULL, *s_dfc1 = NULL, *s_dg = NULL;
    if (SF > 0) {
        s_dy = carve(at, &o, T * h);
        s_dact = carve(at, &o, T * SF);
        s_dfc1 = carve(at, &o, T * L->s_fc1_dim);
        s_dg = carve(at, &o, T);
    }
    if (bind) {
        L->d_rows = d_rows;
        L->d_act = d_act;
        L->d_fc1 = d_fc1;
        L->d_x = d_x;
        L->d_logits = d_logits;
        L->d_prob = d_prob;
        L->d_out = d_out;
        L->s_dy = s_dy;
        L->s_dact = s_dact;
        L->s_dfc1 = s_dfc1;
        L->s_dg = s_dg;
    }
    return o;
}

/* The layer's sizes from its spec and dims (what create and the buffer sizing share). */
static tr_status layer_dims(tr_moe_layer *L, const tr_moe_spec *s, const tr_moe_dims *d) {
    if (s->experts < 1 || s->experts > TR_MOE_MAX_EXPERTS || s->topk < 1 || s->topk > s->experts ||
        s->ffn < 1 || d->hidden < 1 || d->batch < 1 || d->seq < 1)
        return TR_ERR_INVALID;
    if (s->groups > 0 && (s->experts % s->groups || s->group_topk < 1 ||
                          s->group_topk > s->groups || s->topk % s->group_topk))
        return TR_ERR_INVALID;
    L->s = *s;
    L->d = *d;
    if (L->d.slots < 1) L->d.slots = 1;
    L->T = d->batch * d->seq;
    L->E = s->experts;
    L->k = s->topk;
    /* ETP: this rank's slice of every expert's ffn (the spec's whole ffn stays in the names) */
    L->etp = s->etp_size > 1 ? s->etp_size : 1;
    L->etp_rank = L->etp > 1 ? s->etp_rank : 0;
    if (L->etp > 1 && (s->ffn % L->etp || L->etp_rank < 0 || L->etp_rank >= L->etp ||
                       L->etp > TR_MOE_MAX_EXPERTS || s->lora_rank > 0))
        return TR_ERR_INVALID; /* LoRA on expert-TP shards: refused by runtime.moe_peft */
    L->s.ffn = s->ffn / L->etp;
    L->fc1_dim = d->swiglu ? 2 * L->s.ffn : L->s.ffn;
    L->s_fc1_dim = d->swiglu ? 2 * s->shared_ffn : s->shared_ffn;
    L->max_rows = L->T * L->k;
    L->ep = s->ep_size > 1 ? s->ep_size : 1;
    L->ep_rank = L->ep > 1 ? s->ep_rank : 0;
    L->El = L->E / L->ep;
    if (L->ep > 1 && (L->E % L->ep || L->ep_rank < 0 || L->ep_rank >= L->ep)) return TR_ERR_INVALID;
    if (s->capacity > 0.0f) {
        /* Megatron's get_capacity over the token-expert pairs of this rank's microbatch (under
         * EP too: each rank drops among its own tokens, before the dispatch) */
        L->capacity = (int)ceil((double)L->T * L->k / L->E * s->capacity);
        if (s->pad_capacity) L->max_rows = L->E * L->capacity;
    }
    /* The rows one rank's El experts may receive from each rank of the group: dropless all its
     * T k rows; with a capacity at most El capacity (padded: exactly that, which may exceed
     * T k when the factor is above 1). */
    if (L->ep > 1) {
        int64_t per = L->max_rows, cap = (int64_t)L->El * L->capacity;
        if (L->capacity > 0 && cap < per) per = cap;
        L->ep_rows = (int)(L->ep * per);
    }
    /* ETP: the rows of every expert-TP rank's local experts, gathered */
    if (L->etp > 1) L->etp_rows = L->etp * (L->ep > 1 ? L->ep_rows : L->max_rows);
    return TR_OK;
}

int64_t tr_moe_rc_bytes(const tr_moe_spec *s, const tr_moe_dims *d, int64_t *int_bytes) {
    tr_moe_layer L;
    memset(&L, 0, sizeof L);
    *int_bytes = 0;
    if (layer_dims(&L, s, d) != TR_OK) return 0;
    int64_t per, iper, set, iset;
    state_sizes(&L, &per, &iper, &set, &iset);
    *int_bytes = iset * (int64_t)sizeof(int32_t);
    return set * (int64_t)sizeof(float);
}

int tr_moe_buffer_bytes(const tr_moe_spec *s, const tr_moe_dims *d,
                        int64_t out[TR_MOE_MAX_BUFFERS]) {
    tr_moe_layer L;
    memset(&L, 0, sizeof L);
    if (layer_dims(&L, s, d) != TR_OK) return 0;
    int64_t per, iper, set, iset;
    state_sizes(&L, &per, &iper, &set, &iset);
    int n = 0;
    out[n++] = (per * L.d.slots + layout_scratch(&L, NULL, false)) * (int64_t)sizeof(float);
    out[n++] = iper * L.d.slots * (int64_t)sizeof(int32_t);
    if (L.ep > 1) {
        int64_t floats, ints;
        (tr_moe_allgather(&L) ? tr_moe_ag_sizes : tr_moe_ep_sizes)(&L, &floats, &ints);
        out[n++] = floats * (int64_t)sizeof(float);
        out[n++] = ints * (int64_t)sizeof(int32_t);
    }
    if (L.etp > 1) {
        int64_t floats, ints;
        tr_moe_etp_sizes(&L, &floats, &ints);
        out[n++] = floats * (int64_t)sizeof(float);
        out[n++] = ints * (int64_t)sizeof(int32_t);
    }
    return n;
}

tr_status tr_moe_create(tr_moe_layer **out, const tr_moe_spec *s, const tr_moe_dims *d,
                        const tr_ops *ops) {
    *out = NULL;
    if (d->dev && !tr_device_host_visible(d->dev)) return TR_ERR_INVALID;
    tr_moe_layer *L = calloc(1, sizeof *L);
    if (!L) return TR_ERR_NOMEM;
    /* (the EP group's comm may come later, tr_moe_set_comm: the forward checks it) */
    tr_status ds = layer_dims(L, s, d);
    if (ds == TR_OK && dropped_groups(d->rc) && (!d->rc_buf || !d->rc_ibuf)) ds = TR_ERR_INVALID;
    if (ds != TR_OK) {
        free(L);
        return ds;
    }
    L->ops = ops;
    /* the sizes tr_moe_buffer_bytes gives the planner */
    int64_t bytes[TR_MOE_MAX_BUFFERS];
    if (tr_moe_buffer_bytes(s, d, bytes) < 2) {
        free(L);
        return TR_ERR_INVALID;
    }
    int64_t per, iper, set, iset;
    state_sizes(L, &per, &iper, &set, &iset);
    L->buf = tr_moe_buf_alloc(L, bytes[0]);
    L->ibuf = tr_moe_buf_alloc(L, bytes[1]);
    L->st = calloc((size_t)L->d.slots, sizeof *L->st);
    L->p.fc1 = calloc((size_t)L->E * 4, sizeof(float *));
    L->counts = calloc((size_t)L->E * 3, sizeof(double));
    L->aux_N = calloc((size_t)L->d.batch * L->E * 2, sizeof(double));
    if (!L->buf || !L->ibuf || !L->st || !L->p.fc1 || !L->counts || !L->aux_N) {
        tr_moe_free(L);
        return TR_ERR_NOMEM;
    }
    L->p.fc2 = L->p.fc1 + L->E;
    L->g.fc1 = L->p.fc1 + 2 * L->E;
    L->g.fc2 = L->p.fc1 + 3 * L->E;
    L->ga_counts = L->counts + L->E;
    L->seen = L->counts + 2 * L->E;
    L->aux_P = L->aux_N + (size_t)L->d.batch * L->E;
    unsigned drop = dropped_groups(L->d.rc), all = G_ROUTE | G_ACT | G_SHARED | G_AUX;
    tr_moe_state rc = {0};
    if (drop) /* the recompute state, in the caller's storage (tr_moe_rc_bytes) */
        layout_state(L, d->rc_buf, &rc, d->rc_ibuf, drop, NULL);
    for (int i = 0; i < L->d.slots; i++) {
        layout_state(L, L->buf + per * i, &L->st[i], L->ibuf + iper * i, all & ~drop, NULL);
        share_groups(&L->st[i], &rc, drop);
    }
    layout_scratch(L, L->buf + per * L->d.slots, true);
    tr_status lst = tr_moe_lora_create(L);
    if (lst != TR_OK) {
        tr_moe_free(L);
        return lst;
    }
    tr_status xs = TR_OK;
    if (L->ep > 1) xs = tr_moe_allgather(L) ? tr_moe_ag_alloc(L) : tr_moe_ep_alloc(L);
    if (xs == TR_OK && L->etp > 1) xs = tr_moe_etp_alloc(L);
    if (xs != TR_OK) {
        tr_moe_free(L);
        return xs;
    }
    *out = L;
    return TR_OK;
}

void tr_moe_set_comm(tr_moe_layer *L, struct tr_comm *comm) {
    L->d.comm = comm;
}

void tr_moe_free(tr_moe_layer *L) {
    if (!L) return;
    tr_moe_buf_free(L, L->buf);
    tr_moe_buf_free(L, L->ibuf);
    free(L->st);
    free(L->p.fc1);
    tr_moe_lora_free(L);
    free(L->counts);
    free(L->aux_N);
    tr_moe_buf_free(L, L->ep_buf);
    tr_moe_buf_free(L, L->ep_ibuf);
    tr_moe_buf_free(L, L->etp_buf);
    tr_moe_buf_free(L, L->etp_ibuf);
    free(L);
}

tr_status tr_moe_forward(tr_moe_layer *L, int slot, const float *x, float *y, bool training,
                         uint64_t seed, uint64_t round) {
    if (slot < 0 || slot >= L->d.slots || !L->p.router ||
        ((L->ep > 1 || L->etp > 1 || L->d.sp > 1) && !L->d.comm))
        return TR_ERR_INVALID;
    tr_moe_state *st = &L->st[slot];
    int T = L->T, h = L->d.hidden, k = L->k;
    double t0 = now();
    tr_moe_lora_begin(L, slot, true, training, seed, round);
    memcpy(st->x, x, (size_t)T * h * sizeof(float));
    double lb, z;
    TR_TRY(tr_moe_route(L, st, training, seed, round, &lb, &z));
    double t1 = now();
    L->t_route += t1 - t0;
    if (training && !L->replay) { /* a recomputation's rerun counts nothing again */
        L->lb_sum += lb;
        L->z_sum += z;
        L->n_stats++;
    }
    /* permute: expert rows gathered from their tokens (padding rows zero); the allgather
     * dispatcher permutes the group's gathered tokens itself and writes y */
    bool ag = tr_moe_allgather(L);
    for (int r = 0; !ag && r < st->off[L->E]; r++) {
        float *dst = st->xp + (int64_t)r * h;
        int a = st->row_a[r];
        if (a < 0)
            memset(dst, 0, (size_t)h * sizeof(float));
        else
            memcpy(dst, st->x + (int64_t)(a / k) * h, (size_t)h * sizeof(float));
    }
    double t2 = now();
    tr_moe_rows rows = {L->E, st->off, st->xp, st->fc1, st->act, st->ye};
    L->rows_fwd += st->off[L->E];
    TR_TRY(ag          ? tr_moe_ag_fwd(L, st, y)
           : L->ep > 1 ? tr_moe_dispatch_fwd(L, st)
                       : tr_moe_local_fwd(L, st, &rows));
    double t3 = now();
    /* unpermute: each token sums its experts' outputs weighted by their probabilities */
    for (int t = 0; !ag && t < T; t++) {
        float *yt = y + (int64_t)t * h;
        memset(yt, 0, (size_t)h * sizeof(float));
        for (int j = 0; j < k; j++) {
            int a = t * k + j, r = st->pos[a];
            if (r < 0) continue;
            float p = st->prob[a];
            const float *ye = st->ye + (int64_t)r * h;
            for (int c = 0; c < h; c++) yt[c] += p * ye[c];
        }
    }
    double t4 = now();
    tr_status s = tr_moe_shared_fwd(L, st, y);
    L->t_perm += (t2 - t1) + (t4 - t3);
    L->t_experts += t3 - t2;
    L->t_shared += now() - t4;
    return s;
}

tr_status tr_moe_backward(tr_moe_layer *L, int slot, const float *dy, float *dx_out,
                          float loss_scale) {
    float *dx = L->d_out; /* dx_out may be dy */
    if (slot < 0 || slot >= L->d.slots) return TR_ERR_INVALID;
    tr_moe_state *st = &L->st[slot];
    int T = L->T, h = L->d.hidden, k = L->k, E = L->E;
    double t0 = now();
    tr_moe_lora_begin(L, slot, false, false, 0, 0);
    /* the combine: d prob = <dy, expert output>, d expert output = prob dy (the allgather
     * dispatcher's own on the gathered rows) */
    bool ag = tr_moe_allgather(L);
    for (int r = 0; !ag && r < st->off[E]; r++) {
        int a = st->row_a[r];
        float *d = L->d_rows + (int64_t)r * h;
        if (a < 0) {
            memset(d, 0, (size_t)h * sizeof(float));
            continue;
        }
        const float *g = dy + (int64_t)(a / k) * h;
        for (int c = 0; c < h; c++) d[c] = st->prob[a] * g[c];
    }
    for (int a = 0; !ag && a < T * k; a++) {
        int r = st->pos[a];
        double dot = 0.0;
        if (r >= 0) {
            const float *g = dy + (int64_t)(a / k) * h, *ye = st->ye + (int64_t)r * h;
            for (int c = 0; c < h; c++) dot += (double)g[c] * ye[c];
        }
        L->d_prob[a] = (float)dot;
    }
    double t1 = now();
    tr_moe_rows rows = {E, st->off, st->xp, st->fc1, st->act, st->ye};
    L->rows_bwd += st->off[E];
    TR_TRY(ag          ? tr_moe_ag_bwd(L, st, dy, dx)
           : L->ep > 1 ? tr_moe_dispatch_bwd(L, st)
                       : tr_moe_local_bwd(L, st, &rows, L->d_rows, L->d_x));
    double t2 = now();
    for (int t = 0; !ag && t < T; t++) {
        float *d = dx + (int64_t)t * h;
        memset(d, 0, (size_t)h * sizeof(float));
        for (int j = 0; j < k; j++) {
            int r = st->pos[t * k + j];
            if (r < 0) continue;
            const float *g = L->d_x + (int64_t)r * h;
            for (int c = 0; c < h; c++) d[c] += g[c];
        }
    }
    double t3 = now();
    TR_TRY(tr_moe_shared_bwd(L, st, dy, dx));
    double t4 = now();
    TR_TRY(tr_moe_route_bwd(L, st, loss_scale));
    /* the router: dW += dlogits^T xr, dx += (dlogits W) * noise */
    const float *xr = st->x;
    if (st->noise) {
        for (int64_t i = 0; i < (int64_t)T * h; i++) L->d_rows[i] = st->x[i] * st->noise[i];
        xr = L->d_rows;
    }
    bool lowp = L->s.router_lowp;
    if (L->g.router)
        TR_TRY(tr_moe_gemm(L, lowp, TR_TRANS, TR_NOTRANS, E, h, T, L->d_logits, E, xr, h, 1.0f,
                           L->g.router, h));
    if (!st->noise) {
        TR_TRY(tr_moe_gemm(L, lowp, TR_NOTRANS, TR_NOTRANS, T, h, E, L->d_logits, E, L->p.router, h,
                           1.0f, dx, h));
    } else {
        TR_TRY(tr_moe_gemm(L, lowp, TR_NOTRANS, TR_NOTRANS, T, h, E, L->d_logits, E, L->p.router, h,
                           0.0f, L->d_x, h));
        for (int64_t i = 0; i < (int64_t)T * h; i++) dx[i] += L->d_x[i] * st->noise[i];
    }
    memcpy(dx_out, dx, (size_t)T * h * sizeof(float));
    double t5 = now();
    L->t_perm += (t1 - t0) + (t3 - t2);
    L->t_experts += t2 - t1;
    L->t_shared += t4 - t3;
    L->t_route += t5 - t4;
    return TR_OK;
}

void tr_moe_take_stats(tr_moe_layer *L, double *lb, double *z, int *n) {
    *lb = L->lb_sum;
    *z = L->z_sum;
    *n = L->n_stats;
    L->lb_sum = L->z_sum = 0.0;
    L->n_stats = 0;
}

void tr_moe_timing(const tr_moe_layer *L, double *route, double *perm, double *experts,
                   double *shared) {
    *route = L->t_route;
    *perm = L->t_perm;
    *experts = L->t_experts;
    *shared = L->t_shared;
}

double *tr_moe_step_counts(tr_moe_layer *L) {
    return L->counts;
}

void tr_moe_rows_run(const tr_moe_layer *L, int64_t *fwd, int64_t *bwd) {
    *fwd = L->rows_fwd;
    *bwd = L->rows_bwd;
}

int tr_moe_experts(const tr_moe_layer *L) {
    return L->E;
}

void tr_moe_take_tokens(tr_moe_layer *L, double *out) {
    memcpy(out, L->seen, (size_t)L->E * sizeof(double));
    memset(L->seen, 0, (size_t)L->E * sizeof(double));
}

tr_status tr_moe_step_end(tr_moe_layer *L) {
    int E = L->E;
    if (L->s.expert_bias && L->p.bias) {
        double mean = 0.0;
        for (int e = 0; e < E; e++) mean += L->counts[e];
        mean /= E;
        for (int e = 0; e < E; e++) {
            double off = mean - L->counts[e];
            float sgn = off > 0 ? 1.0f : off < 0 ? -1.0f : 0.0f;
            L->p.bias[e] += sgn * L->s.bias_rate;
        }
    }
    memset(L->counts, 0, (size_t)E * sizeof(double));
    memset(L->ga_counts, 0, (size_t)E * sizeof(double));
    L->ga_steps = 0;
    return TR_OK;
}
