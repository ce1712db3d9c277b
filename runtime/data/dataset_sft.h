/* Fine-tuning data for the training loop: the JSONL examples of dataset.dataset_root (see
 * runtime/data/sft/sft.h), packed (dataset.enable_offline_packing) or one per sequence, served as
 * tr_token_sequence: every sequence is padded to model.seq_length, padding is one more document
 * that is never trained on. docs/data.md "SFT in the training loop". */
#ifndef TR_RUNTIME_DATASET_SFT_H
#define TR_RUNTIME_DATASET_SFT_H

#include "runtime/data/sft/pack.h"
#include "core/config.h"
#include "runtime/data/token_dataset.h"

tr_status tr_dataset_sft_open(const tr_config *c, tr_token_dataset *ds, tr_diags *d);

/* Sample s as a sequence of seq tokens (the loop's view): ids, targets (-1 where the loss mask
 * is 0), doc_start and per-document positions; positions past s->n are padding with pad_id. */
tr_status tr_sft_sample_to_sequence(const tr_sft_sample *s, int seq, int32_t pad_id,
                                    const tr_token_sequence *out);

#endif
