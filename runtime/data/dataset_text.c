/* See runtime/data/dataset_text.h. */
#include "runtime/data/dataset_text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/input/file.h"

typedef struct text {
    unsigned char *bytes;
    int64_t n;
    int64_t region[4]; /* byte offsets where train, validation, test and the end begin */
} text;

static tr_status text_sample(const tr_token_dataset *ds, int split, int64_t index, int32_t *out) {
    const text *t = ds->impl;
    int64_t n = ds->n_samples[split];
    if (split < 0 || split > 2 || n <= 0 || index < 0) return TR_ERR_INVALID;
    int64_t j = split == TR_SPLIT_TRAIN ? tr_train_data_shuffle(index, n, ds->seed) : index % n;
    const unsigned char *p = t->bytes + t->region[split] + j * ds->seq;
    for (int i = 0; i <= ds->seq; i++) out[i] = p[i];
    return TR_OK;
}

static void text_destroy(tr_token_dataset *ds) {
    text *t = ds->impl;
    if (t) free(t->bytes);
    free(t);
    ds->impl = NULL;
}

static tr_status read_all(const char *path, text *t, tr_diags *d) {
    int oerr;
    FILE *f = tr_file_fopen(path, 0, &oerr);
    if (!f)
        return tr_diag_add(d, TR_SEV_ERROR, "data.text_open", NULL, "dataset.data_path",
                           "point dataset.data_path at a readable regular text file",
                           "cannot open %s: %s", path, tr_file_strerror(oerr));
    size_t cap = 1 << 20, n = 0, got;
    t->bytes = malloc(cap);
    while (t->bytes && (got = fread(t->bytes + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char *b = realloc(t->bytes, cap * 2);
            if (!b) break;
            t->bytes = b;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!t->bytes) return TR_ERR_NOMEM;
    if (err)
        return tr_diag_add(d, TR_SEV_ERROR, "data.text_read", NULL, "dataset.data_path",
                           "check the file", "cannot read %s", path);
    t->n = (int64_t)n;
    return TR_OK;
}

tr_status tr_dataset_text_open(tr_token_dataset *ds, const char *path, int seq, uint64_t seed,
                               const double split[3], tr_diags *d) {
    *ds = (tr_token_dataset){
        .seq = seq, .eod = -1, .seed = seed, .sample = text_sample, .destroy = text_destroy};
    if (seq < 1) return TR_ERR_INVALID;
    text *t = calloc(1, sizeof *t);
    if (!t) return TR_ERR_NOMEM;
    ds->impl = t;
    tr_status s = read_all(path, t, d);
    if (s != TR_OK) {
        text_destroy(ds);
        return s;
    }
    double acc = 0.0;
    for (int i = 0; i < 3; i++) {
        t->region[i] = i == 0 ? 0 : (int64_t)(acc * (double)t->n);
        acc += split[i];
    }
    t->region[3] = t->n;
    for (int i = 0; i < 3; i++) {
        int64_t len = t->region[i + 1] - t->region[i];
        ds->n_samples[i] = len > seq ? (len - 1) / seq : 0;
    }
    if (ds->n_samples[TR_SPLIT_TRAIN] < 1) {
        long long bytes = (long long)t->n;
        text_destroy(ds);
        return tr_diag_add(
            d, TR_SEV_ERROR, "data.text_too_small", NULL, "dataset.data_path,dataset.split",
            "use a larger file, a shorter seq_length, or a larger train split",
            "%s has %lld bytes: not one training sample of %d tokens", path, bytes, seq + 1);
    }
    return TR_OK;
}
