/* Fuzz target: the safetensors reader must accept or reject any bytes without reading out of
 * bounds, and whatever it accepts must be a file whose tensors tile its data. */
#include <stdlib.h>
#include <string.h>

#include "runtime/hf/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An exact-size heap copy, so ASan sees any read past the end. */
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    tr_diags d;
    tr_diags_init(&d);
    tr_st_file f;
    if (tr_st_parse(&f, buf, size, "fuzz.safetensors", &d) == TR_OK) {
        uint64_t total = 0;
        for (int i = 0; i < f.n; i++) {
            const tr_st_tensor *t = &f.t[i];
            uint64_t bytes = (uint64_t)tr_st_numel(t) * tr_st_dtype_size(t->dtype);
            if (t->end - t->begin != bytes || tr_st_find(&f, t->name) != t) abort();
            const uint8_t *p = t->data;
            if (p < buf || p + bytes > buf + size) abort();
            if (bytes) total ^= p[bytes - 1]; /* touch the last byte: in bounds or ASan says so */
            total += bytes;
        }
        tr_st_close(&f);
        (void)total;
    } else if (d.n_errors == 0) {
        abort(); /* every refusal must explain itself */
    }
    tr_diags_free(&d);
    free(buf);
    return 0;
}
