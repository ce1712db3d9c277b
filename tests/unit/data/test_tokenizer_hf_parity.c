/* Identical ids to Hugging Face `tokenizers` on a 1.15 MB multilingual corpus (emoji, combining
 * marks, 14 scripts, odd whitespace), for a GPT-2-style vocab.json/merges.txt and a Llama-3-style
 * tokenizer.json. The expected counts and id hashes come from HF (gen_tokenizer_fixtures.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/json.h"
#include "runtime/data/tokenizer/tokenizer.h"
#include "tests/unit/harness.h"

#define DIR TRESTLE_SOURCE_DIR "/tests/data/tokenizer/"

static uint64_t fnv1a(const int64_t *ids, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)(int32_t)ids[i];
        for (int b = 0; b < 4; b++) h = (h ^ ((v >> (8 * b)) & 0xff)) * 0x100000001b3ULL;
    }
    return h;
}

static void compare(const tr_tokenizer *tok, const char *expected_path) {
    char *corpus, *expected;
    size_t clen, elen;
    CHECK(tr_read_file(DIR "corpus.jsonl", NULL, &corpus, &clen, NULL) == TR_OK);
    CHECK(tr_read_file(expected_path, NULL, &expected, &elen, NULL) == TR_OK);
    if (!corpus || !expected) return;
    char *line = corpus, *exp = expected;
    int doc = 0, mismatches = 0;
    size_t total_bytes = 0;
    tr_token_ids ids = {0};
    while (*line) {
        char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        tr_json rec;
        CHECK(tr_json_parse(line, n, "corpus.jsonl", &rec, NULL) == TR_OK);
        const tr_json *text = tr_json_get(&rec, "text");
        CHECK(text != NULL);
        unsigned long long want_n = 0, want_h = 0;
        CHECK(sscanf(exp, "%llu %llx", &want_n, &want_h) == 2);
        ids.n = 0;
        if (text) {
            CHECK(tr_tokenizer_encode(tok, text->str, text->len, &ids, NULL) == TR_OK);
            total_bytes += text->len;
            if ((ids.n != want_n || fnv1a(ids.ids, ids.n) != want_h) && mismatches++ < 3)
                fprintf(stderr, "  document %d: %zu ids, HF has %llu (text starts \"%.60s\")\n",
                        doc, ids.n, want_n, text->str);
        }
        tr_json_free(&rec);
        doc++;
        exp = strchr(exp, '\n');
        if (!exp || !nl) break;
        exp++;
        line = nl + 1;
    }
    CHECK_INT_EQ(mismatches, 0);
    CHECK(total_bytes >= 1000000);
    CHECK(doc > 500);
    tr_token_ids_free(&ids);
    free(corpus);
    free(expected);
}

static void gpt2_matches_hf(void) {
    tr_tokenizer *tok;
    tr_diags d;
    tr_diags_init(&d);
    tr_status s = tr_tokenizer_gpt2(DIR "gpt2/vocab.json", DIR "gpt2/merges.txt", &tok, &d);
    if (s != TR_OK) tr_diags_print_text(&d, stderr, false);
    CHECK(s == TR_OK);
    if (s == TR_OK) {
        CHECK_INT_EQ(tr_tokenizer_eod(tok), 0); /* <|endoftext|> was the trainer's first special */
        compare(tok, DIR "expected_gpt2.txt");
        tr_tokenizer_free(tok);
    }
    tr_diags_free(&d);
}

static void llama3_style_tokenizer_json_matches_hf(void) {
    tr_tokenizer *tok;
    tr_diags d;
    tr_diags_init(&d);
    tr_status s = tr_tokenizer_hf(DIR "llama3", &tok, &d);
    if (s != TR_OK) tr_diags_print_text(&d, stderr, false);
    CHECK(s == TR_OK);
    if (s == TR_OK) {
        CHECK_INT_EQ(tr_tokenizer_eod(tok), 1); /* <|end_of_text|> */
        compare(tok, DIR "expected_llama3.txt");
        tr_tokenizer_free(tok);
    }
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(gpt2_matches_hf), TR_TEST(llama3_style_tokenizer_json_matches_hf))
