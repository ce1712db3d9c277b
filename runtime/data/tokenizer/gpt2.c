/* GPT-2 BPE from vocab.json + merges.txt, and the vocabulary/merge loading shared with
 * tokenizer.json. */
#include <stdlib.h>
#include <string.h>

#include "runtime/io/json.h"
#include "runtime/data/tokenizer/internal.h"

static tr_status file_error(const char *id, const char *name, int line, const char *hint,
                            const char *what, tr_diags *diags) {
    tr_origin o = tr_origin_make(TR_ORIGIN_FILE, name);
    o.line = line;
    return tr_diag_add(diags, TR_SEV_ERROR, id, &o, "tokenizer", hint, "%s%s%.0d: %s", name,
                       line > 0 ? ":" : "", line, what);
}

tr_status tr_tokenizer_load_vocab(tr_tokenizer *t, const tr_json *vocab, int64_t min_ids,
                                  const char *name, tr_diags *diags) {
    if (!vocab || vocab->type != TR_JSON_OBJECT || vocab->n == 0)
        return file_error("data.tokenizer_vocab", name, 0,
                          "the vocabulary must be a JSON object of token -> id",
                          "no vocabulary object found", diags);
    int64_t max_id = min_ids - 1;
    for (size_t i = 0; i < vocab->n; i++) {
        int64_t id;
        if (!tr_json_int(&vocab->items[i], 0, INT32_MAX / 8, &id))
            return file_error("data.tokenizer_vocab", name, vocab->items[i].line,
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
            return file_error("data.tokenizer_vocab", name, vocab->items[i].line,
                              "each id and each token must appear once", what, diags);
        }
        if (s != TR_OK) return s;
    }
    if (tr_bpe_finish(&t->bpe) != TR_OK)
        return file_error("data.tokenizer_vocab", name, 0,
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
        return file_error("data.tokenizer_merge", name, line,
                          "merges and vocabulary must come from the same tokenizer", what, diags);
    }
    return s;
}

static tr_status load_merges_txt(tr_tokenizer *t, const char *text, size_t len, const char *name,
                                 tr_diags *diags) {
    const char *p = text, *end = text + len;
    int line = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        line++;
        const char *le = e > p && e[-1] == '\r' ? e - 1 : e;
        bool header = line == 1 && le - p >= 8 && memcmp(p, "#version", 8) == 0;
        if (!header && le > p) {
            const char *sp = memchr(p, ' ', (size_t)(le - p));
            if (!sp || sp == p || sp + 1 == le || memchr(sp + 1, ' ', (size_t)(le - sp - 1)))
                return file_error("data.tokenizer_merge", name, line,
                                  "each line of merges.txt is two tokens separated by one space",
                                  "malformed merge line", diags);
            TR_TRY(tr_tokenizer_add_merge(t, p, (size_t)(sp - p), sp + 1, (size_t)(le - sp - 1),
                                          name, line, diags));
        }
        p = e + 1;
    }
    return TR_OK;
}

static tr_status build_gpt2(const char *v, size_t vl, const char *vname, const char *m, size_t ml,
                            const char *mname, tr_tokenizer **out, tr_diags *diags) {
    tr_tokenizer *t = tr_tokenizer_alloc(TR_TOK_BPE, "GPT2BPETokenizer");
    if (!t) return TR_ERR_NOMEM;
    tr_json vocab;
    tr_status s = tr_json_parse(v, vl, vname, &vocab, diags);
    if (s == TR_OK) {
        s = tr_tokenizer_load_vocab(t, &vocab, 0, vname, diags);
        tr_json_free(&vocab);
    }
    if (s == TR_OK) s = load_merges_txt(t, m, ml, mname, diags);
    if (s == TR_OK) s = tr_tokenizer_compile_split(t, TR_GPT2_PATTERN, mname, diags);
    if (s != TR_OK) {
        tr_tokenizer_free(t);
        return s;
    }
    static const char eot[] = "<|endoftext|>";
    t->eod = tr_bpe_lookup(&t->bpe, eot, sizeof eot - 1);
    *out = t;
    return TR_OK;
}

tr_status tr_tokenizer_gpt2_from_memory(const char *vocab_json, size_t vocab_len,
                                        const char *merges, size_t merges_len, const char *name,
                                        tr_tokenizer **out, tr_diags *diags) {
    *out = NULL;
    return build_gpt2(vocab_json, vocab_len, name, merges, merges_len, name, out, diags);
}

tr_status tr_tokenizer_gpt2(const char *vocab_json_path, const char *merges_path,
                            tr_tokenizer **out, tr_diags *diags) {
    *out = NULL;
    char *v = NULL, *m = NULL;
    size_t vl, ml;
    tr_status s = tr_read_file(vocab_json_path, "tokenizer.vocab_file", &v, &vl, diags);
    if (s == TR_OK) s = tr_read_file(merges_path, "tokenizer.merge_file", &m, &ml, diags);
    if (s == TR_OK) s = build_gpt2(v, vl, vocab_json_path, m, ml, merges_path, out, diags);
    free(v);
    free(m);
    return s;
}
