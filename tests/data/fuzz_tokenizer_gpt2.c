/* Fuzz target: vocab.json + merges.txt loading. The input is split at its first NUL byte (or in
 * the middle when it has none) into the two files. */
#include <stdlib.h>
#include <string.h>

#include "runtime/data/tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t vl = nul ? (size_t)(nul - data) : size / 2, ml = size - vl - (nul ? 1 : 0);
    char *v = malloc(vl ? vl : 1), *m = malloc(ml ? ml : 1);
    memcpy(v, data, vl);
    memcpy(m, data + size - ml, ml);
    tr_diags d;
    tr_diags_init(&d);
    tr_tokenizer *t = NULL;
    if (tr_tokenizer_gpt2_from_memory(v, vl, m, ml, "fuzz", &t, &d) == TR_OK) {
        tr_token_ids ids = {0};
        static const char text[] = "Hello, wörld 😀 <|endoftext|> 123's";
        tr_tokenizer_encode(t, text, sizeof text - 1, &ids, &d);
        tr_token_ids_free(&ids);
        tr_tokenizer_free(t);
    } else if (d.n_errors == 0) {
        abort();
    }
    tr_diags_free(&d);
    free(v);
    free(m);
    return 0;
}
