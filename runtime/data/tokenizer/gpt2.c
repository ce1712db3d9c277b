/* GPT-2 BPE from vocab.json + merges.txt. */
#include <stdlib.h>
#include <string.h>

#include "runtime/io/json.h"
#include "runtime/data/tokenizer/internal.h"

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
                return tr_tokenizer_file_error(
                    "data.tokenizer_merge", name, line,
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
