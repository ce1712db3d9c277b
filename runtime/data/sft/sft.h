/* SFT examples from JSONL (Megatron-Bridge's GPTSFTDatasetConfig over a local dataset_root; see
 * docs/data.md "SFT data"). Each record becomes one example: token ids plus a per-token flag
 * saying whether that token is a training target. Two record shapes:
 *   prompt/completion: {"input": ..., "output": ...} (column names and separator from the config);
 *     tokens = encode(strip(prompt) + separator) ++ encode(strip(completion)) ++ [eod]; the two
 *     parts are encoded separately, so no BPE merge crosses the prompt/completion boundary.
 *   chat: {"messages": [{"role": ..., "content": ...}, ...]} rendered by a fixed, documented
 *     template (Hugging Face Jinja chat templates are NOT executed): Llama-3 headers when the
 *     tokenizer has <|start_header_id|>, <|end_header_id|> and <|eot_id|> as single tokens, else
 *     "<|role|>\ncontent\n" per message followed by the end-of-document id.
 * Loss modes: completion (prompt/completion default: only the completion and eod), full (every
 * token), assistant (chat default: every assistant turn), last_turn (only the last assistant
 * turn). Targets are flagged on the tokens themselves; a sample's loss mask is the flags shifted
 * by one like the labels. */
#ifndef TR_DATA_SFT_H
#define TR_DATA_SFT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/diag.h"
#include "core/status.h"
#include "runtime/io/json.h"
#include "runtime/data/tokenizer/tokenizer.h"

typedef struct tr_sft_example {
    int64_t *ids;
    uint8_t *target; /* 1 where the token is trained on */
    int64_t n;
} tr_sft_example;

typedef struct tr_sft_examples {
    tr_sft_example *v;
    int64_t n, cap;
} tr_sft_examples;

typedef struct tr_sft_options {
    bool chat;
    const char *prompt_column, *completion_column, *separator;
    int loss_mode;       /* TR_SFTLOSS_*, or -1 for the default of the record shape */
    int64_t max_records; /* -1: all */
} tr_sft_options;

/* The options the config's dataset section selects. */
void tr_sft_options_from_config(const tr_dataset_config *dc, tr_sft_options *o);

/* One parsed JSONL record to an example; name and line locate it in messages. */
tr_status tr_sft_encode_record(const tr_json *record, const tr_sft_options *o,
                               const tr_tokenizer *tok, const char *name, int line,
                               tr_sft_example *out, tr_diags *diags);
/* Chat messages (the "messages" array) to an example, through the template described above. */
tr_status tr_sft_encode_chat(const tr_json *messages, int loss_mode, const tr_tokenizer *tok,
                             const char *name, int line, tr_sft_example *out, tr_diags *diags);
/* true when tok encodes each Llama-3 header marker as one token (the template then uses them). */
bool tr_sft_has_llama3_headers(const tr_tokenizer *tok);

/* Every non-empty line of a JSONL file (a blank line is skipped, a broken one is an error that
 * names the file and line). */
tr_status tr_sft_load_jsonl(const char *path, const tr_sft_options *o, const tr_tokenizer *tok,
                            tr_sft_examples *out, tr_diags *diags);
/* dataset_root/{training,validation,test}.jsonl for split TR_SPLIT_TRAIN/VALID/TEST (0/1/2). */
tr_status tr_sft_load_split(const char *dataset_root, int split, const tr_sft_options *o,
                            const tr_tokenizer *tok, tr_sft_examples *out, tr_diags *diags);

tr_status tr_sft_example_append(tr_sft_example *e, const tr_token_ids *ids, bool target);
void tr_sft_example_free(tr_sft_example *e);
void tr_sft_examples_free(tr_sft_examples *v);

#endif
