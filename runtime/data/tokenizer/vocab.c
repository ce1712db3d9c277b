/* Vocabulary and merge loading shared by the GPT-2 files and tokenizer.json, and the diagnostic
 * both loaders give for a bad file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/tokenizer/internal.h"
#include "runtime/io/json.h"

tr_status tr_tokenizer_file_error(const char *id, const char *name, int line, const char *hint,
                                  const char *what, tr_diags *diags) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, name);
    o.line = line;
    return tr_diag_add(diags, TR_SEV_ERROR, id, &o, "tokenizer", hint, "%s%s%.0d: %s", name,
                       line > 0 ? ":" : "", line, what);
}

tr_status tr_tokenizer_load_vocab(tr_tokenizer *t, const tr_json *vocab, int64_t min_ids,
                                  const char *name, tr_diags *diags) {
    if (!vocab || vocab->type != TR_JSON_OBJECT || vocab->n == 0)
        return tr_tokenizer_file_error("data.tokenizer_vocab", name, 0,
                                       "the vocabulary must be a JSON object of token -> id",
                                       "no vocabulary object found", diags);
    int64_t max_id = min_ids - 1;
    for (size_t i = 0; i < vocab->n; i++) {
        int64_t id;
        if (!tr_json_int(&vocab->items[i], 0, INT32_MAX / 8, &id))
            return tr_tokenizer_file_error(
                "data.tokenizer_vocab", name, vocab->items[i].line,
                "every vocabulary value must be a non-negative integer id",
                "a vocabulary id is not a non-negative integer", diags);
        if (id > max_id) max_id = id;
    }
    tr_status s = tr_bpe_init(&t->bpe, max_id + 1);
    if (s != TR_OK) return s;
    t->vocab_size = max_id + 1;
    char stack[512];
    for (size_t i = 0; i < vocab->n; i++) {
        int64_t id = (int64_t)vocab->items[i].number;
        size_t kl = vocab->key_lens[i];
        char *raw = kl <= sizeof stack ? stack : malloc(kl);
        if (!raw) return TR_ERR_NOMEM;
        int n = tr_bpe_unmap(vocab->keys[i], kl, raw);
        /* A token outside the byte-level alphabet can never come out of BPE; added tokens that
         * spell such strings are matched in the text instead. */
        s = n < 0 ? TR_OK : tr_bpe_add_token(&t->bpe, id, raw, (size_t)n);
        if (raw != stack) free(raw);
        if (s == TR_ERR_INVALID) {
            char what[160];
            snprintf(what, sizeof what,
                     "id %lld is used twice (or two tokens spell the same bytes)", (long long)id);
            return tr_tokenizer_file_error("data.tokenizer_vocab", name, vocab->items[i].line,
                                           "each id and each token must appear once", what, diags);
        }
        if (s != TR_OK) return s;
    }
    if (tr_bpe_finish(&t->bpe) != TR_OK)
        return tr_tokenizer_file_error(
            "data.tokenizer_vocab", name, 0,
            "a byte-level BPE vocabulary holds all 256 single-byte tokens",
            "the vocabulary lacks some single-byte tokens", diags);
    return TR_OK;
}

tr_status tr_tokenizer_add_merge(tr_tokenizer *t, const char *left, size_t left_len,
                                 const char *right, size_t right_len, const char *name, int line,
                                 tr_diags *diags) {
    char lb[512], rb[512];
    int ln = left_len <= sizeof lb ? tr_bpe_unmap(left, left_len, lb) : -1;
    int rn = right_len <= sizeof rb ? tr_bpe_unmap(right, right_len, rb) : -1;
    int64_t l = ln < 0 ? -1 : tr_bpe_lookup(&t->bpe, lb, (size_t)ln);
    int64_t r = rn < 0 ? -1 : tr_bpe_lookup(&t->bpe, rb, (size_t)rn);
    int64_t merged;
    tr_status s = l < 0 || r < 0 ? TR_ERR_NOTFOUND : tr_bpe_add_merge(&t->bpe, l, r, &merged);
    if (s == TR_ERR_NOTFOUND || s == TR_ERR_INVALID) {
        char what[256];
        snprintf(what, sizeof what, "merge \"%.*s\" + \"%.*s\": %s",
                 (int)(left_len > 60 ? 60 : left_len), left, (int)(right_len > 60 ? 60 : right_len),
                 right,
                 l < 0 || r < 0 ? "a side is not in the vocabulary"
                                : "the merged token is not in the vocabulary");
        return tr_tokenizer_file_error("data.tokenizer_merge", name, line,
                                       "merges and vocabulary must come from the same tokenizer",
                                       what, diags);
    }
    return s;
}
