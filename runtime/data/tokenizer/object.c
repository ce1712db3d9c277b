/* The tokenizer object every kind fills (runtime/data/tokenizer/internal.h): allocation, release,
 * the accessors, and the pre-tokenizer regex. */
#include <stdlib.h>

#include "runtime/data/tokenizer/internal.h"

const char *const TR_GPT2_PATTERN =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

tr_tokenizer *tr_tokenizer_alloc(tr_tok_kind kind, const char *name) {
    tr_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->kind = kind;
    t->name = name;
    t->eod = t->pad = -1;
    return t;
}

void tr_tokenizer_free(tr_tokenizer *t) {
    if (!t) return;
    tr_bpe_free(&t->bpe);
    if (t->split) pcre2_code_free(t->split);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    free(t);
}

int64_t tr_tokenizer_vocab_size(const tr_tokenizer *t) {
    return t->vocab_size;
}
int64_t tr_tokenizer_eod(const tr_tokenizer *t) {
    return t->eod;
}
int64_t tr_tokenizer_pad(const tr_tokenizer *t) {
    return t->pad;
}
const char *tr_tokenizer_name(const tr_tokenizer *t) {
    return t->name;
}

tr_status tr_tokenizer_compile_split(tr_tokenizer *t, const char *pattern, const char *name,
                                     tr_diags *diags) {
    int err;
    PCRE2_SIZE at;
    t->split = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                             &err, &at, NULL);
    if (!t->split) {
        char msg[256];
        pcre2_get_error_message(err, (PCRE2_UCHAR *)msg, sizeof msg);
        tr_origin o = tr_origin_make(TR_ORIGIN_FILE, name);
        return tr_diag_add(diags, TR_SEV_ERROR, "data.tokenizer_regex", &o, "tokenizer",
                           "the pre-tokenizer pattern must be a regex PCRE2 accepts",
                           "%s: the pre-tokenizer regex does not compile at offset %zu: %s", name,
                           (size_t)at, msg);
    }
    pcre2_jit_compile(t->split, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
    return TR_OK;
}
