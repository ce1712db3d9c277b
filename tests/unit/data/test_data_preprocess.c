/* preprocess: JSONL -> .bin/.idx gives, for any worker count, exactly the tokenizer's ids of each
 * record plus EOD, one document per record; bad records are named by line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/data/datasets/indexed_dataset.h"
#include "runtime/io/json.h"
#include "runtime/data/preprocess.h"
#include "tests/unit/harness.h"

#define DIR TRESTLE_SOURCE_DIR "/tests/data/tokenizer/"

static char tmpdir[64];

static void same_as_direct_encoding_for_any_worker_count(void) {
    strcpy(tmpdir, "/tmp/tr_data_preXXXXXX");
    if (!mkdtemp(tmpdir)) abort();
    tr_tokenizer *tok;
    CHECK(tr_tokenizer_hf(DIR "llama3", &tok, NULL) == TR_OK);
    char *corpus;
    size_t clen;
    CHECK(tr_read_file(DIR "corpus.jsonl", NULL, &corpus, &clen, NULL) == TR_OK);
    const char *keys[] = {"text"};
    for (int workers = 1; workers <= 3; workers += 2) {
        char prefix[256], ds_prefix[300];
        snprintf(prefix, sizeof prefix, "%s/w%d", tmpdir, workers);
        tr_preprocess_opts o = {DIR "corpus.jsonl", prefix, keys, 1, workers, true, NULL};
        tr_preprocess_stats st;
        tr_diags d;
        tr_diags_init(&d);
        CHECK(tr_preprocess_jsonl(&o, tok, &st, &d) == TR_OK);
        tr_diags_free(&d);
        snprintf(ds_prefix, sizeof ds_prefix, "%s_text_document", prefix);
        tr_indexed_dataset ds;
        CHECK(tr_indexed_open(&ds, ds_prefix, NULL) == TR_OK);
        CHECK_INT_EQ(ds.idx.dtype, TR_DTYPE_UINT16);
        CHECK_INT_EQ(tr_indexed_n_documents(&ds), st.documents);
        char *line = corpus;
        uint64_t doc = 0;
        int bad = 0;
        tr_token_ids want = {0};
        int64_t *got = malloc(1 << 20);
        while (*line && doc < tr_indexed_n_sequences(&ds)) {
            char *nl = strchr(line, '\n');
            tr_json v;
            CHECK(tr_json_parse(line, (size_t)(nl - line), "c", &v, NULL) == TR_OK);
            want.n = 0;
            tr_tokenizer_encode(tok, tr_json_get(&v, "text")->str, tr_json_get(&v, "text")->len,
                                &want, NULL);
            tr_token_ids_push(&want, tr_tokenizer_eod(tok));
            uint64_t len = (uint64_t)tr_idx_length(&ds.idx, doc);
            if (len != want.n || tr_indexed_read(&ds, doc, 0, len, got) != TR_OK ||
                memcmp(got, want.ids, len * sizeof *got) != 0)
                bad++;
            tr_json_free(&v);
            line = nl + 1;
            doc++;
        }
        CHECK_INT_EQ(bad, 0);
        CHECK_INT_EQ(doc, 729);
        free(got);
        tr_token_ids_free(&want);
        tr_indexed_close(&ds);
    }
    free(corpus);
    tr_tokenizer_free(tok);
}

static void bad_records_are_named_by_line(void) {
    char input[256], prefix[256], bin[300];
    snprintf(input, sizeof input, "%s/bad.jsonl", tmpdir);
    snprintf(prefix, sizeof prefix, "%s/bad", tmpdir);
    const char *keys[] = {"text"};
    tr_tokenizer *tok;
    CHECK(tr_tokenizer_byte_level(&tok) == TR_OK);
    const char *cases[][2] = {{"{\"text\":\"a\"}\n\n{\"txt\":\"b\"}\n", "data.jsonl_key"},
                              {"{\"text\":\"a\"}\n{\"text\":\"b\",}\n", "data.json_syntax"}};
    for (int c = 0; c < 2; c++) {
        FILE *f = fopen(input, "w");
        fputs(cases[c][0], f);
        fclose(f);
        tr_preprocess_opts o = {input, prefix, keys, 1, 2, true, NULL};
        tr_preprocess_stats st;
        tr_diags d;
        tr_diags_init(&d);
        CHECK(tr_preprocess_jsonl(&o, tok, &st, &d) != TR_OK);
        CHECK(tr_diags_find(&d, cases[c][1]) != NULL);
        if (d.n) CHECK_CONTAINS(d.items[0].message, c == 0 ? "bad.jsonl:3" : "bad.jsonl:2");
        tr_diags_free(&d);
        snprintf(bin, sizeof bin, "%s_text_document.bin", prefix);
        CHECK(access(bin, F_OK) != 0); /* no half-written dataset left behind */
    }
    tr_tokenizer_free(tok);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "  could not remove %s\n", tmpdir);
}

TR_TEST_MAIN(TR_TEST(same_as_direct_encoding_for_any_worker_count),
             TR_TEST(bad_records_are_named_by_line))
