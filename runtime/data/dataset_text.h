/* A plain text file read through a byte-level tokenizer: token = byte value (vocab 256). The
 * bytes are divided into train/validation/test regions by the split fractions; each region is
 * cut into samples of seq + 1 bytes that overlap by one (the last label of a sample is the
 * first input of the next). */
#ifndef TR_RUNTIME_DATASET_TEXT_H
#define TR_RUNTIME_DATASET_TEXT_H

#include "core/config.h"
#include "runtime/data/token_dataset.h"

tr_status tr_dataset_text_open(tr_token_dataset *ds, const char *path, int seq, uint64_t seed,
                               const double split[3], tr_diags *d);

#endif
