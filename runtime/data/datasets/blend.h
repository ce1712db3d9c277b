/* Blends and the top-level dataset builder: Megatron's BlendedMegatronDatasetBuilder and
 * BlendedDataset (reference megatron-core.md §8.3, docs/data.md "Blends"). A blend is a list of
 * indexed-dataset prefixes with optional weights ("0.3 a 0.7 b"); weights are normalized, each
 * component builds ceil(ceil(size*w)*(1+surplus)) samples, and the blended order picks, for each
 * output sample, the component furthest behind its share. */
#ifndef TR_DATA_BLEND_H
#define TR_DATA_BLEND_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "runtime/data/datasets/gpt_dataset.h"

typedef struct tr_blend {
    int n;
    char **prefixes;
    double *weights; /* NULL: no weights (Megatron's None) */
} tr_blend;

/* Reads Megatron's blend list: "w1 p1 w2 p2 ..." or "p1 p2 ...", given as list items each of which
 * may hold several whitespace-separated words. key names the field in messages. */
tr_status tr_blend_parse(const tr_str_list *list, const char *key, tr_blend *out, tr_diags *diags);
void tr_blend_free(tr_blend *b);
/* numpy's w / w.sum() (pairwise summation for 8 or more weights, as numpy does). */
void tr_blend_normalize(const double *w, int n, double *out);

/* helpers.cpp build_blending_indices: for each of size samples the component with the largest
 * weight*max(s,1) - count (first wins). */
void tr_blend_indices(const double *weights, int n, int64_t size, int16_t *dataset_index,
                      int64_t *dataset_sample_index);
/* helpers.cpp build_exhaustive_blending_indices: exactly sizes[i] samples of component i. */
void tr_blend_indices_exhaustive(const int64_t *sizes, int n, int16_t *dataset_index,
                                 int64_t *dataset_sample_index);

/* What to build: either one blend cut by a split string, per-split blends, or mock data. */
typedef struct tr_gpt_build_spec {
    bool mock;
    int64_t mock_vocab, mock_eod;
    const tr_blend *blend; /* with split */
    const char *split;
    const tr_blend *per_split[TR_N_SPLITS]; /* NULL entries: no dataset for that split */
    tr_gpt_params params;
    double surplus;             /* dataset.mid_level_dataset_surplus */
    int64_t sizes[TR_N_SPLITS]; /* samples wanted per split; -1 is Megatron's None */
    const char *cache_dir;
    tr_index_cache_mode mode;
} tr_gpt_build_spec;

/* One split's top-level dataset: a single GPT dataset or a blend of several. */
typedef struct tr_gpt_split_data {
    bool present;
    int n_parts;
    tr_gpt_dataset *parts;
    bool blended;
    int16_t *dataset_index;
    int64_t *dataset_sample_index;
    int64_t size;
} tr_gpt_split_data;

typedef struct tr_gpt_data {
    int n_low;
    tr_gpt_lowlevel *low;
    tr_gpt_split_data split[TR_N_SPLITS];
} tr_gpt_data;

tr_status tr_gpt_data_build(tr_gpt_data *out, const tr_gpt_build_spec *spec, tr_diags *diags);
void tr_gpt_data_free(tr_gpt_data *d);
/* Sample i of a split (seq_length + add_extra_token ids); *component is the blend component. */
tr_status tr_gpt_data_text(const tr_gpt_data *d, int split, int64_t i, int64_t *text,
                           int *component);

/* Blends parsed out of a config, owned by the spec that points at them. */
typedef struct tr_gpt_spec_storage {
    tr_blend blend, per_split[TR_N_SPLITS];
} tr_gpt_spec_storage;

/* Fills spec from the config's dataset section (dataset.data_path + split, or the per-split
 * paths, or mock data when neither is set), the tokenizer's end-of-document / pad / vocabulary
 * and Megatron's sample counts from train.train_iters, train.global_batch_size and validation.*.
 * Index caching: dataset.path_to_cache, or Megatron's default <prefix>/cache/GPTDataset_indices
 * next to the data when null (mock data is never cached). mode says which rank this is. */
tr_status tr_gpt_spec_from_config(const tr_config *c, int64_t eod, int64_t pad, int64_t vocab_size,
                                  tr_index_cache_mode mode, tr_gpt_build_spec *spec,
                                  tr_gpt_spec_storage *storage, tr_diags *diags);
void tr_gpt_spec_storage_free(tr_gpt_spec_storage *st);

/* Megatron's sample counts per split: train_iters*gbs,
 * (train_iters/eval_interval+1)*eval_iters*gbs, eval_iters*gbs. */
void tr_gpt_split_sizes(int64_t train_iters, int64_t eval_interval, int64_t eval_iters,
                        int64_t global_batch, int64_t sizes[TR_N_SPLITS]);

#endif
