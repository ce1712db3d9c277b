/* SFT samples and offline packing (Megatron-Bridge's offline_packing_specs, reference
 * megatron-bridge-config.md §9.2; docs/data.md "Packing").
 *
 * An example of n ids gives n-1 positions: tokens ids[0..n-2], labels ids[1..n-1], loss mask
 * target[1..n-1]. An example longer than seq_length+1 ids is truncated on the right to
 * seq_length positions (it is never split across packs).
 *
 * Packing is first-fit-decreasing: examples sorted by padded length, longest first (ties in file
 * order), each placed in the first pack with room, a new pack opened when none has. Inside a pack
 * every example is padded to a multiple of pad_seq_to_mult (context parallelism needs 2*CP
 * alignment); cu_seqlens lists the padded boundaries (example k occupies [cu_seqlens[k],
 * cu_seqlens[k+1])) and cu_seqlens_unpadded[k+1] is where its real tokens end. Position
 * ids restart at 0 in every example.
 *
 * What attention must do with a pack (the contract for the kernels' document-masked op): token t
 * of example k (cu_seqlens[k] <= t < cu_seqlens[k+1]) attends causally to tokens
 * [cu_seqlens[k], t] only; padding positions get loss mask 0.
 *
 * pad_to_max_length pads every pack to seq_length tokens; the padding tail becomes one more
 * segment in cu_seqlens so it attends only to itself. pad_cu_seqlens (requires
 * pad_to_max_length) gives every pack's cu_seqlens the same length (the dataset's largest, +1
 * for the tail segment) by repeating the final boundary: zero-length segments, a fixed shape for
 * CUDA graphs. */
#ifndef TR_DATA_SFT_PACK_H
#define TR_DATA_SFT_PACK_H

#include <stdbool.h>
#include <stdint.h>

#include "core/diag.h"
#include "core/status.h"
#include "runtime/data/sft/sft.h"

typedef struct tr_sft_pack_options {
    int64_t seq_length;
    int64_t pad_seq_to_mult; /* >= 1 */
    bool pad_to_max_length;
    bool pad_cu_seqlens;
    int64_t pad_id; /* token id written into padding (its loss mask is 0) */
} tr_sft_pack_options;

typedef struct tr_sft_sample {
    int64_t n; /* tokens in this sample */
    int64_t *tokens, *labels, *position_ids;
    float *loss_mask;
    int64_t n_seqs; /* entries of cu_seqlens minus one */
    int64_t *cu_seqlens, *cu_seqlens_unpadded;
    int64_t *examples; /* which examples it holds, in order (n_examples of them) */
    int64_t n_examples;
} tr_sft_sample;

typedef struct tr_sft_samples {
    tr_sft_sample *v;
    int64_t n;
} tr_sft_samples;

/* The options the config selects: dataset.packed_sequence_size (or dataset.seq_length when
 * null), pad_seq_to_mult, pad_to_max_length, pad_cu_seqlens; padding uses pad_id. */
void tr_sft_pack_options_from_config(const tr_dataset_config *dc, int64_t pad_id,
                                     tr_sft_pack_options *o);

/* Checks the options (pad_cu_seqlens needs pad_to_max_length, positive sizes). */
tr_status tr_sft_pack_check(const tr_sft_pack_options *o, tr_diags *diags);
/* Packs all examples. Examples with fewer than 2 ids carry no target and are skipped. */
tr_status tr_sft_pack(const tr_sft_examples *ex, const tr_sft_pack_options *o, tr_sft_samples *out,
                      tr_diags *diags);
/* No packing: one sample per example (same truncation and padding rules, one segment each). */
tr_status tr_sft_unpacked(const tr_sft_examples *ex, const tr_sft_pack_options *o,
                          tr_sft_samples *out, tr_diags *diags);
void tr_sft_samples_free(tr_sft_samples *s);
/* The pack's boundaries as the attention op's per-token document start (kernels/ops.h
 * tr_attn_desc.doc_start): doc_start[t] = cu_seqlens[k] for t in example k. */
void tr_sft_doc_start(const tr_sft_sample *s, int32_t *doc_start);

#endif
