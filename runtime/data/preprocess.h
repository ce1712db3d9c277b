/* JSONL -> Megatron indexed dataset, as Megatron's tools/preprocess_data.py does without
 * --split-sentences: one sequence per document per JSON key, optional end-of-document token,
 * written to <prefix>_<key>_document.{bin,idx}. Records are tokenized by worker threads in
 * batches and written in input order, so the output does not depend on the thread count. */
#ifndef TR_DATA_PREPROCESS_H
#define TR_DATA_PREPROCESS_H

#include <stdbool.h>
#include <stdio.h>

#include "runtime/data/tokenizer/tokenizer.h"

typedef struct tr_preprocess_opts {
    const char *input;         /* JSONL file */
    const char *output_prefix; /* files are <prefix>_<key>_document.{bin,idx} */
    const char *const *json_keys;
    int n_keys;
    int workers;
    bool append_eod;
    FILE *progress; /* progress line (docs/s, MB/s) goes here; NULL for none */
} tr_preprocess_opts;

typedef struct tr_preprocess_stats {
    long long documents, tokens, bytes;
    double seconds;
} tr_preprocess_stats;

tr_status tr_preprocess_jsonl(const tr_preprocess_opts *o, const tr_tokenizer *tok,
                              tr_preprocess_stats *stats, tr_diags *diags);

#endif
