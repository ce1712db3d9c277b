/* Byte-level BPE: a vocabulary of byte strings and ranked merges, applied to one pre-token at a
 * time. Tokens are stored as raw bytes (the GPT-2 byte-to-unicode mapping is undone at load), so
 * encoding never re-maps text. Internal to the tokenizers. */
#ifndef TR_DATA_BPE_H
#define TR_DATA_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "runtime/data/tokenizer/tokenizer.h"

typedef struct tr_bpe_entry {
    uint64_t key; /* hash of the bytes, or (left << 32 | right) for merges */
    int32_t a, b; /* vocab: id, unused; merges: rank, merged id */
    bool used;
} tr_bpe_entry;

typedef struct tr_bpe {
    char **token; /* id -> bytes (NULL for ids that are not byte strings) */
    int32_t *token_len;
    int64_t n_ids;
    tr_bpe_entry *vocab; /* open addressing: bytes -> id */
    size_t vocab_cap;
    tr_bpe_entry *merges; /* (left id, right id) -> rank, merged id */
    size_t merges_cap, n_merges;
    int32_t byte_id[256]; /* id of each single byte, -1 if missing */
    bool ignore_merges;   /* HF: a pre-token that is itself in the vocabulary is one id */
} tr_bpe;

/* The GPT-2 byte <-> printable-unicode mapping. Returns the byte a code point stands for, or -1. */
int tr_bpe_unicode_to_byte(uint32_t cp);
/* Decodes a byte-level vocabulary string (UTF-8 of mapped code points) to raw bytes in out
 * (capacity >= len); returns the byte count or -1 when a character is not in the mapping. */
int tr_bpe_unmap(const char *s, size_t len, char *out);

tr_status tr_bpe_init(tr_bpe *b, int64_t n_ids);
void tr_bpe_free(tr_bpe *b);
/* Registers id for the raw bytes s[0..len). Fails on a duplicate id. */
tr_status tr_bpe_add_token(tr_bpe *b, int64_t id, const char *s, size_t len);
/* Token id of raw bytes, or -1. */
int64_t tr_bpe_lookup(const tr_bpe *b, const char *s, size_t len);
/* Registers the merge of two token ids (raw-byte strings) with the next rank. Fails when either
 * side or their concatenation is not in the vocabulary. */
tr_status tr_bpe_add_merge(tr_bpe *b, int64_t left, int64_t right, int64_t *merged);
/* Finishes loading: checks every byte has an id. */
tr_status tr_bpe_finish(tr_bpe *b);
/* Encodes one pre-token (raw bytes) and appends the ids. */
tr_status tr_bpe_encode_word(const tr_bpe *b, const char *w, size_t n, tr_token_ids *out);

#endif
