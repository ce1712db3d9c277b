/* Fuzz target: one JSONL record of SFT data (JSON reader + prompt/completion and chat encoding,
 * byte-level tokenizer). The first byte picks the record shape. An accepted record has at least
 * one token and flags that are 0 or 1; a refused one says why. */
#include <stdlib.h>
#include <string.h>

#include "runtime/data/sft/sft.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static tr_tokenizer *tok;
    if (!tok && tr_tokenizer_byte_level(&tok) != TR_OK) abort();
    tr_sft_options o = {(data[0] & 1) != 0, "input", "output", "\n", -1, -1};
    tr_diags d;
    tr_diags_init(&d);
    tr_json record;
    if (tr_json_parse((const char *)data + 1, size - 1, "fuzz.jsonl", &record, &d) == TR_OK) {
        tr_sft_example e = {0};
        if (tr_sft_encode_record(&record, &o, tok, "fuzz.jsonl", 1, &e, &d) == TR_OK) {
            if (e.n < 1) abort();
            for (int64_t i = 0; i < e.n; i++)
                if (e.target[i] > 1) abort();
        } else if (d.n_errors == 0) {
            abort();
        }
        tr_sft_example_free(&e);
        tr_json_free(&record);
    } else if (d.n_errors == 0) {
        abort();
    }
    tr_diags_free(&d);
    return 0;
}
