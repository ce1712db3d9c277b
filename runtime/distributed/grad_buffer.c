/* Bucket and shard layout of the flat buffers (Megatron's param_and_grad_buffer rules). */
#include "runtime/distributed/grad_buffer.h"

#include <stdlib.h>
#include <string.h>

#define TR_DEFAULT_PARAM_ALIGN  64
#define TR_DEFAULT_BUCKET_ALIGN 128

static int64_t round_up(int64_t x, int64_t m) {
    return m <= 1 ? x : (x + m - 1) / m * m;
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int64_t lcm64(int64_t a, int64_t b) {
    return a / gcd64(a, b) * b;
}

tr_grad_layout_options tr_grad_layout_defaults(int dp_size, int64_t bucket_size, bool sharded) {
    tr_grad_layout_options o = {.dp_size = dp_size,
                                .bucket_size = bucket_size,
                                .sharded = sharded,
                                .param_align = TR_DEFAULT_PARAM_ALIGN,
                                .bucket_align = TR_DEFAULT_BUCKET_ALIGN};
    return o;
}

static tr_status check_input(const tr_grad_param *params, int n_params,
                             const tr_grad_layout_options *opt, tr_diags *diags) {
    if (!opt || opt->dp_size < 1)
        return tr_diag_add(diags, TR_SEV_ERROR, "ddp.layout", NULL, "ddp", NULL,
                           "gradient buffer layout needs a data-parallel size >= 1, got %d",
                           opt ? opt->dp_size : 0);
    if (opt->param_align < 0 || opt->bucket_align < 0)
        return tr_diag_add(diags, TR_SEV_ERROR, "ddp.layout", NULL, "ddp", NULL,
                           "gradient buffer alignments must be >= 0 (got param %lld, bucket %lld)",
                           (long long)opt->param_align, (long long)opt->bucket_align);
    if (!params || n_params < 1)
        return tr_diag_add(diags, TR_SEV_ERROR, "ddp.layout", NULL, "ddp",
                           "describe every trainable parameter before building the layout",
                           "gradient buffer layout has no parameters");
    for (int i = 0; i < n_params; i++)
        if (params[i].numel < 1)
            return tr_diag_add(diags, TR_SEV_ERROR, "ddp.layout", NULL, "ddp",
                               "leave empty parameters out of the gradient buffer",
                               "parameter %d ('%s') has %lld elements; every parameter needs at "
                               "least one",
                               i, params[i].name, (long long)params[i].numel);
    return TR_OK;
}

/* Closes the bucket [start, end): pads its end when sharded and records it. */
static int64_t close_bucket(tr_grad_layout *L, int64_t start, int64_t end, int first, int last,
                            int64_t bucket_mult) {
    int64_t padded = L->opt.sharded ? round_up(end, bucket_mult) : end;
    tr_grad_bucket *b = &L->buckets[L->n_buckets++];
    b->offset = start;
    b->numel = padded - start;
    b->first_param = first;
    b->last_param = last;
    b->shard_numel = L->opt.sharded ? b->numel / L->opt.dp_size : b->numel;
    return padded;
}

tr_status tr_grad_layout_build(tr_grad_layout *L, const tr_grad_param *params, int n_params,
                               const tr_grad_layout_options *opt, tr_diags *diags) {
    memset(L, 0, sizeof *L);
    TR_TRY(check_input(params, n_params, opt, diags));
    L->opt = *opt;
    if (L->opt.param_align == 0) L->opt.param_align = TR_DEFAULT_PARAM_ALIGN;
    if (L->opt.bucket_align == 0) L->opt.bucket_align = TR_DEFAULT_BUCKET_ALIGN;
    L->params = calloc((size_t)n_params, sizeof *L->params);
    L->buckets = calloc((size_t)n_params, sizeof *L->buckets); /* at most one per parameter */
    if (!L->params || !L->buckets) {
        tr_grad_layout_free(L);
        return TR_ERR_NOMEM;
    }
    L->n_params = n_params;
    /* Every bucket start is a multiple of bucket_mult, which is a multiple of the parameter
     * alignment used by Megatron (128 vs 64), so the first parameter of a bucket needs no pad. */
    int64_t bucket_mult = lcm64(opt->dp_size, L->opt.bucket_align);
    int64_t param_align = L->opt.sharded ? L->opt.param_align : 1;
    int64_t bucket_start = 0, end = 0;
    int bucket_last = n_params - 1; /* the highest-index parameter of the open bucket */
    bool open = false;
    for (int i = n_params - 1; i >= 0; i--) {
        const tr_grad_param *p = &params[i];
        if (p->own_bucket && open) {
            bucket_start = close_bucket(L, bucket_start, end, i + 1, bucket_last, bucket_mult);
            end = bucket_start;
            open = false;
        }
        if (!open) bucket_last = i;
        open = true;
        int64_t start = round_up(end, param_align);
        L->params[i].param = *p;
        L->params[i].offset = start;
        L->params[i].bucket = L->n_buckets;
        end = start + p->numel;
        bool full = opt->bucket_size > 0 && end - bucket_start >= opt->bucket_size;
        if (full || p->own_bucket || i == 0) {
            bucket_start = close_bucket(L, bucket_start, end, i, bucket_last, bucket_mult);
            end = bucket_start;
            open = false;
        }
        L->param_numel += p->numel;
    }
    L->numel = bucket_start;
    return TR_OK;
}

void tr_grad_layout_free(tr_grad_layout *L) {
    if (!L) return;
    free(L->params);
    free(L->buckets);
    memset(L, 0, sizeof *L);
}

int64_t tr_grad_bucket_shard_offset(const tr_grad_layout *L, int b, int rank) {
    const tr_grad_bucket *bk = &L->buckets[b];
    return L->opt.sharded ? bk->offset + (int64_t)rank * bk->shard_numel : bk->offset;
}

/* Appends the intersection of [lo, hi) with parameter p, if any. */
static void add_range(tr_grad_owned *o, const tr_grad_layout *L, int p, int64_t lo, int64_t hi,
                      int64_t state_base, int64_t slice_lo) {
    const tr_grad_slot *s = &L->params[p];
    int64_t a = s->offset > lo ? s->offset : lo;
    int64_t e = s->offset + s->param.numel < hi ? s->offset + s->param.numel : hi;
    if (a >= e) return;
    tr_grad_range *r = &o->ranges[o->n_ranges++];
    r->param = p;
    r->bucket = s->bucket;
    r->offset = a;
    r->numel = e - a;
    r->param_offset = a - s->offset;
    r->state_offset = state_base + (a - slice_lo);
}

tr_status tr_grad_owned_build(tr_grad_owned *o, const tr_grad_layout *L, int rank) {
    memset(o, 0, sizeof *o);
    if (rank < 0 || rank >= L->opt.dp_size) return TR_ERR_INVALID;
    o->rank = rank;
    /* A slice can cut a parameter at most at its two ends, so each parameter yields at most one
     * range per rank: n_params ranges suffice. */
    o->ranges = calloc((size_t)L->n_params, sizeof *o->ranges);
    o->bucket_state = calloc((size_t)L->n_buckets, sizeof *o->bucket_state);
    if (!o->ranges || !o->bucket_state) {
        tr_grad_owned_free(o);
        return TR_ERR_NOMEM;
    }
    int64_t state = 0;
    for (int b = 0; b < L->n_buckets; b++) {
        const tr_grad_bucket *bk = &L->buckets[b];
        int64_t lo = tr_grad_bucket_shard_offset(L, b, rank), hi = lo + bk->shard_numel;
        o->bucket_state[b] = state;
        for (int p = bk->last_param; p >= bk->first_param; p--)
            add_range(o, L, p, lo, hi, state, lo);
        state += bk->shard_numel;
    }
    o->state_numel = state;
    return TR_OK;
}

void tr_grad_owned_free(tr_grad_owned *o) {
    if (!o) return;
    free(o->ranges);
    free(o->bucket_state);
    memset(o, 0, sizeof *o);
}
