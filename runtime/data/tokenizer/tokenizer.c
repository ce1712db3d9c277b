/* The tokenizer interface: the tokenizer a config names, the byte-level and null tokenizers, and
 * the BPE encode path shared by GPT-2 and Hugging Face files (added tokens, then regex
 * pre-tokens, then BPE per pre-token). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data/tokenizer/internal.h"

tr_status tr_tokenizer_byte_level(tr_tokenizer **out) {
    *out = tr_tokenizer_alloc(TR_TOK_BYTE, "ByteLevelTokenizer");
    if (!*out) return TR_ERR_NOMEM;
    (*out)->vocab_size = 256;
    (*out)->eod = 0;
    return TR_OK;
}

tr_status tr_tokenizer_null(int64_t vocab_size, int64_t eod, int64_t pad, tr_tokenizer **out,
                            tr_diags *diags) {
    *out = NULL;
    if (vocab_size < 1)
        return tr_diag_add(diags, TR_SEV_ERROR, "data.null_tokenizer_vocab", NULL,
                           "tokenizer.vocab_size", "set tokenizer.vocab_size=N",
                           "the NullTokenizer needs a vocabulary size of at least 1, got %lld",
                           (long long)vocab_size);
    if (eod >= vocab_size)
        return tr_diag_add(diags, TR_SEV_ERROR, "data.null_tokenizer_eod", NULL,
                           "tokenizer.null_tokenizer_eod_id", "use an id below the vocabulary size",
                           "end-of-document id %lld is outside the vocabulary of %lld ids",
                           (long long)eod, (long long)vocab_size);
    *out = tr_tokenizer_alloc(TR_TOK_NULL, "NullTokenizer");
    if (!*out) return TR_ERR_NOMEM;
    (*out)->vocab_size = vocab_size;
    (*out)->eod = eod < 0 ? vocab_size - 1 : eod;
    (*out)->pad = pad;
    return TR_OK;
}

static tr_status encode_null(const tr_tokenizer *t, const char *s, size_t len, tr_token_ids *out,
                             tr_diags *diags) {
    /* As Megatron: text.split(' '), every piece an integer id. */
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < len && s[j] != ' ') j++;
        char buf[32];
        size_t n = j - i;
        char *end = NULL;
        long long v = 0;
        bool ok = n > 0 && n < sizeof buf;
        if (ok) {
            memcpy(buf, s + i, n);
            buf[n] = '\0';
            errno = 0;
            v = strtoll(buf, &end, 10);
            ok = errno == 0 && *end == '\0' && v >= 0 && v < t->vocab_size;
        }
        if (!ok)
            return tr_diag_add(diags, TR_SEV_ERROR, "data.null_tokenizer_text", NULL,
                               "tokenizer.tokenizer_type",
                               "NullTokenizer text must be ids below the vocabulary size "
                               "separated by single spaces, e.g. \"5 17 3\"",
                               "NullTokenizer cannot read \"%.*s\" at byte %zu as a token id",
                               (int)(n > 40 ? 40 : n), s + i, i);
        TR_TRY(tr_token_ids_push(out, v));
        if (j >= len) return TR_OK;
        i = j + 1;
    }
}

/* Pre-tokenizes one stretch of text without added tokens and runs BPE on each piece. */
static tr_status encode_plain(const tr_tokenizer *t, const char *s, size_t len,
                              pcre2_match_data *md, tr_token_ids *out, tr_diags *diags) {
    size_t pos = 0;
    while (pos < len) {
        int rc = pcre2_match(t->split, (PCRE2_SPTR)s, len, pos, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) return tr_bpe_encode_word(&t->bpe, s + pos, len - pos, out);
        if (rc < 0) {
            char msg[256];
            pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, sizeof msg);
            return tr_diag_add(diags, TR_SEV_ERROR, "data.tokenizer_text", NULL, NULL,
                               "tokenizer input must be valid UTF-8",
                               "cannot pre-tokenize the text: %s", msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t start = ov[0], end = ov[1];
        if (start > pos) TR_TRY(tr_bpe_encode_word(&t->bpe, s + pos, start - pos, out));
        if (end == start) { /* an empty match: step over one character so the scan ends */
            end = start + 1;
            while (end < len && ((unsigned char)s[end] & 0xc0) == 0x80) end++;
        }
        TR_TRY(tr_bpe_encode_word(&t->bpe, s + start, end - start, out));
        pos = end;
    }
    return TR_OK;
}

/* The next added token in s: earliest start, longest among those starting there. */
static const tr_added_token *next_added(const tr_tokenizer *t, const char *s, size_t len,
                                        size_t *at) {
    const tr_added_token *best = NULL;
    size_t best_at = len;
    for (size_t k = 0; k < t->n_added; k++) {
        const tr_added_token *a = &t->added[k];
        const char *hit =
            memmem(s, best_at + a->len <= len ? best_at + a->len : len, a->content, a->len);
        if (!hit) continue;
        size_t h = (size_t)(hit - s);
        if (h < best_at || (h == best_at && best && a->len > best->len)) best = a, best_at = h;
    }
    *at = best_at;
    return best;
}

tr_status tr_tokenizer_encode(const tr_tokenizer *t, const char *text, size_t len,
                              tr_token_ids *out, tr_diags *diags) {
    if (t->kind == TR_TOK_BYTE) {
        for (size_t i = 0; i < len; i++) TR_TRY(tr_token_ids_push(out, (unsigned char)text[i]));
        return TR_OK;
    }
    if (t->kind == TR_TOK_NULL) return encode_null(t, text, len, out, diags);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(t->split, NULL);
    if (!md) return TR_ERR_NOMEM;
    tr_status s = TR_OK;
    size_t pos = 0;
    while (s == TR_OK && pos < len) {
        size_t at;
        const tr_added_token *a = next_added(t, text + pos, len - pos, &at);
        s = encode_plain(t, text + pos, at, md, out, diags);
        if (s == TR_OK && a) s = tr_token_ids_push(out, a->id);
        pos += at + (a ? a->len : 0);
    }
    pcre2_match_data_free(md);
    return s;
}

int tr_tokenizer_token_bytes(const tr_tokenizer *t, int64_t id, char *buf, int cap) {
    if (id < 0 || id >= t->vocab_size) return -1;
    if (t->kind == TR_TOK_BYTE) {
        if (cap < 1) return -1;
        buf[0] = (char)id;
        return 1;
    }
    if (t->kind != TR_TOK_BPE) return -1;
    for (size_t k = 0; k < t->n_added; k++)
        if (t->added[k].id == id) {
            if ((size_t)cap < t->added[k].len) return -1;
            memcpy(buf, t->added[k].content, t->added[k].len);
            return (int)t->added[k].len;
        }
    if (id >= t->bpe.n_ids || !t->bpe.token[id] || t->bpe.token_len[id] > cap) return -1;
    memcpy(buf, t->bpe.token[id], (size_t)t->bpe.token_len[id]);
    return t->bpe.token_len[id];
}

tr_status tr_tokenizer_from_config(const tr_tokenizer_config *tc, tr_tokenizer **out,
                                   tr_diags *diags) {
    *out = NULL;
    switch (tc->tokenizer_type) {
    case TR_TOKENIZER_BYTE_LEVEL:
        return tr_tokenizer_byte_level(out);
    case TR_TOKENIZER_NULL:
        return tr_tokenizer_null(
            tc->vocab_size == TR_NULL_INT ? 0 : tc->vocab_size,
            tc->null_tokenizer_eod_id == TR_NULL_INT ? -1 : tc->null_tokenizer_eod_id,
            tc->null_tokenizer_pad_id, out, diags);
    case TR_TOKENIZER_GPT2BPE:
        if (!tc->vocab_file || !tc->merge_file)
            return tr_diag_add(diags, TR_SEV_ERROR, "data.gpt2_files", NULL,
                               "tokenizer.vocab_file,tokenizer.merge_file",
                               "set tokenizer.vocab_file=PATH/vocab.json and "
                               "tokenizer.merge_file=PATH/merges.txt",
                               "GPT2BPETokenizer needs both a vocab file and a merges file");
        return tr_tokenizer_gpt2(tc->vocab_file, tc->merge_file, out, diags);
    case TR_TOKENIZER_HUGGINGFACE:
        if (!tc->tokenizer_model)
            return tr_diag_add(diags, TR_SEV_ERROR, "data.hf_file", NULL,
                               "tokenizer.tokenizer_model",
                               "set tokenizer.tokenizer_model to tokenizer.json or its directory",
                               "HuggingFaceTokenizer needs tokenizer.tokenizer_model");
        return tr_tokenizer_hf(tc->tokenizer_model, out, diags);
    default:
        return tr_diag_add(diags, TR_SEV_ERROR, "data.tokenizer_unsupported", NULL,
                           "tokenizer.tokenizer_type",
                           "use ByteLevelTokenizer, NullTokenizer, GPT2BPETokenizer or "
                           "HuggingFaceTokenizer (byte-level BPE tokenizer.json)",
                           "tokenizer.tokenizer_type %s is not implemented by Trestle's data "
                           "pipeline yet",
                           tc->tokenizer_type >= 0 && tc->tokenizer_type < tr_enum_tokenizer_type.n
                               ? tr_enum_tokenizer_type.values[tc->tokenizer_type].name
                               : "(unknown)");
    }
}
