/* Parameter and FLOP counts from the model section alone (see docs/providers.md for the
 * formulas). finalize() calls tr_model_stats_fill once the vocabulary is padded. */
#ifndef TR_PROVIDERS_MODEL_STATS_H
#define TR_PROVIDERS_MODEL_STATS_H

#include "core/config.h"

typedef struct tr_model_stats {
    int64_t num_params;        /* every trainable parameter */
    int64_t num_active_params; /* parameters one token passes through (top-k experts only) */
    double flops_per_token;    /* training: forward + backward (3 x forward) */
    /* Of those, the multi-token-prediction depths' (DeepSeek-V3's 671B main model is
     * num_params - num_mtp_params). */
    int64_t num_mtp_params, num_mtp_active_params;
} tr_model_stats;

/* vocab: the (padded) vocabulary the embedding and output layer have. Nonsense inputs (zero
 * layers, zero heads) give zeros rather than errors: validate() reports them. */
tr_model_stats tr_model_stats_compute(const tr_model_config *m, int64_t vocab);

/* Write derived.num_params, derived.num_active_params (and their MTP parts) and
 * derived.flops_per_token. The
 * vocabulary is derived.padded_vocab_size when set, else model.vocab_size. */
tr_status tr_model_stats_fill(tr_config *c);

#endif
