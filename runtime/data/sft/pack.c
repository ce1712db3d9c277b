#include "runtime/data/sft/pack.h"

#include <stdlib.h>
#include <string.h>

void tr_sft_pack_options_from_config(const tr_dataset_config *dc, int64_t pad_id,
                                     tr_sft_pack_options *o) {
    o->seq_length = dc->packed_sequence_size != TR_NULL_INT ? dc->packed_sequence_size
                    : dc->seq_length != TR_NULL_INT         ? dc->seq_length
                                                            : 0;
    o->pad_seq_to_mult = dc->pad_seq_to_mult;
    o->pad_to_max_length = dc->pad_to_max_length;
    o->pad_cu_seqlens = dc->pad_cu_seqlens;
    o->pad_id = pad_id;
}

tr_status tr_sft_pack_check(const tr_sft_pack_options *o, tr_diags *diags) {
    tr_status s = TR_OK;
    if (o->seq_length <= 0)
        s = tr_diag_add(diags, TR_SEV_ERROR, "data.sft_seq_length", NULL, "dataset.seq_length",
                        "set dataset.seq_length to a positive token count",
                        "SFT samples need a positive seq_length (got %lld)",
                        (long long)o->seq_length);
    if (o->pad_seq_to_mult <= 0)
        s = tr_diag_add(diags, TR_SEV_ERROR, "data.sft_pad_mult", NULL, "dataset.pad_seq_to_mult",
                        "set dataset.pad_seq_to_mult to 1 or more",
                        "pad_seq_to_mult must be positive (got %lld)",
                        (long long)o->pad_seq_to_mult);
    else if (o->seq_length > 0 && o->seq_length % o->pad_seq_to_mult != 0)
        s = tr_diag_add(diags, TR_SEV_ERROR, "data.sft_pad_mult", NULL,
                        "dataset.pad_seq_to_mult,dataset.seq_length",
                        "make dataset.seq_length a multiple of dataset.pad_seq_to_mult",
                        "seq_length %lld is not a multiple of pad_seq_to_mult %lld, so a padded "
                        "example could not fill a pack exactly",
                        (long long)o->seq_length, (long long)o->pad_seq_to_mult);
    if (o->pad_cu_seqlens && !o->pad_to_max_length)
        s = tr_diag_add(diags, TR_SEV_ERROR, "data.sft_pad_cu_seqlens", NULL,
                        "dataset.pad_cu_seqlens,dataset.pad_to_max_length",
                        "set dataset.pad_to_max_length=true, or pad_cu_seqlens=false",
                        "pad_cu_seqlens needs pad_to_max_length: fixed-size boundaries only make "
                        "sense for fixed-size packs");
    return s;
}

/* Positions an example contributes: n-1, truncated to seq_length. */
static int64_t positions(const tr_sft_example *e, int64_t seq_length) {
    int64_t p = e->n - 1;
    return p > seq_length ? seq_length : p;
}

static int64_t round_up(int64_t x, int64_t m) {
    return (x + m - 1) / m * m;
}

/* ---- first fit through a max tree over the packs' free space ---- */

typedef struct fit_tree {
    int64_t *t;
    int64_t leaves;
} fit_tree;

static tr_status tree_init(fit_tree *f, int64_t n, int64_t cap) {
    f->leaves = 1;
    while (f->leaves < n) f->leaves *= 2;
    f->t = malloc((size_t)(2 * f->leaves) * sizeof *f->t);
    if (!f->t) return TR_ERR_NOMEM;
    for (int64_t i = 0; i < 2 * f->leaves; i++) f->t[i] = cap;
    return TR_OK;
}

/* Leftmost pack with at least need free (unopened packs are all free, so one always exists). */
static int64_t tree_first_fit(const fit_tree *f, int64_t need) {
    int64_t i = 1;
    while (i < f->leaves) i = f->t[2 * i] >= need ? 2 * i : 2 * i + 1;
    return i - f->leaves;
}

static void tree_take(fit_tree *f, int64_t leaf, int64_t amount) {
    int64_t i = leaf + f->leaves;
    f->t[i] -= amount;
    for (i /= 2; i >= 1; i /= 2)
        f->t[i] = f->t[2 * i] > f->t[2 * i + 1] ? f->t[2 * i] : f->t[2 * i + 1];
}

typedef struct sort_item {
    int64_t len, index;
} sort_item;

static int by_length_desc(const void *a, const void *b) {
    const sort_item *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Lays out the examples listed in members into sample s. */
static tr_status fill_sample(tr_sft_sample *s, const tr_sft_examples *ex, const int64_t *members,
                             int64_t n_members, const tr_sft_pack_options *o, int64_t cu_len) {
    int64_t total = 0;
    for (int64_t k = 0; k < n_members; k++)
        total += round_up(positions(&ex->v[members[k]], o->seq_length), o->pad_seq_to_mult);
    int64_t n = o->pad_to_max_length ? o->seq_length : total;
    bool tail = n > total;
    int64_t segs = n_members + (tail ? 1 : 0);
    if (cu_len < segs + 1) cu_len = segs + 1;
    s->n = n;
    s->tokens = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    s->labels = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    s->position_ids = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    s->loss_mask = malloc((size_t)(n ? n : 1) * sizeof(float));
    s->cu_seqlens = malloc((size_t)cu_len * sizeof(int64_t));
    s->cu_seqlens_unpadded = malloc((size_t)cu_len * sizeof(int64_t));
    s->examples = malloc((size_t)(n_members ? n_members : 1) * sizeof(int64_t));
    if (!s->tokens || !s->labels || !s->position_ids || !s->loss_mask || !s->cu_seqlens ||
        !s->cu_seqlens_unpadded || !s->examples)
        return TR_ERR_NOMEM;
    s->n_examples = n_members;
    s->n_seqs = cu_len - 1;
    int64_t t = 0, seg = 0;
    s->cu_seqlens[0] = s->cu_seqlens_unpadded[0] = 0;
    for (int64_t k = 0; k < n_members; k++) {
        const tr_sft_example *e = &ex->v[members[k]];
        s->examples[k] = members[k];
        int64_t p = positions(e, o->seq_length), padded = round_up(p, o->pad_seq_to_mult);
        for (int64_t i = 0; i < padded; i++, t++) {
            bool real = i < p;
            s->tokens[t] = real ? e->ids[i] : o->pad_id;
            s->labels[t] = real ? e->ids[i + 1] : o->pad_id;
            s->loss_mask[t] = real && e->target[i + 1] ? 1.0f : 0.0f;
            s->position_ids[t] = i;
        }
        s->cu_seqlens_unpadded[seg + 1] = t - padded + p;
        s->cu_seqlens[++seg] = t;
    }
    for (int64_t i = 0; t < n; i++, t++) {
        s->tokens[t] = s->labels[t] = o->pad_id;
        s->loss_mask[t] = 0.0f;
        s->position_ids[t] = i;
    }
    if (tail) {
        seg++;
        s->cu_seqlens[seg] = s->cu_seqlens_unpadded[seg] = n;
    }
    for (int64_t k = seg + 1; k < cu_len; k++) {
        s->cu_seqlens[k] = s->cu_seqlens[seg];
        s->cu_seqlens_unpadded[k] = s->cu_seqlens_unpadded[seg];
    }
    return TR_OK;
}

static tr_status make_samples(const tr_sft_examples *ex, const tr_sft_pack_options *o,
                              int64_t *pack_of, int64_t n_packs, tr_sft_samples *out) {
    out->v = calloc((size_t)(n_packs ? n_packs : 1), sizeof *out->v);
    int64_t *count = calloc((size_t)(n_packs ? n_packs : 1), sizeof *count);
    int64_t *members = malloc((size_t)(ex->n ? ex->n : 1) * sizeof *members);
    int64_t *start = calloc((size_t)(n_packs + 1), sizeof *start);
    tr_status s = out->v && count && members && start ? TR_OK : TR_ERR_NOMEM;
    int64_t max_members = 0;
    if (s == TR_OK) {
        for (int64_t i = 0; i < ex->n; i++)
            if (pack_of[i] >= 0) count[pack_of[i]]++;
        for (int64_t p = 0; p < n_packs; p++) {
            start[p + 1] = start[p] + count[p];
            if (count[p] > max_members) max_members = count[p];
            count[p] = 0;
        }
        /* A pack lists its examples in file order. */
        for (int64_t i = 0; i < ex->n; i++)
            if (pack_of[i] >= 0) members[start[pack_of[i]] + count[pack_of[i]]++] = i;
        out->n = n_packs;
    }
    /* Fixed boundary count: every example segment plus a padding tail, plus the leading 0. */
    int64_t cu_len = o->pad_cu_seqlens ? max_members + 2 : 0;
    for (int64_t p = 0; s == TR_OK && p < n_packs; p++)
        s = fill_sample(&out->v[p], ex, members + start[p], start[p + 1] - start[p], o, cu_len);
    free(count);
    free(members);
    free(start);
    if (s != TR_OK) tr_sft_samples_free(out);
    return s;
}

tr_status tr_sft_pack(const tr_sft_examples *ex, const tr_sft_pack_options *o, tr_sft_samples *out,
                      tr_diags *diags) {
    memset(out, 0, sizeof *out);
    TR_TRY(tr_sft_pack_check(o, diags));
    sort_item *items = malloc((size_t)(ex->n ? ex->n : 1) * sizeof *items);
    int64_t *pack_of = malloc((size_t)(ex->n ? ex->n : 1) * sizeof *pack_of);
    fit_tree tree = {0};
    tr_status s =
        items && pack_of ? tree_init(&tree, ex->n ? ex->n : 1, o->seq_length) : TR_ERR_NOMEM;
    int64_t n_items = 0, n_packs = 0;
    if (s == TR_OK) {
        for (int64_t i = 0; i < ex->n; i++) {
            pack_of[i] = -1;
            if (ex->v[i].n >= 2)
                items[n_items++] = (sort_item){
                    round_up(positions(&ex->v[i], o->seq_length), o->pad_seq_to_mult), i};
        }
        qsort(items, (size_t)n_items, sizeof *items, by_length_desc);
        for (int64_t k = 0; k < n_items; k++) {
            int64_t p = tree_first_fit(&tree, items[k].len);
            tree_take(&tree, p, items[k].len);
            pack_of[items[k].index] = p;
            if (p + 1 > n_packs) n_packs = p + 1;
        }
        s = make_samples(ex, o, pack_of, n_packs, out);
    }
    free(items);
    free(pack_of);
    free(tree.t);
    return s;
}

tr_status tr_sft_unpacked(const tr_sft_examples *ex, const tr_sft_pack_options *o,
                          tr_sft_samples *out, tr_diags *diags) {
    memset(out, 0, sizeof *out);
    TR_TRY(tr_sft_pack_check(o, diags));
    int64_t *pack_of = malloc((size_t)(ex->n ? ex->n : 1) * sizeof *pack_of);
    if (!pack_of) return TR_ERR_NOMEM;
    int64_t n = 0;
    for (int64_t i = 0; i < ex->n; i++) pack_of[i] = ex->v[i].n >= 2 ? n++ : -1;
    tr_status s = make_samples(ex, o, pack_of, n, out);
    free(pack_of);
    return s;
}

void tr_sft_samples_free(tr_sft_samples *s) {
    for (int64_t i = 0; s->v && i < s->n; i++) {
        tr_sft_sample *x = &s->v[i];
        free(x->tokens);
        free(x->labels);
        free(x->position_ids);
        free(x->loss_mask);
        free(x->cu_seqlens);
        free(x->cu_seqlens_unpadded);
        free(x->examples);
    }
    free(s->v);
    memset(s, 0, sizeof *s);
}

void tr_sft_doc_start(const tr_sft_sample *s, int32_t *doc_start) {
    for (int64_t k = 0; k < s->n_seqs; k++)
        for (int64_t t = s->cu_seqlens[k]; t < s->cu_seqlens[k + 1]; t++)
            doc_start[t] = (int32_t)s->cu_seqlens[k];
}
