/* Opening the training data a config names, as a token dataset (runtime/data/token_dataset.h):
 * the registry of the sources runtime/data/dataset_*.h. */
#ifndef TR_RUNTIME_TRAIN_DATA_H
#define TR_RUNTIME_TRAIN_DATA_H

#include "core/config.h"
#include "core/diag.h"

#include "runtime/data/token_dataset.h"

/* Opens the dataset the config names: dataset.type gpt without data files is the mock dataset,
 * with data files Megatron's indexed data, dataset.type text is a byte-level text file,
 * dataset.type sft JSONL under dataset.dataset_root (runtime/data/dataset_sft.h); anything else is
 * a diagnostic. */
tr_status tr_train_data_open(const tr_config *c, tr_token_dataset *ds, tr_diags *d);
void tr_train_data_close(tr_token_dataset *ds);

#endif
