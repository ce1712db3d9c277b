/* What the architecture maps share (runtime/hf/internal.h): a required tensor checked for shape
 * and dtype, its elements widened to fp32, the diagnostic naming a tensor. */
#include <stdio.h>
#include <string.h>

#include "kernels/common/lowp_bits.h"
#include "runtime/hf/internal.h"

tr_status tr_hf_tensor_error(tr_diags *d, const char *name, const char *what) {
    return tr_diag_add(d, TR_SEV_ERROR, "hf.tensor", NULL, NULL,
                       "import a checkpoint of the architecture and size config.json describes",
                       "Hugging Face tensor %s: %s", name, what);
}

/* A required tensor of `rows` x `cols` (cols 0: a vector of rows). */
tr_status tr_hf_need(const tr_hf_weights *w, const char *name, int64_t rows, int64_t cols,
                     const tr_st_tensor **out, tr_diags *d) {
    const tr_st_tensor *t = tr_hf_weights_find(w, name);
    *out = t;
    if (!t) return tr_hf_tensor_error(d, name, "missing from the checkpoint");
    if (t->dtype != TR_ST_F32 && t->dtype != TR_ST_BF16 && t->dtype != TR_ST_F16)
        return tr_hf_tensor_error(d, name, "dtype is not F32, BF16 or F16");
    bool ok = cols ? t->ndim == 2 && t->shape[0] == rows && t->shape[1] == cols
                   : t->ndim == 1 && t->shape[0] == rows;
    if (!ok) {
        char what[160];
        if (cols)
            snprintf(what, sizeof what, "shape should be [%lld, %lld]", (long long)rows,
                     (long long)cols);
        else
            snprintf(what, sizeof what, "shape should be [%lld]", (long long)rows);
        return tr_hf_tensor_error(d, name, what);
    }
    return TR_OK;
}

float tr_hf_value(const tr_st_tensor *t, int64_t i) {
    const unsigned char *p = t->data;
    if (t->dtype == TR_ST_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return t->dtype == TR_ST_F16 ? tr_f16_value(h) : tr_bf16_value(h);
}

void tr_hf_values(const tr_st_tensor *t, int64_t i, int64_t n, float *out) {
    const unsigned char *p = t->data;
    if (t->dtype == TR_ST_F32) {
        memcpy(out, p + 4 * i, (size_t)n * 4);
        return;
    }
    for (int64_t j = 0; j < n; j++) {
        uint16_t h;
        memcpy(&h, p + 2 * (i + j), 2);
        out[j] = t->dtype == TR_ST_F16 ? tr_f16_value(h) : tr_bf16_value(h);
    }
}

int64_t tr_hf_row_run(const tr_hf_arch *a, const tr_hf_source *s, int64_t n) {
    return !a->rows_in_order || a->rows_in_order(s) ? n : 1;
}
