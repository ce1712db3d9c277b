/* Fuzz target: model.safetensors.index.json's parser (runtime/hf/weights.c) must accept or
 * refuse any bytes with a diagnostic, and whatever it accepts names only plain file names
 * beside the index (an index can never point outside its directory) and non-empty tensor
 * names. */
#include <stdlib.h>
#include <string.h>

#include "runtime/hf/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1); /* exact size: ASan sees a read past the end */
    memcpy(buf, data, size);
    tr_diags d;
    tr_diags_init(&d);
    tr_hf_index x;
    if (tr_hf_index_parse(buf, size, "fuzz.index.json", &x, &d) == TR_OK) {
        for (int i = 0; i < x.n; i++) {
            const char *f = x.files[i];
            if (!x.tensors[i][0] || !f[0] || strchr(f, '/') || strcmp(f, ".") == 0 ||
                strcmp(f, "..") == 0)
                abort();
        }
        tr_hf_index_free(&x);
    } else if (d.n_errors == 0) {
        abort(); /* every refusal must explain itself */
    }
    tr_diags_free(&d);
    free(buf);
    return 0;
}
