#include "runtime/data/datasets/sampler.h"

tr_status tr_sampler_check(const tr_sampler *s, tr_diags *diags) {
    tr_status st = TR_OK;
    if (s->total_samples <= 0)
        st = tr_diag_add(diags, TR_SEV_ERROR, "data.sampler_empty", NULL, "dataset",
                         "check the data: the dataset has no samples",
                         "the dataset to sample has no samples (total %lld)",
                         (long long)s->total_samples);
    if (s->consumed_samples < 0 ||
        (s->total_samples > 0 && s->consumed_samples >= s->total_samples))
        st = tr_diag_add(diags, TR_SEV_ERROR, "data.sampler_exhausted", NULL, "train.train_iters",
                         "train for fewer iterations or provide more data; when resuming, "
                         "the checkpoint's consumed samples must be below the dataset length",
                         "no samples left: %lld consumed of %lld", (long long)s->consumed_samples,
                         (long long)s->total_samples);
    if (s->micro_batch_size <= 0 || s->dp_size <= 0 || s->dp_rank < 0 || s->dp_rank >= s->dp_size)
        st = tr_diag_add(diags, TR_SEV_ERROR, "data.sampler_layout", NULL, "train.micro_batch_size",
                         "micro batch size and data-parallel size must be positive and the rank "
                         "below the size",
                         "bad sampler layout: micro batch %lld, data-parallel rank %lld of %lld",
                         (long long)s->micro_batch_size, (long long)s->dp_rank,
                         (long long)s->dp_size);
    return st;
}

int64_t tr_sampler_micro_batch(const tr_sampler *s, int64_t k, int64_t *out) {
    int64_t group = s->micro_batch_size * s->dp_size;
    int64_t start = s->consumed_samples + k * group;
    if (start >= s->total_samples) return 0;
    int64_t end = start + group;
    if (end > s->total_samples) {
        if (s->drop_last) return 0;
        end = s->total_samples;
    }
    int64_t lo = start + s->dp_rank * s->micro_batch_size, hi = lo + s->micro_batch_size;
    if (hi > end) hi = end;
    int64_t n = 0;
    for (int64_t i = lo; i < hi; i++) out[n++] = i;
    return n;
}

tr_status tr_sampler_global_batch(const tr_sampler *s, int64_t global_batch_size, int64_t *out,
                                  int64_t *n, tr_diags *diags) {
    *n = 0;
    int64_t group = s->micro_batch_size * s->dp_size;
    if (group <= 0 || global_batch_size <= 0 || global_batch_size % group != 0)
        return tr_diag_add(
            diags, TR_SEV_ERROR, "data.sampler_global_batch", NULL, "train.global_batch_size",
            "make train.global_batch_size a multiple of micro_batch_size times "
            "the data-parallel size",
            "global batch %lld is not a multiple of micro batch %lld x "
            "data-parallel size %lld",
            (long long)global_batch_size, (long long)s->micro_batch_size, (long long)s->dp_size);
    for (int64_t k = 0; k < global_batch_size / group; k++) {
        int64_t got = tr_sampler_micro_batch(s, k, out + *n);
        *n += got;
        if (got < s->micro_batch_size) break;
    }
    return TR_OK;
}
