/* Fuzz target: tokenizer.json loading (JSON reader + HF loader). Whatever loads must encode text.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/data/tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    tr_diags d;
    tr_diags_init(&d);
    tr_tokenizer *t = NULL;
    if (tr_tokenizer_hf_from_memory(buf, size, "fuzz.json", &t, &d) == TR_OK) {
        tr_token_ids ids = {0};
        static const char text[] = "Hello, wörld 😀 <|end_of_text|> 123";
        tr_tokenizer_encode(t, text, sizeof text - 1, &ids, &d);
        tr_token_ids_free(&ids);
        tr_tokenizer_free(t);
    } else if (d.n_errors == 0) {
        abort();
    }
    tr_diags_free(&d);
    free(buf);
    return 0;
}
