/* See runtime/data/train_data.h. */
#include "runtime/data/train_data.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/data/dataset_indexed.h"
#include "runtime/data/dataset_sft.h"
#include "runtime/data/dataset_text.h"

tr_status tr_train_data_open(const tr_config *c, tr_token_dataset *ds, tr_diags *d) {
    memset(ds, 0, sizeof *ds);
    const tr_dataset_config *dc = &c->dataset;
    int seq = (int)c->model.seq_length;
    double split[3];
    if (dc->type == TR_DS_TEXT) {
        if (dc->data_path.null || dc->data_path.n != 1)
            return tr_diag_add(d, TR_SEV_ERROR, "data.text_path", NULL, "dataset.data_path",
                               "set dataset.data_path=FILE.txt",
                               "dataset.type text needs one "
                               "text file in dataset.data_path");
        TR_TRY(tr_train_data_split(dc->split, "95,5,0", split, d));
        return tr_dataset_text_open(ds, dc->data_path.v[0], seq, (uint64_t)dc->random_seed, split,
                                    d);
    }
    if (dc->type == TR_DS_SFT) return tr_dataset_sft_open(c, ds, d);
    /* Megatron-prepared data (indexed .bin/.idx files, a blend, per-split blends) or, without
     * any data path, megatron-core's MockGPTDataset: the same GPT dataset indices either way. */
    if (dc->type == TR_DS_GPT) return tr_indexed_token_dataset_open(c, true, ds, d);
    return tr_diag_add(
        d, TR_SEV_ERROR, "runtime.unsupported", NULL, "dataset.type,dataset.data_path",
        "train on mock data (dataset.type=gpt without data_path) or a text file "
        "(dataset.type=text dataset.data_path=FILE), indexed data (dataset.data_path) "
        "or JSONL fine-tuning data (dataset.type=sft dataset.dataset_root=DIR)",
        "the training runtime does not read this kind of dataset");
}

void tr_train_data_close(tr_token_dataset *ds) {
    if (ds->destroy) ds->destroy(ds);
    memset(ds, 0, sizeof *ds);
}
