/* Fuzz target: the .idx parser must accept or reject any bytes without reading out of bounds, and
 * whatever it accepts must be internally consistent. */
#include <stdlib.h>
#include <string.h>

#include "runtime/data/datasets/indexed_dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An exact-size heap copy, so ASan sees any read past the end. */
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    tr_diags d;
    tr_diags_init(&d);
    tr_idx_view v;
    if (tr_idx_parse(buf, size, -1, "fuzz.idx", &v, &d) == TR_OK) {
        int64_t end = 0;
        for (uint64_t i = 0; i < v.n_sequences; i++) {
            if (tr_idx_pointer(&v, i) != end || tr_idx_length(&v, i) < 0) abort();
            end += tr_idx_length(&v, i) * (int64_t)tr_token_dtype_size(v.dtype);
        }
        if (tr_idx_document(&v, v.n_documents - 1) != (int64_t)v.n_sequences) abort();
    } else if (d.n_errors == 0) {
        abort(); /* every refusal must explain itself */
    }
    tr_diags_free(&d);
    free(buf);
    return 0;
}
