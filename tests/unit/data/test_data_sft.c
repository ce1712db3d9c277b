/* SFT records to examples: prompt/completion and chat rendering, loss masks per loss mode, and
 * errors that name the file and line. Expected ids are spelled out from the byte-level
 * tokenizer's definition (id = byte, end-of-document 0), not produced by the code under test. */
#include <stdlib.h>
#include <string.h>

#include "runtime/data/sft/sft.h"
#include "tests/unit/harness.h"

#define SFT_DIR TRESTLE_SOURCE_DIR "/tests/data/sft/"

static tr_sft_options defaults(void) {
    tr_sft_options o = {false, "input", "output", " ", -1, -1};
    return o;
}

/* ids/targets expected for text segments given as (text, target) pairs, then eod. */
static void expect(const tr_sft_example *e, const char *const *parts, const int *targets, int n,
                   int eod_target) {
    int64_t k = 0;
    for (int p = 0; p < n; p++)
        for (const char *c = parts[p]; *c; c++, k++) {
            CHECK(k < e->n);
            if (k >= e->n) return;
            CHECK_INT_EQ(e->ids[k], (unsigned char)*c);
            CHECK_INT_EQ(e->target[k], targets[p]);
        }
    if (eod_target >= 0) {
        CHECK_INT_EQ(e->ids[k], 0);
        CHECK_INT_EQ(e->target[k], eod_target);
        k++;
    }
    CHECK_INT_EQ(e->n, k);
}

static void test_prompt_completion_masks_the_prompt(void) {
    tr_tokenizer *tok;
    CHECK_INT_EQ(tr_tokenizer_byte_level(&tok), TR_OK);
    tr_diags d;
    tr_diags_init(&d);
    tr_sft_options o = defaults();
    tr_sft_examples ex;
    CHECK_INT_EQ(tr_sft_load_jsonl(SFT_DIR "training.jsonl", &o, tok, &ex, &d), TR_OK);
    CHECK_INT_EQ(ex.n, 3); /* the blank line is skipped */
    if (ex.n == 3) {
        const char *a[] = {"What is 2+2? ", "4"};
        expect(&ex.v[0], a, (int[]){0, 1}, 2, 1);
        const char *b[] = {"Name a color. ", "blue"}; /* both parts stripped, then separator */
        expect(&ex.v[1], b, (int[]){0, 1}, 2, 1);
    }
    tr_sft_examples_free(&ex);
    o.loss_mode = TR_SFTLOSS_FULL;
    CHECK_INT_EQ(tr_sft_load_jsonl(SFT_DIR "training.jsonl", &o, tok, &ex, &d), TR_OK);
    if (ex.n == 3) {
        const char *a[] = {"What is 2+2? ", "4"};
        expect(&ex.v[0], a, (int[]){1, 1}, 2, 1);
    }
    tr_sft_examples_free(&ex);
    o.loss_mode = -1;
    o.max_records = 2;
    CHECK_INT_EQ(tr_sft_load_split(SFT_DIR, 0, &o, tok, &ex, &d), TR_OK);
    CHECK_INT_EQ(ex.n, 2);
    tr_sft_examples_free(&ex);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
    tr_tokenizer_free(tok);
}

static void test_bad_records_name_file_and_line(void) {
    tr_tokenizer *tok;
    CHECK_INT_EQ(tr_tokenizer_byte_level(&tok), TR_OK);
    tr_diags d;
    tr_diags_init(&d);
    tr_sft_options o = defaults();
    tr_sft_examples ex;
    CHECK_INT_EQ(tr_sft_load_jsonl(SFT_DIR "broken.jsonl", &o, tok, &ex, &d), TR_ERR_INVALID);
    const tr_diag *x = tr_diags_find(&d, "data.sft_record");
    CHECK(x != NULL);
    if (x) CHECK_CONTAINS(x->message, "broken.jsonl:2");
    tr_diags_clear(&d);
    CHECK_INT_EQ(tr_sft_load_jsonl(SFT_DIR "other_columns.jsonl", &o, tok, &ex, &d),
                 TR_ERR_INVALID);
    x = tr_diags_find(&d, "data.sft_record");
    CHECK(x != NULL);
    if (x) CHECK_CONTAINS(x->keys, "dataset.prompt_column");
    tr_diags_clear(&d);
    o.prompt_column = "prompt";
    o.completion_column = "completion";
    CHECK_INT_EQ(tr_sft_load_jsonl(SFT_DIR "other_columns.jsonl", &o, tok, &ex, &d), TR_OK);
    CHECK_INT_EQ(ex.n, 1);
    tr_sft_examples_free(&ex);
    o.loss_mode = TR_SFTLOSS_ASSISTANT; /* a chat mode on prompt/completion data */
    CHECK_INT_EQ(tr_sft_load_jsonl(SFT_DIR "other_columns.jsonl", &o, tok, &ex, &d),
                 TR_ERR_INVALID);
    tr_diags_clear(&d);
    o = defaults();
    o.chat = true; /* chat mode on records without messages */
    CHECK_INT_EQ(tr_sft_load_jsonl(SFT_DIR "training.jsonl", &o, tok, &ex, &d), TR_ERR_INVALID);
    CHECK(tr_sft_load_jsonl(SFT_DIR "missing.jsonl", &o, tok, &ex, &d) != TR_OK);
    CHECK(d.n_errors > 0);
    tr_diags_free(&d);
    tr_tokenizer_free(tok);
}

static void test_chat_plain_template_and_loss_modes(void) {
    tr_tokenizer *tok;
    CHECK_INT_EQ(tr_tokenizer_byte_level(&tok), TR_OK);
    CHECK(!tr_sft_has_llama3_headers(tok));
    tr_diags d;
    tr_diags_init(&d);
    tr_sft_options o = defaults();
    o.chat = true;
    const char *parts[] = {"<|system|>\n",    "Be brief.\n", "<|user|>\n", "Hi\n",
                           "<|assistant|>\n", "Hello\n",     "<|user|>\n", "Bye\n",
                           "<|assistant|>\n", "Ciao\n"};
    struct {
        int mode;
        int targets[10];
    } cases[] = {
        {-1, {0, 0, 0, 0, 0, 1, 0, 0, 0, 1}}, /* default: assistant */
        {TR_SFTLOSS_LAST_TURN, {0, 0, 0, 0, 0, 0, 0, 0, 0, 1}},
        {TR_SFTLOSS_FULL, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
    };
    for (int c = 0; c < 3; c++) {
        o.loss_mode = cases[c].mode;
        tr_sft_examples ex;
        CHECK_INT_EQ(tr_sft_load_jsonl(SFT_DIR "chat.jsonl", &o, tok, &ex, &d), TR_OK);
        CHECK_INT_EQ(ex.n, 1);
        if (ex.n == 1) expect(&ex.v[0], parts, cases[c].targets, 10, 1);
        tr_sft_examples_free(&ex);
    }
    /* Nothing to learn from: no assistant turn. */
    const char *no_assistant = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}";
    tr_json rec;
    CHECK_INT_EQ(tr_json_parse(no_assistant, strlen(no_assistant), "t", &rec, &d), TR_OK);
    tr_sft_example e;
    o.loss_mode = -1;
    CHECK_INT_EQ(tr_sft_encode_record(&rec, &o, tok, "t.jsonl", 7, &e, &d), TR_ERR_INVALID);
    const tr_diag *x = tr_diags_find(&d, "data.sft_chat");
    CHECK(x != NULL);
    if (x) CHECK_CONTAINS(x->message, "t.jsonl:7");
    tr_json_free(&rec);
    tr_diags_free(&d);
    tr_tokenizer_free(tok);
}

/* A tokenizer with the Llama-3 header tokens gets the Llama-3 layout. */
static void test_chat_llama3_headers(void) {
    char *json;
    size_t len;
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_read_file(TRESTLE_SOURCE_DIR "/tests/data/tokenizer/llama3/tokenizer.json", "t",
                              &json, &len, &d),
                 TR_OK);
    const char *anchor = "\"added_tokens\": [";
    char *at = strstr(json, anchor);
    CHECK(at != NULL);
    if (!at) return;
    const char *extra = "{\"id\": 5000, \"content\": \"<|start_header_id|>\"}, "
                        "{\"id\": 5001, \"content\": \"<|end_header_id|>\"}, ";
    size_t head = (size_t)(at - json) + strlen(anchor);
    char *patched = malloc(len + strlen(extra) + 1);
    memcpy(patched, json, head);
    strcpy(patched + head, extra);
    strcat(patched, json + head);
    tr_tokenizer *tok;
    CHECK_INT_EQ(tr_tokenizer_hf_from_memory(patched, strlen(patched), "llama3+headers", &tok, &d),
                 TR_OK);
    free(json);
    free(patched);
    CHECK(tr_sft_has_llama3_headers(tok));
    const char *conv = "{\"messages\": [{\"role\": \"user\", \"content\": \" Hi \"}, "
                       "{\"role\": \"assistant\", \"content\": \"Yo\"}]}";
    tr_json rec;
    CHECK_INT_EQ(tr_json_parse(conv, strlen(conv), "t", &rec, &d), TR_OK);
    tr_sft_options o = defaults();
    o.chat = true;
    tr_sft_example e;
    CHECK_INT_EQ(tr_sft_encode_record(&rec, &o, tok, "t", 1, &e, &d), TR_OK);
    /* begin_of_text is id 0 and eot_id id 2 in that file; the headers are 5000/5001. */
    CHECK(e.n > 6);
    CHECK_INT_EQ(e.ids[0], 0);
    CHECK_INT_EQ(e.ids[1], 5000);
    CHECK_INT_EQ(e.ids[e.n - 1], 2);
    CHECK_INT_EQ(e.target[e.n - 1], 1); /* the assistant's eot is learned */
    int n_eot = 0, trained = 0;
    for (int64_t i = 0; i < e.n; i++) n_eot += e.ids[i] == 2, trained += e.target[i];
    CHECK_INT_EQ(n_eot, 2);
    CHECK(trained >= 2 && trained < e.n / 2);
    /* The trained span is exactly the assistant body and its eot: decode it. */
    char text[64];
    int tl = 0;
    for (int64_t i = 0; i < e.n; i++)
        if (e.target[i] && e.ids[i] != 2)
            tl += tr_tokenizer_token_bytes(tok, e.ids[i], text + tl, (int)sizeof text - tl);
    text[tl > 0 ? tl : 0] = 0;
    CHECK_STR_EQ(text, "Yo");
    tr_sft_example_free(&e);
    tr_json_free(&rec);
    tr_tokenizer_free(tok);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_prompt_completion_masks_the_prompt),
             TR_TEST(test_bad_records_name_file_and_line),
             TR_TEST(test_chat_plain_template_and_loss_modes), TR_TEST(test_chat_llama3_headers))
