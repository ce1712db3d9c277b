/* Fuzz target: checkpoint manifest parsing and checking (JSON reader + schema + tiling checks).
 * What parses must survive write(parse(x)) and parse again to the same manifest; what fails
 * must say why. */
#include <stdlib.h>
#include <string.h>

#include "runtime/checkpoint/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tr_diags d;
    tr_diags_init(&d);
    tr_ckpt_manifest m;
    if (tr_ckpt_manifest_parse((const char *)data, size, "manifest.json", &m, &d) == TR_OK) {
        char *text = NULL;
        size_t len = 0;
        if (tr_ckpt_manifest_write(&m, &text, &len) != TR_OK) abort();
        tr_ckpt_manifest again;
        if (tr_ckpt_manifest_parse(text, len, "again.json", &again, &d) != TR_OK) abort();
        if (again.n_tensors != m.n_tensors || again.n_files != m.n_files ||
            again.iteration != m.iteration)
            abort();
        tr_ckpt_manifest_free(&again);
        free(text);
    } else if (d.n_errors == 0) {
        abort();
    }
    tr_ckpt_manifest_free(&m);
    tr_diags_free(&d);
    return 0;
}
