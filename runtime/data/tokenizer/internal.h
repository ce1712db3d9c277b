/* The tokenizer object shared by the files of runtime/data/tokenizer/; not a public header. */
#ifndef TR_DATA_TOKENIZER_IMPL_H
#define TR_DATA_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "runtime/data/tokenizer/bpe.h"
#include "runtime/data/tokenizer/tokenizer.h"

typedef enum tr_tok_kind { TR_TOK_BYTE, TR_TOK_NULL, TR_TOK_BPE } tr_tok_kind;

typedef struct tr_added_token {
    char *content;
    size_t len;
    int64_t id;
} tr_added_token;

struct tr_tokenizer {
    tr_tok_kind kind;
    const char *name;
    int64_t vocab_size, eod, pad;
    tr_bpe bpe;
    pcre2_code *split; /* pre-tokenizer regex; matches and the gaps between them are pre-tokens */
    tr_added_token *added; /* matched in the raw text before pre-tokenization */
    size_t n_added;
};

/* GPT-2's pre-tokenizer regex (HF ByteLevel with use_regex). */
extern const char *const TR_GPT2_PATTERN;

tr_status tr_tokenizer_compile_split(tr_tokenizer *t, const char *pattern, const char *name,
                                     tr_diags *diags);
tr_tokenizer *tr_tokenizer_alloc(tr_tok_kind kind, const char *name);

/* Loading helpers shared by the GPT-2 and tokenizer.json loaders (runtime/data/tokenizer/vocab.c).
 * A file error names the file and, when line > 0, the line. */
tr_status tr_tokenizer_file_error(const char *id, const char *name, int line, const char *hint,
                                  const char *what, tr_diags *diags);
struct tr_json;
tr_status tr_tokenizer_load_vocab(tr_tokenizer *t, const struct tr_json *vocab, int64_t min_ids,
                                  const char *name, tr_diags *diags);
/* Adds the merge of two byte-level strings (vocabulary spelling); line is for messages. */
tr_status tr_tokenizer_add_merge(tr_tokenizer *t, const char *left, size_t left_len,
                                 const char *right, size_t right_len, const char *name, int line,
                                 tr_diags *diags);

#endif
