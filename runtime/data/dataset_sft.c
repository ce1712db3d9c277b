/* See runtime/data/dataset_sft.h. */
#include "runtime/data/dataset_sft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/data/tokenizer/tokenizer.h"

typedef struct sft_data {
    tr_sft_samples split[3];
    int32_t pad_id;
} sft_data;

tr_status tr_sft_sample_to_sequence(const tr_sft_sample *s, int seq, int32_t pad_id,
                                    const tr_token_sequence *out) {
    if (s->n > seq) return TR_ERR_INVALID;
    tr_sft_doc_start(s, out->doc_start);
    for (int64_t t = 0; t < s->n; t++) {
        out->ids[t] = (int32_t)s->tokens[t];
        out->targets[t] = s->loss_mask[t] > 0.0f ? (int32_t)s->labels[t] : -1;
        out->pos[t] = (int32_t)s->position_ids[t];
    }
    /* The tail is one more document: it attends only to itself and trains nothing. */
    for (int64_t t = s->n; t < seq; t++) {
        out->ids[t] = pad_id;
        out->targets[t] = -1;
        out->doc_start[t] = (int32_t)s->n;
        out->pos[t] = (int32_t)(t - s->n);
    }
    return TR_OK;
}

static tr_status sft_sequence(const tr_token_dataset *ds, int split, int64_t index,
                              const tr_token_sequence *out) {
    const sft_data *sd = ds->impl;
    int64_t n = ds->n_samples[split];
    if (split < 0 || split > 2 || n <= 0 || index < 0) return TR_ERR_INVALID;
    int64_t j = split == TR_SPLIT_TRAIN ? tr_train_data_shuffle(index, n, ds->seed) : index % n;
    return tr_sft_sample_to_sequence(&sd->split[split].v[j], ds->seq, sd->pad_id, out);
}

static void sft_destroy(tr_token_dataset *ds) {
    sft_data *sd = ds->impl;
    for (int i = 0; sd && i < 3; i++) tr_sft_samples_free(&sd->split[i]);
    free(sd);
    ds->impl = NULL;
}

static bool split_file_exists(const char *root, int split) {
    static const char *const files[] = {"training.jsonl", "validation.jsonl", "test.jsonl"};
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, files[split]);
    return access(path, R_OK) == 0;
}

static tr_status load_split(const tr_config *c, const tr_tokenizer *tok, int split,
                            const tr_sft_pack_options *po, tr_sft_samples *out, tr_diags *d) {
    const tr_dataset_config *dc = &c->dataset;
    tr_sft_options so;
    tr_sft_options_from_config(dc, &so);
    tr_sft_examples ex = {0};
    tr_status s = tr_sft_load_split(dc->dataset_root, split, &so, tok, &ex, d);
    if (s == TR_OK)
        s = dc->enable_offline_packing ? tr_sft_pack(&ex, po, out, d)
                                       : tr_sft_unpacked(&ex, po, out, d);
    tr_sft_examples_free(&ex);
    return s;
}

static tr_status check_vocab(const tr_sft_samples *s, int64_t vocab, tr_diags *d) {
    for (int64_t i = 0; i < s->n; i++)
        for (int64_t t = 0; t < s->v[i].n; t++)
            if (s->v[i].tokens[t] >= vocab || s->v[i].labels[t] >= vocab)
                return tr_diag_add(
                    d, TR_SEV_ERROR, "data.sft_vocab", NULL,
                    "tokenizer.tokenizer_type,model.vocab_size",
                    "use the tokenizer the model was built for",
                    "the SFT tokenizer gives id %lld, outside the model's %lld "
                    "token ids",
                    (long long)(s->v[i].tokens[t] >= vocab ? s->v[i].tokens[t] : s->v[i].labels[t]),
                    (long long)vocab);
    return TR_OK;
}

tr_status tr_dataset_sft_open(const tr_config *c, tr_token_dataset *ds, tr_diags *d) {
    const tr_dataset_config *dc = &c->dataset;
    int seq = (int)c->model.seq_length;
    if (!dc->dataset_root)
        return tr_diag_add(d, TR_SEV_ERROR, "data.sft_needs_dataset_root", NULL,
                           "dataset.dataset_root",
                           "set dataset.dataset_root to a directory holding training.jsonl",
                           "dataset.type sft needs dataset.dataset_root");
    tr_tokenizer *tok = NULL;
    TR_TRY(tr_tokenizer_from_config(&c->tokenizer, &tok, d));
    int64_t pad = tr_tokenizer_pad(tok) >= 0 ? tr_tokenizer_pad(tok) : tr_tokenizer_eod(tok);
    if (pad < 0) pad = 0;
    tr_sft_pack_options po;
    tr_sft_pack_options_from_config(dc, pad, &po);
    tr_status s = TR_OK;
    if (po.seq_length != seq)
        s = tr_diag_add(d, TR_SEV_ERROR, "data.sft_pack_length", NULL,
                        "dataset.packed_sequence_size,model.seq_length",
                        "set dataset.packed_sequence_size to model.seq_length (or null)",
                        "SFT sequences of %lld tokens do not fit the model's %d",
                        (long long)po.seq_length, seq);
    if (s == TR_OK) s = tr_sft_pack_check(&po, d);
    sft_data *sd = calloc(1, sizeof *sd);
    if (!sd) s = TR_ERR_NOMEM;
    ds->impl = sd;
    ds->destroy = sft_destroy;
    int64_t vocab = c->model.vocab_size;
    if (vocab == TR_NULL_INT) vocab = c->derived.padded_vocab_size;
    const bool wanted[3] = {true, dc->do_validation, dc->do_test};
    for (int split = 0; split < 3 && s == TR_OK; split++) {
        /* Validation and test files are optional: without one the split is empty. */
        if (!wanted[split] || (split > 0 && !split_file_exists(dc->dataset_root, split))) continue;
        s = load_split(c, tok, split, &po, &sd->split[split], d);
        if (s == TR_OK && vocab != TR_NULL_INT) s = check_vocab(&sd->split[split], vocab, d);
        if (s == TR_OK) ds->n_samples[split] = sd->split[split].n;
    }
    tr_tokenizer_free(tok);
    if (s == TR_OK && ds->n_samples[TR_SPLIT_TRAIN] == 0)
        s = tr_diag_add(d, TR_SEV_ERROR, "data.sft_empty", NULL, "dataset.dataset_root",
                        "add records with a prompt and a completion to training.jsonl",
                        "%s/training.jsonl holds no example to train on", dc->dataset_root);
    if (s != TR_OK) {
        sft_destroy(ds);
        ds->destroy = NULL;
        return s;
    }
    sd->pad_id = (int32_t)pad;
    ds->seq = seq;
    ds->eod = -1;
    ds->seed = (uint64_t)dc->seed;
    ds->sequence = sft_sequence;
    return TR_OK;
}
