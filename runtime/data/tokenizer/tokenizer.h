/* Tokenizers: text -> token ids. One interface over Trestle's byte-level tokenizer, Megatron's
 * NullTokenizer (ids written as numbers, for mock data), GPT-2 BPE (vocab.json + merges.txt) and
 * Hugging Face tokenizer.json byte-level BPE (Llama 3 / Qwen style). A loaded tokenizer is
 * immutable: encode may run on many threads at once. */
#ifndef TR_DATA_TOKENIZER_H
#define TR_DATA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/diag.h"
#include "core/status.h"

typedef struct tr_tokenizer tr_tokenizer;

/* A growable id buffer; encode appends to it. */
typedef struct tr_token_ids {
    int64_t *ids;
    size_t n, cap;
} tr_token_ids;

tr_status tr_token_ids_push(tr_token_ids *v, int64_t id);
void tr_token_ids_free(tr_token_ids *v);

/* Builds the tokenizer the config's tokenizer section names (tokenizer_type plus its files). */
tr_status tr_tokenizer_from_config(const tr_tokenizer_config *tc, tr_tokenizer **out,
                                   tr_diags *diags);

/* 256 byte ids; end-of-document is byte 0 (NUL never occurs in text); no padding id. */
tr_status tr_tokenizer_byte_level(tr_tokenizer **out);
/* Megatron's NullTokenizer: text is space-separated integer ids. eod < 0 means vocab_size - 1. */
tr_status tr_tokenizer_null(int64_t vocab_size, int64_t eod, int64_t pad, tr_tokenizer **out,
                            tr_diags *diags);
/* GPT-2 BPE: the GPT-2 pre-tokenizer regex and byte-level BPE; eod is <|endoftext|>. */
tr_status tr_tokenizer_gpt2(const char *vocab_json_path, const char *merges_path,
                            tr_tokenizer **out, tr_diags *diags);
tr_status tr_tokenizer_gpt2_from_memory(const char *vocab_json, size_t vocab_len,
                                        const char *merges, size_t merges_len, const char *name,
                                        tr_tokenizer **out, tr_diags *diags);
/* Hugging Face tokenizer.json (model BPE over ByteLevel; see docs/data.md for what is read).
 * path may be the file or the directory holding it. */
tr_status tr_tokenizer_hf(const char *path, tr_tokenizer **out, tr_diags *diags);
tr_status tr_tokenizer_hf_from_memory(const char *json, size_t len, const char *name,
                                      tr_tokenizer **out, tr_diags *diags);

void tr_tokenizer_free(tr_tokenizer *t);

/* Appends the ids of text[0..len) to out. TR_ERR_INVALID (with a diagnostic) for text the
 * tokenizer cannot encode: invalid UTF-8 for regex-based tokenizers, non-numbers for the null
 * tokenizer. */
tr_status tr_tokenizer_encode(const tr_tokenizer *t, const char *text, size_t len,
                              tr_token_ids *out, tr_diags *diags);
/* Appends the bytes of token id to buf (cap bytes); returns the byte count or -1 if the id is
 * unknown or does not fit. */
int tr_tokenizer_token_bytes(const tr_tokenizer *t, int64_t id, char *buf, int cap);

int64_t tr_tokenizer_vocab_size(const tr_tokenizer *t);
int64_t tr_tokenizer_eod(const tr_tokenizer *t); /* -1 if the tokenizer has none */
int64_t tr_tokenizer_pad(const tr_tokenizer *t); /* -1 if none */
const char *tr_tokenizer_name(const tr_tokenizer *t);

#endif
