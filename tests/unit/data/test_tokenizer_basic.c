/* Tokenizer behaviour that the HF parity corpus does not pin down: the byte-level and null
 * tokenizers, added-token splitting, the config factory, and every loader refusal. */
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "runtime/data/tokenizer/bpe.h"
#include "runtime/data/tokenizer/tokenizer.h"
#include "tests/unit/harness.h"

#define DIR TRESTLE_SOURCE_DIR "/tests/data/tokenizer/"

static void byte_level_is_identity_on_bytes(void) {
    tr_tokenizer *t;
    CHECK(tr_tokenizer_byte_level(&t) == TR_OK);
    tr_token_ids ids = {0};
    const char text[] = "a\xc3\xa9\xff";
    CHECK(tr_tokenizer_encode(t, text, 4, &ids, NULL) == TR_OK);
    CHECK_INT_EQ(ids.n, 4);
    CHECK_INT_EQ(ids.ids[0], 'a');
    CHECK_INT_EQ(ids.ids[1], 0xc3);
    CHECK_INT_EQ(ids.ids[3], 0xff);
    CHECK_INT_EQ(tr_tokenizer_vocab_size(t), 256);
    CHECK_INT_EQ(tr_tokenizer_eod(t), 0);
    tr_token_ids_free(&ids);
    tr_tokenizer_free(t);
}

static void null_tokenizer_reads_numbers(void) {
    tr_tokenizer *t;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_tokenizer_null(100, -1, -1, &t, &d) == TR_OK);
    CHECK_INT_EQ(tr_tokenizer_eod(t), 99);
    tr_token_ids ids = {0};
    CHECK(tr_tokenizer_encode(t, "5 17 0", 6, &ids, &d) == TR_OK);
    CHECK_INT_EQ(ids.n, 3);
    CHECK_INT_EQ(ids.ids[1], 17);
    CHECK(tr_tokenizer_encode(t, "5 x", 3, &ids, &d) == TR_ERR_INVALID);
    CHECK(tr_tokenizer_encode(t, "5  6", 4, &ids, &d) == TR_ERR_INVALID); /* empty piece */
    CHECK(tr_tokenizer_encode(t, "100", 3, &ids, &d) == TR_ERR_INVALID);  /* outside vocab */
    CHECK(tr_diags_find(&d, "data.null_tokenizer_text") != NULL);
    tr_token_ids_free(&ids);
    tr_tokenizer_free(t);
    CHECK(tr_tokenizer_null(0, -1, -1, &t, &d) == TR_ERR_INVALID);
    CHECK(tr_tokenizer_null(10, 10, -1, &t, &d) == TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.null_tokenizer_eod") != NULL);
    tr_diags_free(&d);
}

static void byte_unicode_mapping_is_a_bijection(void) {
    int seen[256] = {0};
    int mapped = 0;
    for (uint32_t cp = 0; cp < 0x200; cp++) {
        int b = tr_bpe_unicode_to_byte(cp);
        if (b < 0) continue;
        CHECK(b < 256);
        seen[b]++;
        mapped++;
    }
    CHECK_INT_EQ(mapped, 256);
    for (int b = 0; b < 256; b++) CHECK_INT_EQ(seen[b], 1);
    CHECK_INT_EQ(tr_bpe_unicode_to_byte(0x120), ' '); /* GPT-2's "Ġ" is the space */
    CHECK_INT_EQ(tr_bpe_unicode_to_byte(' '), -1);
}

static void added_tokens_are_matched_before_bpe(void) {
    tr_tokenizer *t;
    CHECK(tr_tokenizer_hf(DIR "llama3/tokenizer.json", &t, NULL) == TR_OK);
    tr_token_ids ids = {0};
    const char text[] = "hi<|eot_id|><|end_of_text|>x";
    CHECK(tr_tokenizer_encode(t, text, strlen(text), &ids, NULL) == TR_OK);
    bool has2 = false, has1 = false;
    for (size_t i = 0; i < ids.n; i++) has2 |= ids.ids[i] == 2, has1 |= ids.ids[i] == 1;
    CHECK(has1 && has2);
    /* Every id decodes back to bytes that concatenate to the text. */
    char out[128];
    int n = 0;
    for (size_t i = 0; i < ids.n; i++) {
        int k = tr_tokenizer_token_bytes(t, ids.ids[i], out + n, (int)sizeof out - n);
        CHECK(k > 0);
        if (k > 0) n += k;
    }
    CHECK_INT_EQ(n, strlen(text));
    CHECK(memcmp(out, text, strlen(text)) == 0);
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_tokenizer_encode(t, "bad \xff utf8", 10, &ids, &d) == TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.tokenizer_text") != NULL);
    tr_diags_free(&d);
    tr_token_ids_free(&ids);
    tr_tokenizer_free(t);
}

static const char *load_gpt2_id(const char *vocab, const char *merges, char *id, size_t cap) {
    tr_tokenizer *t;
    tr_diags d;
    tr_diags_init(&d);
    tr_status s =
        tr_tokenizer_gpt2_from_memory(vocab, strlen(vocab), merges, strlen(merges), "t", &t, &d);
    snprintf(id, cap, "%s", s == TR_OK ? "ok" : d.n ? d.items[0].id : "none");
    if (s == TR_OK) tr_tokenizer_free(t);
    tr_diags_free(&d);
    return id;
}

/* A complete byte alphabet plus "ab" in vocab.json syntax, built from the mapping itself. */
static char *alphabet_vocab(const char *extra) {
    char *v = malloc(8192);
    size_t n = (size_t)sprintf(v, "{");
    int id = 0;
    for (uint32_t cp = 0; cp < 0x200; cp++) {
        int b = tr_bpe_unicode_to_byte(cp);
        if (b < 0) continue;
        char u[4];
        int ul = cp < 0x80 ? 1 : 2;
        if (ul == 1)
            u[0] = (char)cp;
        else
            u[0] = (char)(0xc0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3f));
        if (cp == '"' || cp == '\\')
            n += (size_t)sprintf(v + n, "\"\\%c\":%d,", (char)cp, id++);
        else
            n += (size_t)sprintf(v + n, "\"%.*s\":%d,", ul, u, id++);
    }
    sprintf(v + n, "%s}", extra);
    return v;
}

static void gpt2_loader_refusals(void) {
    char id[64];
    char *ok = alphabet_vocab("\"ab\":256,\"<|endoftext|>\":257");
    CHECK_STR_EQ(load_gpt2_id(ok, "#version: 0.2\na b\n", id, sizeof id), "ok");
    CHECK_STR_EQ(load_gpt2_id(ok, "a c\n", id, sizeof id), "data.tokenizer_merge");
    CHECK_STR_EQ(load_gpt2_id(ok, "a b c\n", id, sizeof id), "data.tokenizer_merge");
    CHECK_STR_EQ(load_gpt2_id(ok, "ab\n", id, sizeof id), "data.tokenizer_merge");
    CHECK_STR_EQ(load_gpt2_id(ok, "zz qq\n", id, sizeof id), "data.tokenizer_merge");
    CHECK_STR_EQ(load_gpt2_id("{\"a\":0}", "", id, sizeof id), "data.tokenizer_vocab");
    CHECK_STR_EQ(load_gpt2_id("{\"a\":-1}", "", id, sizeof id), "data.tokenizer_vocab");
    CHECK_STR_EQ(load_gpt2_id("[1,2]", "", id, sizeof id), "data.tokenizer_vocab");
    CHECK_STR_EQ(load_gpt2_id("{\"a\":0,", "", id, sizeof id), "data.json_syntax");
    char *dup = alphabet_vocab("\"ab\":5");
    CHECK_STR_EQ(load_gpt2_id(dup, "", id, sizeof id), "data.tokenizer_vocab");
    free(dup);

    tr_tokenizer *t;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_tokenizer_gpt2_from_memory(ok, strlen(ok), "a b\n", 4, "t", &t, &d) == TR_OK);
    tr_token_ids ids = {0};
    CHECK(tr_tokenizer_encode(t, "abab a", 6, &ids, &d) == TR_OK);
    CHECK_INT_EQ(ids.n, 4); /* "abab" -> ab ab; " a" -> space, a (no " a" token) */
    CHECK_INT_EQ(ids.ids[0], 256);
    CHECK_INT_EQ(ids.ids[1], 256);
    CHECK_INT_EQ(tr_tokenizer_eod(t), 257);
    tr_token_ids_free(&ids);
    tr_tokenizer_free(t);
    tr_diags_free(&d);
    free(ok);
}

static const char *load_hf_id(const char *json, char *id, size_t cap) {
    tr_tokenizer *t;
    tr_diags d;
    tr_diags_init(&d);
    tr_status s = tr_tokenizer_hf_from_memory(json, strlen(json), "tokenizer.json", &t, &d);
    snprintf(id, cap, "%s", s == TR_OK ? "ok" : d.n ? d.items[0].id : "none");
    if (s == TR_OK) tr_tokenizer_free(t);
    tr_diags_free(&d);
    return id;
}

static void hf_loader_refuses_what_it_cannot_honour(void) {
    char id[64], *vocab = alphabet_vocab("\"ab\":256");
    char json[12000];
    const char *bl = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}";
    snprintf(json, sizeof json,
             "{\"normalizer\":null,\"pre_tokenizer\":%s,\"added_tokens\":[],"
             "\"model\":{\"type\":\"BPE\",\"vocab\":%s,\"merges\":[[\"a\",\"b\"]]}}",
             bl, vocab);
    CHECK_STR_EQ(load_hf_id(json, id, sizeof id), "ok");
    snprintf(json, sizeof json,
             "{\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":%s,"
             "\"model\":{\"type\":\"BPE\",\"vocab\":%s,\"merges\":[\"a b\"]}}",
             bl, vocab);
    CHECK_STR_EQ(load_hf_id(json, id, sizeof id), "data.hf_unsupported");
    snprintf(json, sizeof json,
             "{\"pre_tokenizer\":%s,\"model\":{\"type\":\"WordPiece\",\"vocab\":%s}}", bl, vocab);
    CHECK_STR_EQ(load_hf_id(json, id, sizeof id), "data.hf_unsupported");
    snprintf(json, sizeof json,
             "{\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true},"
             "\"model\":{\"type\":\"BPE\",\"vocab\":%s,\"merges\":[]}}",
             vocab);
    CHECK_STR_EQ(load_hf_id(json, id, sizeof id), "data.hf_unsupported");
    snprintf(json, sizeof json,
             "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
             "\"pattern\":{\"Regex\":\"(unclosed\"},\"behavior\":\"Isolated\",\"invert\":false},"
             "{\"type\":\"ByteLevel\",\"use_regex\":false}]},"
             "\"model\":{\"type\":\"BPE\",\"vocab\":%s,\"merges\":[]}}",
             vocab);
    CHECK_STR_EQ(load_hf_id(json, id, sizeof id), "data.tokenizer_regex");
    snprintf(json, sizeof json,
             "{\"pre_tokenizer\":%s,\"added_tokens\":[{\"id\":300,\"content\":\"<x>\","
             "\"lstrip\":true}],\"model\":{\"type\":\"BPE\",\"vocab\":%s,\"merges\":[]}}",
             bl, vocab);
    CHECK_STR_EQ(load_hf_id(json, id, sizeof id), "data.hf_unsupported");
    free(vocab);
}

static void factory_follows_the_config(void) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK(tr_config_init(&c, &d) == TR_OK);
    tr_tokenizer *t;
    c.tokenizer.tokenizer_type = TR_TOKENIZER_GPT2BPE;
    CHECK(tr_tokenizer_from_config(&c.tokenizer, &t, &d) == TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.gpt2_files") != NULL);
    c.tokenizer.tokenizer_type = TR_TOKENIZER_HUGGINGFACE;
    CHECK(tr_tokenizer_from_config(&c.tokenizer, &t, &d) == TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.hf_file") != NULL);
    c.tokenizer.tokenizer_type = TR_TOKENIZER_SENTENCEPIECE;
    CHECK(tr_tokenizer_from_config(&c.tokenizer, &t, &d) == TR_ERR_INVALID);
    const tr_diag *unsupported = tr_diags_find(&d, "data.tokenizer_unsupported");
    CHECK(unsupported != NULL);
    if (unsupported) CHECK_CONTAINS(unsupported->message, "SentencePieceTokenizer");
    c.tokenizer.tokenizer_type = TR_TOKENIZER_NULL;
    c.tokenizer.vocab_size = 1000;
    CHECK(tr_tokenizer_from_config(&c.tokenizer, &t, &d) == TR_OK);
    CHECK_INT_EQ(tr_tokenizer_eod(t), 999);
    tr_tokenizer_free(t);
    c.tokenizer.tokenizer_type = TR_TOKENIZER_BYTE_LEVEL;
    CHECK(tr_tokenizer_from_config(&c.tokenizer, &t, &d) == TR_OK);
    CHECK_STR_EQ(tr_tokenizer_name(t), "ByteLevelTokenizer");
    tr_tokenizer_free(t);
    tr_config_free(&c);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(byte_level_is_identity_on_bytes), TR_TEST(null_tokenizer_reads_numbers),
             TR_TEST(byte_unicode_mapping_is_a_bijection),
             TR_TEST(added_tokens_are_matched_before_bpe), TR_TEST(gpt2_loader_refusals),
             TR_TEST(hf_loader_refuses_what_it_cannot_honour), TR_TEST(factory_follows_the_config))
