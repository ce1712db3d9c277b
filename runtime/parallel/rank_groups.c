/* Group membership from the layout alone. Enumeration follows Megatron's masked-orthogonal
 * construction (walk the group index over the unmasked axes); membership of one rank is
 * computed independently from its coordinates, so the two can check each other in tests. */
#include "runtime/parallel/rank_groups.h"

#include <stdlib.h>
#include <string.h>

enum { AX_TP, AX_CP, AX_EP, AX_DP, AX_PP, AX_N };
#define M(a) (1u << (a))

enum { SRC_DENSE, SRC_EXPERT, SRC_SPECIAL };

static const struct {
    const char *name;
    const char *doc;
    int src;
    unsigned mask; /* axes that vary inside a group */
} KINDS[TR_GROUP_COUNT] = {
    [TR_GROUP_TP] = {"tp", "tensor-parallel collectives", SRC_DENSE, M(AX_TP)},
    [TR_GROUP_PP] = {"pp", "pipeline send/recv between stages", SRC_DENSE, M(AX_PP)},
    [TR_GROUP_DP] = {"dp", "data sampling: ranks that read different samples", SRC_DENSE, M(AX_DP)},
    [TR_GROUP_CP] = {"cp", "context parallel: ring-attention KV exchange", SRC_DENSE, M(AX_CP)},
    [TR_GROUP_TP_CP] = {"tp-cp", "MoE aux-loss token-count reduction", SRC_DENSE,
                        M(AX_TP) | M(AX_CP)},
    [TR_GROUP_DP_CP] = {"dp-cp", "dense gradient reduction, distributed-optimizer shards",
                        SRC_DENSE, M(AX_DP) | M(AX_CP)},
    [TR_GROUP_TP_DP_CP] = {"tp-dp-cp", "FP8 amax and expert-bias token counts", SRC_DENSE,
                           M(AX_TP) | M(AX_DP) | M(AX_CP)},
    [TR_GROUP_TP_DP] = {"tp-dp", "tensor and data parallel", SRC_DENSE, M(AX_TP) | M(AX_DP)},
    [TR_GROUP_TP_PP] = {"tp-pp", "model parallel: grad norm without the distributed optimizer",
                        SRC_DENSE, M(AX_TP) | M(AX_PP)},
    [TR_GROUP_EP] = {"ep", "expert parallel: token all-to-all", SRC_EXPERT, M(AX_EP)},
    [TR_GROUP_EXPERT_TP] = {"expert-tp", "expert weight tensor parallel", SRC_EXPERT, M(AX_TP)},
    [TR_GROUP_EXPERT_DP] = {"expert-dp", "expert gradient reduction and shards", SRC_EXPERT,
                            M(AX_DP)},
    [TR_GROUP_TP_EP] = {"tp-ep", "expert TP x EP: the allgather MoE dispatcher", SRC_EXPERT,
                        M(AX_TP) | M(AX_EP)},
    [TR_GROUP_TP_EP_PP] = {"tp-ep-pp", "expert grad stats without the distributed optimizer",
                           SRC_EXPERT, M(AX_TP) | M(AX_EP) | M(AX_PP)},
    [TR_GROUP_EMBEDDING] = {"embedding", "first and last stage: shared word-embedding grads",
                            SRC_SPECIAL, 0},
    [TR_GROUP_POSITION_EMBEDDING] = {"position-embedding",
                                     "first stage: learned position-embedding grads", SRC_SPECIAL,
                                     0},
    [TR_GROUP_INTRA_DP_CP] = {"intra-dp-cp",
                              "dp-cp ranks inside one distributed-optimizer "
                              "instance",
                              SRC_SPECIAL, 0},
    [TR_GROUP_INTER_DP_CP] = {"inter-dp-cp",
                              "the same shard across distributed-optimizer "
                              "instances",
                              SRC_SPECIAL, 0},
    [TR_GROUP_INTRA_DIST_OPT] = {"intra-dist-opt",
                                 "grad norm / found-inf with the distributed "
                                 "optimizer (whole world with one instance)",
                                 SRC_SPECIAL, 0},
};

const char *tr_group_kind_name(tr_group_kind k) {
    return (unsigned)k < TR_GROUP_COUNT ? KINDS[k].name : "?";
}

const char *tr_group_kind_doc(tr_group_kind k) {
    return (unsigned)k < TR_GROUP_COUNT ? KINDS[k].doc : "?";
}

tr_status tr_group_kind_from_name(const char *name, tr_group_kind *out) {
    for (int k = 0; k < TR_GROUP_COUNT; k++) {
        if (strcmp(KINDS[k].name, name) == 0) {
            *out = (tr_group_kind)k;
            return TR_OK;
        }
    }
    return TR_ERR_NOTFOUND;
}

/* One of the two factorizations of the world, axes in order-string order. */
typedef struct grid {
    int axis[AX_N]; /* axis id at each position */
    int size[AX_N];
    int stride[AX_N];
} grid;

typedef struct layout {
    int world, dp, edp, pp, inst;
    grid dense, expert;
} layout;

static void grid_make(grid *g, bool pp_before_dp, const int by_axis[AX_N]) {
    static const int def[AX_N] = {AX_TP, AX_CP, AX_EP, AX_DP, AX_PP};
    static const int ppdp[AX_N] = {AX_TP, AX_CP, AX_EP, AX_PP, AX_DP};
    int stride = 1;
    for (int p = 0; p < AX_N; p++) {
        g->axis[p] = pp_before_dp ? ppdp[p] : def[p];
        g->size[p] = by_axis[g->axis[p]];
        g->stride[p] = stride;
        stride *= g->size[p];
    }
}

static tr_status layout_make(const tr_parallel_dims *d, layout *l) {
    if (tr_parallel_dims_check(d, NULL) != TR_OK) return TR_ERR_CONFIG;
    l->world = d->world;
    l->pp = d->pp;
    l->inst = d->dist_opt_instances;
    l->dp = d->world / (d->tp * d->cp * d->pp);
    l->edp = d->world / (d->etp * d->ep * d->pp);
    /* CP lives only on the dense grid and EP only on the expert grid. */
    int dense[AX_N] = {
        [AX_TP] = d->tp, [AX_CP] = d->cp, [AX_EP] = 1, [AX_DP] = l->dp, [AX_PP] = d->pp};
    int expert[AX_N] = {
        [AX_TP] = d->etp, [AX_CP] = 1, [AX_EP] = d->ep, [AX_DP] = l->edp, [AX_PP] = d->pp};
    grid_make(&l->dense, d->pp_before_dp, dense);
    grid_make(&l->expert, d->pp_before_dp, expert);
    return TR_OK;
}

static int masked_size(const grid *g, unsigned mask) {
    int n = 1;
    for (int p = 0; p < AX_N; p++)
        if (mask & M(g->axis[p])) n *= g->size[p];
    return n;
}

/* Megatron's construction: group index over the unmasked axes, member index over the masked
 * ones, each decomposed first axis fastest. */
static void ortho_enumerate(const grid *g, unsigned mask, int world, int *out) {
    int gsize = masked_size(g, mask), ngroups = world / gsize;
    for (int gi = 0; gi < ngroups; gi++) {
        int base = 0, rem = gi;
        for (int p = 0; p < AX_N; p++) {
            if (mask & M(g->axis[p])) continue;
            base += (rem % g->size[p]) * g->stride[p];
            rem /= g->size[p];
        }
        for (int ri = 0; ri < gsize; ri++) {
            int r = base;
            rem = ri;
            for (int p = 0; p < AX_N; p++) {
                if (!(mask & M(g->axis[p]))) continue;
                r += (rem % g->size[p]) * g->stride[p];
                rem /= g->size[p];
            }
            out[gi * gsize + ri] = r;
        }
    }
}

static int coord(const grid *g, int rank, int axis) {
    for (int p = 0; p < AX_N; p++)
        if (g->axis[p] == axis) return (rank / g->stride[p]) % g->size[p];
    return 0;
}

/* The same groups from one rank's coordinates: clear the masked coordinates, then walk them. */
static void ortho_member(const grid *g, unsigned mask, int rank, int *out, int *rank_in_group) {
    int base = rank, pos = 0, scale = 1;
    for (int p = 0; p < AX_N; p++) {
        if (!(mask & M(g->axis[p]))) continue;
        int idx = (rank / g->stride[p]) % g->size[p];
        base -= idx * g->stride[p];
        pos += idx * scale;
        scale *= g->size[p];
    }
    int gsize = masked_size(g, mask);
    for (int ri = 0; ri < gsize; ri++) {
        int r = base, rem = ri;
        for (int p = 0; p < AX_N; p++) {
            if (!(mask & M(g->axis[p]))) continue;
            r += (rem % g->size[p]) * g->stride[p];
            rem /= g->size[p];
        }
        out[ri] = r;
    }
    *rank_in_group = pos;
}

static const grid *grid_of(const layout *l, tr_group_kind k) {
    return KINDS[k].src == SRC_EXPERT ? &l->expert : &l->dense;
}

static void shape_of(const layout *l, tr_group_kind k, int *n_groups, int *group_size) {
    int dpcp = l->world / (l->pp * masked_size(&l->dense, M(AX_TP)));
    int size;
    switch (k) {
    case TR_GROUP_EMBEDDING:
        size = l->pp > 1 ? 2 : 1;
        break;
    case TR_GROUP_POSITION_EMBEDDING:
        size = 1;
        break;
    case TR_GROUP_INTRA_DP_CP:
        size = dpcp / l->inst;
        break;
    case TR_GROUP_INTER_DP_CP:
        size = l->inst;
        break;
    case TR_GROUP_INTRA_DIST_OPT:
        size = l->world / l->inst;
        break;
    default:
        size = masked_size(grid_of(l, k), KINDS[k].mask);
        break;
    }
    *group_size = size;
    /* Embedding groups take one group per pipeline; all other kinds tile the world. */
    *n_groups = (k == TR_GROUP_EMBEDDING || k == TR_GROUP_POSITION_EMBEDDING) ? l->world / l->pp
                                                                              : l->world / size;
}

tr_status tr_rank_groups_shape(const tr_parallel_dims *d, tr_group_kind k, int *n_groups,
                               int *group_size) {
    if ((unsigned)k >= TR_GROUP_COUNT) return TR_ERR_INVALID;
    layout l;
    TR_TRY(layout_make(d, &l));
    shape_of(&l, k, n_groups, group_size);
    return TR_OK;
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Kinds built from another kind's groups. `base` holds that kind's full enumeration. */
static tr_status special_enumerate(const layout *l, tr_group_kind k, int *out) {
    tr_group_kind from = (k == TR_GROUP_EMBEDDING || k == TR_GROUP_POSITION_EMBEDDING) ? TR_GROUP_PP
                         : k == TR_GROUP_INTRA_DIST_OPT ? TR_GROUP_TP_EP_PP
                                                        : TR_GROUP_DP_CP;
    int bn, bs;
    shape_of(l, from, &bn, &bs);
    int *base = malloc(sizeof(int) * (size_t)l->world);
    if (!base) return TR_ERR_NOMEM;
    ortho_enumerate(grid_of(l, from), KINDS[from].mask, l->world, base);

    int n, s;
    shape_of(l, k, &n, &s);
    switch (k) {
    case TR_GROUP_EMBEDDING:
    case TR_GROUP_POSITION_EMBEDDING:
        for (int g = 0; g < bn; g++) {
            out[g * s] = base[g * bs];
            if (s == 2) out[g * s + 1] = base[g * bs + bs - 1];
        }
        break;
    case TR_GROUP_INTRA_DP_CP: /* contiguous slices of each dp-cp group */
        for (int g = 0; g < bn; g++) memcpy(out + g * bs, base + g * bs, sizeof(int) * (size_t)bs);
        break;
    case TR_GROUP_INTER_DP_CP: /* every s_intra-th member of each dp-cp group */
    {
        int intra = bs / l->inst;
        for (int g = 0; g < bn; g++)
            for (int j = 0; j < intra; j++)
                for (int i = 0; i < l->inst; i++)
                    out[(g * intra + j) * s + i] = base[g * bs + i * intra + j];
        break;
    }
    default: /* TR_GROUP_INTRA_DIST_OPT: union of consecutive tp-ep-pp groups */
        memcpy(out, base, sizeof(int) * (size_t)l->world);
        for (int g = 0; g < n; g++) qsort(out + g * s, (size_t)s, sizeof(int), cmp_int);
        break;
    }
    free(base);
    return TR_OK;
}

tr_status tr_rank_groups_enumerate(const tr_parallel_dims *d, tr_group_kind k, int **ranks_out,
                                   int *n_groups, int *group_size) {
    *ranks_out = NULL;
    if ((unsigned)k >= TR_GROUP_COUNT) return TR_ERR_INVALID;
    layout l;
    TR_TRY(layout_make(d, &l));
    int n, s;
    shape_of(&l, k, &n, &s);
    int *out = malloc(sizeof(int) * (size_t)n * (size_t)s);
    if (!out) return TR_ERR_NOMEM;
    if (KINDS[k].src == SRC_SPECIAL) {
        tr_status st = special_enumerate(&l, k, out);
        if (st != TR_OK) {
            free(out);
            return st;
        }
    } else {
        ortho_enumerate(grid_of(&l, k), KINDS[k].mask, l.world, out);
    }
    *ranks_out = out;
    *n_groups = n;
    *group_size = s;
    return TR_OK;
}

static tr_status special_member(const layout *l, tr_group_kind k, int rank, int *members, int *n,
                                int *rank_in_group) {
    if (k == TR_GROUP_INTRA_DIST_OPT) {
        /* tp-ep-pp groups are indexed by the expert-DP coordinate alone. */
        int per = l->edp / l->inst, chunk = coord(&l->expert, rank, AX_DP) / per, c = 0;
        for (int r = 0; r < l->world; r++) {
            if (coord(&l->expert, r, AX_DP) / per != chunk) continue;
            if (r == rank) *rank_in_group = c;
            members[c++] = r;
        }
        *n = c;
        return TR_OK;
    }

    tr_group_kind from =
        k == TR_GROUP_EMBEDDING || k == TR_GROUP_POSITION_EMBEDDING ? TR_GROUP_PP : TR_GROUP_DP_CP;
    int bn, bs, pos;
    shape_of(l, from, &bn, &bs);
    int *base = malloc(sizeof(int) * (size_t)bs);
    if (!base) return TR_ERR_NOMEM;
    ortho_member(&l->dense, KINDS[from].mask, rank, base, &pos);

    *n = 0;
    *rank_in_group = -1;
    int intra = bs / l->inst;
    switch (k) {
    case TR_GROUP_EMBEDDING:
        if (pos == 0 || pos == bs - 1) {
            members[(*n)++] = base[0];
            if (bs > 1) members[(*n)++] = base[bs - 1];
            *rank_in_group = pos == 0 ? 0 : 1;
        }
        break;
    case TR_GROUP_POSITION_EMBEDDING:
        if (pos == 0) {
            members[(*n)++] = base[0];
            *rank_in_group = 0;
        }
        break;
    case TR_GROUP_INTRA_DP_CP:
        for (int j = 0; j < intra; j++) members[(*n)++] = base[(pos / intra) * intra + j];
        *rank_in_group = pos % intra;
        break;
    default: /* TR_GROUP_INTER_DP_CP */
        for (int i = 0; i < l->inst; i++) members[(*n)++] = base[i * intra + pos % intra];
        *rank_in_group = pos / intra;
        break;
    }
    free(base);
    return TR_OK;
}

tr_status tr_rank_group_of(const tr_parallel_dims *d, tr_group_kind k, int rank, int *members,
                           int cap, int *n, int *rank_in_group) {
    *n = 0;
    *rank_in_group = -1;
    if ((unsigned)k >= TR_GROUP_COUNT) return TR_ERR_INVALID;
    layout l;
    TR_TRY(layout_make(d, &l));
    if (rank < 0 || rank >= l.world) return TR_ERR_INVALID;
    int ng, s;
    shape_of(&l, k, &ng, &s);
    if (cap < s) return TR_ERR_INVALID;
    if (KINDS[k].src == SRC_SPECIAL) return special_member(&l, k, rank, members, n, rank_in_group);
    ortho_member(grid_of(&l, k), KINDS[k].mask, rank, members, rank_in_group);
    *n = s;
    return TR_OK;
}

tr_status tr_rank_groups_print(FILE *out, const tr_parallel_dims *d) {
    layout l;
    TR_TRY(layout_make(d, &l));
    tr_parallel_banner(out, d, 0);
    for (int k = 0; k < TR_GROUP_COUNT; k++) {
        int *r, n, s;
        TR_TRY(tr_rank_groups_enumerate(d, (tr_group_kind)k, &r, &n, &s));
        fprintf(out, "  %-18s %5d x %-5d", KINDS[k].name, n, s);
        for (int g = 0; g < n; g++) {
            fputs(" [", out);
            for (int i = 0; i < s; i++) fprintf(out, i ? ",%d" : "%d", r[g * s + i]);
            fputc(']', out);
        }
        fputc('\n', out);
        free(r);
    }
    return TR_OK;
}

void tr_parallel_banner(FILE *out, const tr_parallel_dims *d, int num_microbatches) {
    tr_parallel_dims x = *d;
    tr_parallel_dims_derive(&x);
    fprintf(out, "parallel layout: world %d = TP %d x CP %d x DP %d x PP %d", x.world, x.tp, x.cp,
            x.dp, x.pp);
    if (x.vpp > 1)
        fprintf(out, ", VPP %d", x.vpp);
    else
        fputs(", VPP none", out);
    fprintf(out, "; experts ETP %d x EP %d x expert DP %d x PP %d; order %s", x.etp, x.ep, x.edp,
            x.pp, tr_parallel_order_name(&x));
    if (x.dist_opt_instances > 1) fprintf(out, "; dist-opt instances %d", x.dist_opt_instances);
    if (num_microbatches > 0) fprintf(out, "; microbatches %d", num_microbatches);
    fputc('\n', out);
}
