/* LoRA on an MoE layer (Megatron-Bridge's LoRA applied to MoE experts): every local expert's
 * linear_fc1 and linear_fc2, and the shared expert's, get their own adapter A [rank, in],
 * B [out, rank] under the name of the layer they adapt (<expert>.linear_fc1.adapter.linear_in
 * .weight ...), as each SequentialMLP expert is its own module. The router is not adapted. The
 * base tensors are frozen: the layer computes no gradient for them (their views in L->g are
 * NULL), only for the adapters.
 *
 * Dropout (peft.dropout, before the projection as the dense path's) draws its mask per logical
 * element from its own Philox key: an expert row is keyed by its assignment (token t, choice j)
 * and the global microbatch (the dropout round), a shared-expert row by its token, so every
 * data- and pipeline-parallel layout draws the single-rank run's masks. The backward recomputes
 * the dropped input rather than storing it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/moe/internal.h"

typedef struct tr_moe_lora tr_moe_lora;

struct tr_moe_lora {
    int r, sites; /* site: target * (El + 1) + expert, the shared expert at expert El */
    float scale, p;
    int64_t widest;             /* the widest adapter input: every row's counter span */
    float **a, **b, **da, **db; /* [sites]; NULL: no adapter there */
    float *xd, *u, *du;         /* scratch: dropped input (then its gradient), x A^T, its grad */
    uint64_t *rounds;           /* [slots] the dropout round each saved forward drew */
    bool *train;
    uint64_t seed, round;
    const int32_t *row_a; /* the current state's assignment of each expert row */
    bool drop;            /* the current forward or backward applies the dropout */
};

static bool adapted(const tr_moe_spec *s, int target) {
    return s->lora_rank > 0 && (target == TR_MOE_LORA_FC1 ? s->lora_fc1 : s->lora_fc2);
}

int tr_moe_lora_param_count(const tr_moe_spec *s) {
    int ep = s->ep_size > 1 ? s->ep_size : 1;
    int linears = s->experts / ep + (s->shared_ffn > 0 ? 1 : 0);
    return 2 * linears * (adapted(s, TR_MOE_LORA_FC1) + adapted(s, TR_MOE_LORA_FC2));
}

static tr_status add(tr_moe_param *out, int *at, const char *layer, int rank, int in, int lin_out) {
    static const char *const side[2] = {"linear_in", "linear_out"};
    for (int b = 0; b < 2; b++) {
        tr_moe_param *p = &out[(*at)++];
        memset(p, 0, sizeof *p);
        int len = snprintf(p->name, sizeof p->name, "%s.adapter.%s.weight", layer, side[b]);
        if (len < 0 || (size_t)len >= sizeof p->name) return TR_ERR_INVALID;
        p->rows = b ? lin_out : rank;
        p->cols = b ? rank : in;
        p->init = b ? TR_MOE_INIT_LORA_B : TR_MOE_INIT_LORA_A;
        p->adapter = true;
    }
    return TR_OK;
}

tr_status tr_moe_lora_params(const tr_moe_spec *s, const char *base, int hidden, bool swiglu,
                             tr_moe_param *out) {
    if (s->lora_rank <= 0) return TR_OK;
    int ep = s->ep_size > 1 ? s->ep_size : 1, local = s->experts / ep, at = 0;
    char layer[sizeof out->name];
    for (int i = 0; i <= local; i++) {
        bool shared = i == local;
        if (shared && s->shared_ffn <= 0) break;
        int ffn = shared ? s->shared_ffn : s->ffn, fc1 = swiglu ? 2 * ffn : ffn;
        for (int t = 0; t < 2; t++) {
            if (!adapted(s, t)) continue;
            const char *lin = t == TR_MOE_LORA_FC1 ? "linear_fc1" : "linear_fc2";
            int len = shared ? snprintf(layer, sizeof layer, "%s.mlp.shared_experts.%s", base, lin)
                             : snprintf(layer, sizeof layer, "%s.mlp.experts.local_experts.%d.%s",
                                        base, s->ep_rank * local + i, lin);
            if (len < 0 || (size_t)len >= sizeof layer) return TR_ERR_INVALID;
            TR_TRY(t == TR_MOE_LORA_FC1 ? add(out, &at, layer, s->lora_rank, hidden, fc1)
                                        : add(out, &at, layer, s->lora_rank, ffn, hidden));
        }
    }
    return TR_OK;
}

tr_status tr_moe_lora_create(tr_moe_layer *L) {
    const tr_moe_spec *s = &L->s;
    if (s->lora_rank <= 0) return TR_OK;
    /* The dropout keys name rows by their assignment on this rank; received rows (EP) have
     * none: runtime.moe_peft refuses LoRA with expert parallelism. */
    if (L->ep > 1) return TR_ERR_INVALID;
    tr_moe_lora *A = calloc(1, sizeof *A);
    if (!A) return TR_ERR_NOMEM;
    L->lora = A;
    A->r = s->lora_rank;
    A->scale = s->lora_scale;
    A->p = s->lora_dropout;
    A->sites = 2 * (L->El + 1);
    A->widest = L->d.hidden;
    if (s->ffn > A->widest) A->widest = s->ffn;
    if (s->shared_ffn > A->widest) A->widest = s->shared_ffn;
    int64_t rows = L->max_rows > L->T ? L->max_rows : L->T;
    A->a = calloc((size_t)A->sites * 4, sizeof *A->a);
    A->xd = malloc((size_t)(rows * (A->widest + 2 * A->r)) * sizeof(float));
    A->rounds = calloc((size_t)L->d.slots, sizeof *A->rounds);
    A->train = calloc((size_t)L->d.slots, sizeof *A->train);
    if (!A->a || !A->xd || !A->rounds || !A->train) return TR_ERR_NOMEM;
    A->b = A->a + A->sites;
    A->da = A->a + 2 * A->sites;
    A->db = A->a + 3 * A->sites;
    A->u = A->xd + rows * A->widest;
    A->du = A->u + rows * A->r;
    return TR_OK;
}

void tr_moe_lora_free(tr_moe_layer *L) {
    tr_moe_lora *A = L->lora;
    if (!A) return;
    free(A->a);
    free(A->xd);
    free(A->rounds);
    free(A->train);
    free(A);
    L->lora = NULL;
}

void tr_moe_lora_bind(tr_moe_layer *L, float *params, float *grads, const int64_t *offsets) {
    tr_moe_lora *A = L->lora;
    if (!A) return;
    int at = 0;
    for (int i = 0; i <= L->El; i++) {
        if (i == L->El && L->s.shared_ffn <= 0) break;
        for (int t = 0; t < 2; t++) {
            if (!adapted(&L->s, t)) continue;
            int site = t * (L->El + 1) + i;
            A->a[site] = params + offsets[at];
            A->da[site] = grads + offsets[at++];
            A->b[site] = params + offsets[at];
            A->db[site] = grads + offsets[at++];
        }
    }
}

void tr_moe_lora_begin(tr_moe_layer *L, int slot, bool forward, bool training, uint64_t seed,
                       uint64_t round) {
    tr_moe_lora *A = L->lora;
    if (!A) return;
    if (forward) {
        A->rounds[slot] = round;
        A->train[slot] = training;
        A->seed = seed;
    }
    A->round = A->rounds[slot];
    A->row_a = L->st[slot].row_a;
    A->drop = A->p > 0.0f && A->train[slot];
}

/* xd = the adapter's dropped input of the block's n rows (x itself without dropout). */
static const float *dropped(tr_moe_layer *L, int target, int e, int row0, const float *x, int n,
                            int in, bool forward, float *dst) {
    tr_moe_lora *A = L->lora;
    if (!A->drop) return x;
    /* Its own key per layer and per expert kind; a row's counters [id * 2 + target) * widest,
     * +widest) within the round's span. */
    uint64_t key =
        A->seed ^ 0x4D6F454C6F524144ull ^ (0xD1B54A32D192ED03ull * (uint64_t)(L->d.layer + 1));
    if (e < 0) key ^= 0x5348415245444558ull;
    uint64_t span = (uint64_t)(e < 0 ? L->T : L->T * L->k) + (uint64_t)L->max_rows;
    for (int i = 0; i < n; i++) {
        /* padding rows (no assignment) are zero: any counters past the assignments do */
        int64_t id = e < 0 ? row0 + i : A->row_a[row0 + i];
        if (id < 0) id = (int64_t)L->T * L->k + row0 + i;
        uint64_t off = ((A->round * span + (uint64_t)id) * 2 + (uint64_t)target) * A->widest;
        const float *xi = x + (int64_t)i * in;
        float *yi = dst + (int64_t)i * in;
        tr_status st = forward ? L->ops->dropout_fwd(yi, xi, in, A->p, key, off)
                               : L->ops->dropout_bwd(yi, xi, in, A->p, key, off);
        if (st != TR_OK) return NULL;
    }
    return dst;
}

/* Adapters run in fp32, as on dense layers (mixed precision rounds the base GEMMs only). */
static tr_status gemm(const tr_moe_layer *L, tr_transpose ta, tr_transpose tb, int m, int n, int k,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc) {
    return L->ops->gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

static int site_of(const tr_moe_layer *L, int target, int e) {
    return target * (L->El + 1) + (e < 0 ? L->El : e);
}

static void dims(const tr_moe_layer *L, int target, int e, int *in, int *out) {
    int ffn = e < 0 ? L->s.shared_ffn : L->s.ffn;
    int fc1 = e < 0 ? L->s_fc1_dim : L->fc1_dim;
    *in = target == TR_MOE_LORA_FC1 ? L->d.hidden : ffn;
    *out = target == TR_MOE_LORA_FC1 ? fc1 : L->d.hidden;
}

/* One adapted block: its site and shapes, the dropped input xd and u = scale xd A^T (into
 * the scratch); site -1 when the layer has no adapter there. */
typedef struct block {
    int site, in, out;
    const float *xd;
} block;

static tr_status low_rank(tr_moe_layer *L, int target, int e, int row0, const float *x, int n,
                          block *b) {
    tr_moe_lora *A = L->lora;
    b->site = -1;
    if (!A || n == 0 || !A->a[site_of(L, target, e)]) return TR_OK;
    b->site = site_of(L, target, e);
    dims(L, target, e, &b->in, &b->out);
    b->xd = dropped(L, target, e, row0, x, n, b->in, true, A->xd);
    if (!b->xd) return TR_ERR_INTERNAL;
    TR_TRY(gemm(L, TR_NOTRANS, TR_TRANS, n, A->r, b->in, b->xd, b->in, A->a[b->site], b->in, 0.0f,
                A->u, A->r));
    return L->ops->scale(A->u, (int64_t)n * A->r, A->scale);
}

tr_status tr_moe_lora_fwd(tr_moe_layer *L, int target, int e, int row0, const float *x, float *y,
                          int n) {
    block b;
    TR_TRY(low_rank(L, target, e, row0, x, n, &b));
    if (b.site < 0) return TR_OK;
    tr_moe_lora *A = L->lora;
    return gemm(L, TR_NOTRANS, TR_TRANS, n, b.out, A->r, A->u, A->r, A->b[b.site], A->r, 1.0f, y,
                b.out);
}

tr_status tr_moe_lora_bwd(tr_moe_layer *L, int target, int e, int row0, const float *x,
                          const float *dy, float *dx, int n) {
    block b;
    TR_TRY(low_rank(L, target, e, row0, x, n, &b));
    if (b.site < 0) return TR_OK;
    tr_moe_lora *A = L->lora;
    int s = b.site, in = b.in, out = b.out, r = A->r;
    const float *xd = b.xd;
    /* dB += dy^T u; du = scale dy B; dA += du^T drop(x) */
    TR_TRY(gemm(L, TR_TRANS, TR_NOTRANS, out, r, n, dy, out, A->u, r, 1.0f, A->db[s], r));
    TR_TRY(gemm(L, TR_NOTRANS, TR_NOTRANS, n, r, out, dy, out, A->b[s], r, 0.0f, A->du, r));
    TR_TRY(L->ops->scale(A->du, (int64_t)n * r, A->scale));
    TR_TRY(gemm(L, TR_TRANS, TR_NOTRANS, r, in, n, A->du, r, xd, in, 1.0f, A->da[s], in));
    if (!dx) return TR_OK;
    if (!A->drop)
        return gemm(L, TR_NOTRANS, TR_NOTRANS, n, in, r, A->du, r, A->a[s], in, 1.0f, dx, in);
    /* the dropped input's gradient, through the same mask, added to the base layer's */
    TR_TRY(gemm(L, TR_NOTRANS, TR_NOTRANS, n, in, r, A->du, r, A->a[s], in, 0.0f, A->xd, in));
    if (!dropped(L, target, e, row0, A->xd, n, in, false, A->xd)) return TR_ERR_INTERNAL;
    return L->ops->add(dx, A->xd, (int64_t)n * in);
}
