#include "runtime/data/datasets/gpt_dataset.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "runtime/data/datasets/mock.h"
#include "runtime/data/datasets/mt19937.h"

const char *tr_split_name(int split) {
    static const char *const names[] = {"train", "valid", "test"};
    return split >= 0 && split < TR_N_SPLITS ? names[split] : "?";
}

static uint64_t hash_lengths(const tr_gpt_lowlevel *ll, int dtype) {
    XXH3_state_t *st = XXH3_createState();
    if (!st) return 0;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, &dtype, sizeof dtype);
    XXH3_64bits_update(st, &ll->n, sizeof ll->n);
    XXH3_64bits_update(st, ll->lengths, (size_t)ll->n * sizeof *ll->lengths);
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

tr_status tr_gpt_lowlevel_open(tr_gpt_lowlevel *ll, const char *prefix, tr_diags *diags) {
    memset(ll, 0, sizeof *ll);
    TR_TRY(tr_indexed_open(&ll->indexed, prefix, diags));
    ll->n = (int64_t)tr_indexed_n_sequences(&ll->indexed);
    ll->lengths = malloc((size_t)(ll->n ? ll->n : 1) * sizeof *ll->lengths);
    ll->name = strdup(prefix);
    if (!ll->lengths || !ll->name) {
        tr_gpt_lowlevel_close(ll);
        return TR_ERR_NOMEM;
    }
    for (int64_t i = 0; i < ll->n; i++)
        ll->lengths[i] = tr_idx_length(&ll->indexed.idx, (uint64_t)i);
    ll->identity = hash_lengths(ll, ll->indexed.idx.dtype);
    return TR_OK;
}

tr_status tr_gpt_lowlevel_mock(tr_gpt_lowlevel *ll, int64_t vocab_size, int64_t eod,
                               tr_diags *diags) {
    memset(ll, 0, sizeof *ll);
    if (vocab_size < 2 || eod < 0 || eod >= vocab_size)
        return tr_diag_add(
            diags, TR_SEV_ERROR, "data.mock_vocab", NULL, "tokenizer.vocab_size",
            "set a tokenizer (or tokenizer.vocab_size for the null tokenizer) with an "
            "end-of-document id inside the vocabulary",
            "mock data needs a vocabulary of at least 2 ids and an end-of-document "
            "id below it (got vocab %lld, eod %lld)",
            (long long)vocab_size, (long long)eod);
    ll->is_mock = true;
    ll->n = TR_MOCK_DOCUMENTS;
    ll->mock_vocab = vocab_size;
    ll->mock_eod = eod;
    ll->lengths = malloc(TR_MOCK_DOCUMENTS * sizeof *ll->lengths);
    ll->name = strdup("mock");
    if (!ll->lengths || !ll->name) {
        tr_gpt_lowlevel_close(ll);
        return TR_ERR_NOMEM;
    }
    tr_mock_lengths(ll->lengths);
    ll->identity = hash_lengths(ll, -1);
    return TR_OK;
}

void tr_gpt_lowlevel_close(tr_gpt_lowlevel *ll) {
    if (!ll->is_mock) tr_indexed_close(&ll->indexed);
    free(ll->lengths);
    free(ll->name);
    memset(ll, 0, sizeof *ll);
}

tr_status tr_gpt_lowlevel_read(const tr_gpt_lowlevel *ll, int64_t i, int64_t offset, int64_t count,
                               int64_t *out) {
    if (i < 0 || i >= ll->n || offset < 0 || count < 0 || offset + count > ll->lengths[i])
        return TR_ERR_INVALID;
    if (ll->is_mock) {
        tr_mock_tokens(ll->lengths[i], ll->mock_vocab, ll->mock_eod, offset, count, out);
        return TR_OK;
    }
    return tr_indexed_read(&ll->indexed, (uint64_t)i, (uint64_t)offset, (uint64_t)count, out);
}

/* ---- split ---- */

tr_status tr_split_parse(const char *split, double bounds[TR_N_SPLITS][2],
                         bool present[TR_N_SPLITS], tr_diags *diags) {
    double w[TR_N_SPLITS] = {0, 0, 0};
    int n = 0;
    const char *p = split;
    bool bad = false;
    /* Megatron reads every run of digits and dots as a number and ignores the rest. */
    while (*p) {
        if ((*p >= '0' && *p <= '9') || *p == '.') {
            const char *start = p;
            while ((*p >= '0' && *p <= '9') || *p == '.') p++;
            char buf[64];
            size_t len = (size_t)(p - start);
            if (len >= sizeof buf || n >= TR_N_SPLITS) {
                bad = true;
                break;
            }
            memcpy(buf, start, len);
            buf[len] = 0;
            char *end;
            w[n++] = strtod(buf, &end);
            if (*end) bad = true;
        } else {
            p++;
        }
    }
    double sum = w[0] + w[1] + w[2];
    if (bad || n == 0 || !(sum > 0))
        return tr_diag_add(diags, TR_SEV_ERROR, "data.split_syntax", NULL, "dataset.split",
                           "write up to three non-negative proportions with a positive sum, "
                           "e.g. dataset.split=969,30,1",
                           "dataset.split \"%s\" is not a train,valid,test proportion list", split);
    double e[TR_N_SPLITS + 1] = {0};
    for (int i = 0; i < TR_N_SPLITS; i++) e[i + 1] = e[i] + w[i] / sum;
    for (int i = 0; i < TR_N_SPLITS; i++) {
        bounds[i][0] = e[i];
        bounds[i][1] = e[i + 1];
        present[i] = e[i + 1] > e[i];
    }
    return TR_OK;
}

void tr_split_range(const double bounds[2], int64_t n, int64_t *beg, int64_t *end) {
    *beg = (int64_t)nearbyint(bounds[0] * (double)n);
    *end = (int64_t)nearbyint(bounds[1] * (double)n);
}

/* ---- index construction (megatron/core/datasets/gpt_dataset.py, helpers.cpp) ---- */

static int32_t *build_document_index(int64_t beg, int64_t end, int64_t epochs, tr_mt19937 *rng,
                                     bool separate_final_epoch) {
    int64_t docs = end - beg, total = docs * epochs;
    int32_t *idx = malloc((size_t)(total ? total : 1) * sizeof *idx);
    if (!idx) return NULL;
    for (int64_t e = 0; e < epochs; e++)
        for (int64_t d = 0; d < docs; d++) idx[e * docs + d] = (int32_t)(beg + d);
    if (!separate_final_epoch || epochs == 1) {
        tr_mt19937_shuffle_i32(rng, idx, (size_t)total);
    } else {
        tr_mt19937_shuffle_i32(rng, idx, (size_t)(total - docs));
        tr_mt19937_shuffle_i32(rng, idx + (total - docs), (size_t)docs);
    }
    return idx;
}

static int64_t *build_sample_index(const int32_t *sizes, const int32_t *doc_idx, int64_t n_doc,
                                   int64_t seq_length, int64_t epochs, int64_t tokens_per_epoch,
                                   bool drop_last, int64_t extra, int64_t *n_samples) {
    int64_t num;
    if (drop_last)
        num = (epochs * tokens_per_epoch - extra) / seq_length;
    else /* helpers.cpp divides in single precision; so do we, to get the same count */
        num = (int64_t)ceilf((float)(epochs * tokens_per_epoch - extra) / (float)seq_length);
    int64_t *s = malloc((size_t)(2 * (num + 1)) * sizeof *s);
    if (!s) return NULL;
    int64_t row = 0, di = 0, off = 0;
    s[0] = 0;
    s[1] = 0;
    row = 1;
    while (row <= num) {
        int64_t remaining = seq_length + extra;
        while (remaining != 0) {
            int64_t doc_len = sizes[doc_idx[di]] - off;
            remaining -= doc_len;
            if (remaining <= 0) {
                off += remaining + doc_len - extra;
                remaining = 0;
            } else {
                if (di == n_doc - 1) {
                    off = sizes[doc_idx[di]] - extra;
                    break;
                }
                di++;
                off = 0;
            }
        }
        s[2 * row] = di;
        s[2 * row + 1] = off;
        row++;
    }
    *n_samples = num;
    return s;
}

static int64_t *build_shuffle_index(int64_t first, int64_t total, tr_mt19937 *rng) {
    int64_t *s = malloc((size_t)(total ? total : 1) * sizeof *s);
    if (!s) return NULL;
    for (int64_t i = 0; i < total; i++) s[i] = i;
    tr_mt19937_shuffle_i64(rng, s, (size_t)first);
    if (first < total) tr_mt19937_shuffle_i64(rng, s + first, (size_t)(total - first));
    return s;
}

static tr_status build_indices(tr_gpt_dataset *d, tr_diags *diags) {
    const tr_gpt_params *p = &d->params;
    int64_t T = 0;
    for (int64_t i = d->beg; i < d->end; i++) T += d->low->lengths[i];
    int64_t L = p->seq_length, extra = p->add_extra_token;
    if (T <= extra || L < 2)
        return tr_diag_add(diags, TR_SEV_ERROR, "data.split_too_small", NULL,
                           "dataset.split,dataset.seq_length",
                           "give this split more documents (dataset.split) or more data",
                           "the %s split of %s holds %lld tokens (documents %lld..%lld), too few "
                           "to build samples of %lld tokens",
                           tr_split_name(d->split), d->low->name, (long long)T, (long long)d->beg,
                           (long long)d->end, (long long)L);
    int64_t epochs = 1;
    if (d->num_samples >= 0) {
        int64_t want = d->num_samples * L + extra;
        for (int64_t have = T; have < want; have += T) epochs++;
    }
    bool separate = false;
    int64_t n_sans = 0;
    if (epochs > 1) {
        n_sans = ((epochs - 1) * T - extra) / L;
        int64_t n_final = d->num_samples - n_sans, per_epoch = (T - extra) / L;
        separate = n_final < (int64_t)(0.80 * (double)per_epoch);
    }
    tr_mt19937 rng;
    tr_mt19937_seed(&rng, p->seed);
    d->num_epochs = epochs;
    d->separate_final_epoch = separate;
    d->n_document = (d->end - d->beg) * epochs;
    d->document_index = build_document_index(d->beg, d->end, epochs, &rng, separate);
    if (!d->document_index) return TR_ERR_NOMEM;
    bool drop_last = d->split == TR_SPLIT_VALID ? p->drop_last_partial_validation : true;
    int64_t n = 0;
    d->sample_index = build_sample_index(d->low->lengths, d->document_index, d->n_document, L,
                                         epochs, T, drop_last, extra, &n);
    if (!d->sample_index) return TR_ERR_NOMEM;
    d->n_sample_rows = n + 1;
    d->n_samples = n;
    d->shuffle_index = build_shuffle_index(separate ? n_sans : n, n, &rng);
    return d->shuffle_index ? TR_OK : TR_ERR_NOMEM;
}

static uint64_t dataset_key(const tr_gpt_dataset *d) {
    const tr_gpt_params *p = &d->params;
    bool drop_last = d->split == TR_SPLIT_VALID ? p->drop_last_partial_validation : true;
    char desc[512];
    snprintf(desc, sizeof desc,
             "trestle GPTDataset indices v1\ndata %016llx\nsplit %s\ndocuments %lld %lld\n"
             "num_samples %lld\nseed %u\nseq_length %lld\nadd_extra_token %d\ndrop_last %d\n",
             (unsigned long long)d->low->identity, tr_split_name(d->split), (long long)d->beg,
             (long long)d->end, (long long)d->num_samples, p->seed, (long long)p->seq_length,
             p->add_extra_token, drop_last);
    return tr_index_cache_key(desc);
}

tr_status tr_gpt_dataset_build(tr_gpt_dataset *d, const tr_gpt_lowlevel *low, int split,
                               int64_t beg, int64_t end, int64_t num_samples,
                               const tr_gpt_params *params, const char *cache_dir,
                               tr_index_cache_mode mode, tr_diags *diags) {
    memset(d, 0, sizeof *d);
    d->low = low;
    d->split = split;
    d->beg = beg;
    d->end = end;
    d->num_samples = num_samples;
    d->params = *params;
    d->key = dataset_key(d);
    if (beg < 0 || end > low->n || beg > end) return TR_ERR_INTERNAL;
    int64_t n_shuffle = 0;
    tr_cache_array arrays[3] = {
        {(void **)&d->document_index, &d->n_document, sizeof *d->document_index},
        {(void **)&d->sample_index, &d->n_sample_rows, 2 * sizeof *d->sample_index},
        {(void **)&d->shuffle_index, &n_shuffle, sizeof *d->shuffle_index},
    };
    char name[32];
    snprintf(name, sizeof name, "gpt-%s", tr_split_name(split));
    if (mode != TR_INDEX_NO_CACHE && cache_dir) {
        int hit = 0;
        TR_TRY(tr_index_cache_load(cache_dir, d->key, name, arrays, 3, &hit, diags));
        if (hit) {
            d->n_samples = d->n_sample_rows - 1;
            if (n_shuffle != d->n_samples || d->n_samples < 0) {
                tr_gpt_dataset_free(d);
                return tr_diag_add(diags, TR_SEV_ERROR, "data.cache_damaged", NULL,
                                   "dataset.path_to_cache", "delete the cache entry",
                                   "index cache entry for the %s split has inconsistent sizes",
                                   tr_split_name(split));
            }
            return TR_OK;
        }
        if (mode == TR_INDEX_LOAD_ONLY) {
            char *path = tr_index_cache_path(cache_dir, d->key, name);
            tr_diag_add(diags, TR_SEV_ERROR, "data.cache_missing", NULL, "dataset.path_to_cache",
                        "rank 0 must build the indices before the other ranks load them: call "
                        "the build on rank 0, then a barrier, then load on the others, all with "
                        "the same dataset.path_to_cache on a shared file system",
                        "index cache entry %s is missing", path ? path : name);
            free(path);
            return TR_ERR_NOTFOUND;
        }
    }
    tr_status s = build_indices(d, diags);
    if (s == TR_OK && mode == TR_INDEX_BUILD_OR_LOAD && cache_dir) {
        n_shuffle = d->n_samples;
        s = tr_index_cache_save(cache_dir, d->key, name, arrays, 3, diags);
    }
    if (s != TR_OK) tr_gpt_dataset_free(d);
    return s;
}

void tr_gpt_dataset_free(tr_gpt_dataset *d) {
    free(d->document_index);
    free(d->sample_index);
    free(d->shuffle_index);
    d->document_index = NULL;
    d->sample_index = NULL;
    d->shuffle_index = NULL;
}

tr_status tr_gpt_dataset_text(const tr_gpt_dataset *d, int64_t i, int64_t *text) {
    if (i < 0 || i >= d->n_samples) return TR_ERR_INVALID;
    int64_t j = d->shuffle_index[i], extra = d->params.add_extra_token;
    int64_t b = d->sample_index[2 * j], bo = d->sample_index[2 * j + 1];
    int64_t e = d->sample_index[2 * j + 2], eo = d->sample_index[2 * j + 3];
    int64_t want = d->params.seq_length + extra, have = 0;
    for (int64_t k = b; k <= e && have < want; k++) {
        int64_t doc = d->document_index[k], len = d->low->lengths[doc];
        int64_t off = k == b ? bo : 0;
        int64_t count = k < e ? len - off : eo + extra - off;
        if (count > len - off) count = len - off; /* the final sample can end at the data's end */
        if (count > want - have) count = want - have;
        if (count <= 0) continue;
        TR_TRY(tr_gpt_lowlevel_read(d->low, doc, off, count, text + have));
        have += count;
    }
    for (; have < want; have++) text[have] = d->params.pad;
    return TR_OK;
}

void tr_gpt_make_sample(const int64_t *text, const tr_gpt_params *p, tr_gpt_sample *out) {
    int64_t L = p->seq_length;
    for (int64_t t = 0; t < L; t++) {
        out->tokens[t] = text[t];
        out->labels[t] = p->add_extra_token ? text[t + 1] : (t + 1 < L ? text[t + 1] : p->pad);
        out->loss_mask[t] = (p->eod_mask_loss && text[t] == p->eod) ? 0.0f : 1.0f;
        out->position_ids[t] = t;
    }
    if (p->reset_position_ids) {
        int64_t start = 0;
        for (int64_t t = 0; t < L; t++) {
            out->position_ids[t] = t - start;
            if (out->tokens[t] == p->eod) start = t + 1;
        }
    }
    for (int64_t t = 0; t < L; t++) {
        if (out->labels[t] == p->pad) out->loss_mask[t] = 0.0f;
        if (out->tokens[t] == p->pad) out->tokens[t] = 0;
        if (out->labels[t] == p->pad) out->labels[t] = 0;
    }
}

void tr_gpt_doc_start(const int64_t *tokens, int64_t n, int64_t eod, int32_t *doc_start) {
    int32_t start = 0;
    for (int64_t t = 0; t < n; t++) {
        doc_start[t] = start;
        if (tokens[t] == eod) start = (int32_t)(t + 1);
    }
}
