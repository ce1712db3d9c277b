/* See runtime/data/dataset_indexed.h. */
#include "runtime/data/dataset_indexed.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "runtime/data/tokenizer/tokenizer.h"

#include "runtime/data/datasets/blend.h"

typedef struct indexed_data {
    tr_gpt_data data;
    tr_gpt_spec_storage storage;
    int64_t vocab;
} indexed_data;

static tr_status indexed_sample(const tr_token_dataset *ds, int split, int64_t index,
                                int32_t *out) {
    const indexed_data *x = ds->impl;
    if (split < 0 || split > 2 || index < 0 || ds->n_samples[split] <= 0) return TR_ERR_INVALID;
    int64_t i = index % ds->n_samples[split];
    int64_t *text = malloc((size_t)(ds->seq + 1) * sizeof *text);
    if (!text) return TR_ERR_NOMEM;
    tr_status s = tr_gpt_data_text(&x->data, split, i, text, NULL);
    for (int t = 0; s == TR_OK && t <= ds->seq; t++) {
        if (text[t] < 0 || text[t] >= x->vocab) {
            tr_log(TR_LOG_ERROR,
                   "%s sample %" PRId64 " holds token %" PRId64
                   ", outside the model's vocabulary [0, %" PRId64
                   "): the data was tokenized for another vocabulary (check tokenizer.* and "
                   "model.vocab_size)",
                   tr_split_name(split), i, text[t], x->vocab);
            s = TR_ERR_INVALID;
        }
        out[t] = (int32_t)text[t];
    }
    free(text);
    return s;
}

static void indexed_destroy(tr_token_dataset *ds) {
    indexed_data *x = ds->impl;
    if (x) {
        tr_gpt_data_free(&x->data);
        tr_gpt_spec_storage_free(&x->storage);
    }
    free(x);
    ds->impl = NULL;
}

/* What the token interface cannot carry (Megatron's loss masks, per-document positions) is
 * refused before a dataset opens by tr_runtime_check (runtime.indexed_masks,
 * runtime.document_resets). */
static tr_status check_config(const tr_config *c, int64_t *vocab, tr_diags *d) {
    const tr_dataset_config *dc = &c->dataset;
    /* Neither a path nor a per-split blend: megatron-core's mock dataset. */
    if (dc->type != TR_DS_GPT)
        return tr_diag_add(d, TR_SEV_ERROR, "data.indexed_path", NULL,
                           "dataset.type,dataset.data_path",
                           "set dataset.type=gpt and dataset.data_path=<prefix> (or a blend "
                           "\"w1 prefix1 w2 prefix2\", or dataset.train_data_path/"
                           "valid_data_path/test_data_path)",
                           "indexed data needs dataset.type gpt and a data path");
    if (dc->seq_length != TR_NULL_INT && c->model.seq_length != TR_NULL_INT &&
        dc->seq_length != c->model.seq_length)
        return tr_diag_add(d, TR_SEV_ERROR, "data.seq_length_mismatch", NULL,
                           "dataset.seq_length,model.seq_length", "set both to the same value",
                           "dataset.seq_length %" PRId64 " differs from model.seq_length %" PRId64,
                           dc->seq_length, c->model.seq_length);
    *vocab = c->model.vocab_size;
    if (*vocab == TR_NULL_INT) *vocab = c->derived.padded_vocab_size;
    if (*vocab == TR_NULL_INT || *vocab < 1)
        return tr_diag_add(d, TR_SEV_ERROR, "data.indexed_vocab", NULL, "model.vocab_size",
                           "set model.vocab_size (or a tokenizer with use_tokenizer_vocab_size)",
                           "indexed data needs the model's vocabulary size to check its tokens");
    return TR_OK;
}

/* The tokenizer's end-of-document and pad ids, as Megatron's GPTDatasetConfig takes them; an
 * unset tokenizer means the data's boundaries are unknown (-1). */
static tr_status tokenizer_ids(const tr_config *c, int64_t vocab, int64_t *eod, int64_t *pad,
                               tr_diags *d) {
    *eod = -1;
    *pad = -1;
    const tr_dataset_config *dc = &c->dataset;
    bool mock = dc->data_path.null && dc->train_data_path.null && dc->valid_data_path.null &&
                dc->test_data_path.null;
    /* Mock documents end with the tokenizer's end-of-document id; without a tokenizer, the last
     * id of the vocabulary stands for it. */
    if (mock && c->tokenizer.tokenizer_type < 0) *eod = vocab - 1;
    if (c->tokenizer.tokenizer_type < 0) return TR_OK;
    tr_tokenizer *tok = NULL;
    TR_TRY(tr_tokenizer_from_config(&c->tokenizer, &tok, d));
    *eod = tr_tokenizer_eod(tok);
    *pad = tr_tokenizer_pad(tok);
    tr_tokenizer_free(tok);
    return TR_OK;
}

tr_status tr_indexed_token_dataset_open(const tr_config *c, bool build_indices,
                                        tr_token_dataset *ds, tr_diags *d) {
    memset(ds, 0, sizeof *ds);
    int64_t vocab = 0, eod, pad;
    TR_TRY(check_config(c, &vocab, d));
    TR_TRY(tokenizer_ids(c, vocab, &eod, &pad, d));
    indexed_data *x = calloc(1, sizeof *x);
    if (!x) return TR_ERR_NOMEM;
    x->vocab = vocab;
    tr_index_cache_mode mode = build_indices ? TR_INDEX_BUILD_OR_LOAD : TR_INDEX_LOAD_ONLY;
    tr_gpt_build_spec spec;
    tr_status s = tr_gpt_spec_from_config(c, eod, pad, vocab, mode, &spec, &x->storage, d);
    if (s != TR_OK) {
        free(x);
        return s;
    }
    if (c->train.train_samples != TR_NULL_INT) spec.sizes[TR_SPLIT_TRAIN] = c->train.train_samples;
    s = tr_gpt_data_build(&x->data, &spec, d);
    if (s != TR_OK) {
        tr_gpt_spec_storage_free(&x->storage);
        free(x);
        return s;
    }
    *ds = (tr_token_dataset){.seq = (int)c->dataset.seq_length,
                             .eod = eod >= 0 && eod < vocab ? (int32_t)eod : -1,
                             .seed = (uint64_t)c->dataset.random_seed,
                             .sample = indexed_sample,
                             .destroy = indexed_destroy,
                             .impl = x};
    for (int sp = 0; sp < 3; sp++) {
        const tr_gpt_split_data *sd = &x->data.split[sp];
        if (sd->present) ds->n_samples[sp] = sd->blended ? sd->size : sd->parts[0].n_samples;
    }
    return TR_OK;
}

tr_status tr_indexed_token_dataset_docs(const tr_token_dataset *ds, int split, int64_t index,
                                        int64_t *docs, int max, int *n, const char **name) {
    *n = 0;
    if (ds->sample != indexed_sample || split < 0 || split > 2 || index < 0 ||
        ds->n_samples[split] <= 0)
        return TR_ERR_INVALID;
    const indexed_data *x = ds->impl;
    const tr_gpt_split_data *sd = &x->data.split[split];
    int64_t i = index % ds->n_samples[split], j = i;
    int c = 0;
    if (sd->blended) {
        c = sd->dataset_index[i];
        j = sd->dataset_sample_index[i];
    }
    const tr_gpt_dataset *p = &sd->parts[c];
    if (j < 0 || j >= p->n_samples) return TR_ERR_INVALID;
    int64_t k = p->shuffle_index[j];
    *name = p->low->name;
    for (int64_t at = p->sample_index[2 * k]; at <= p->sample_index[2 * k + 2] && *n < max; at++) {
        /* A sample that ends exactly at a document's end does not reach into the next one. */
        if (at == p->sample_index[2 * k + 2] && at > p->sample_index[2 * k] &&
            p->sample_index[2 * k + 3] + p->params.add_extra_token == 0)
            break;
        if (at >= p->n_document) break;
        docs[(*n)++] = p->document_index[at];
    }
    return TR_OK;
}
