/* run_recipe --dump-samples N: what the model trains on. */
#ifndef TR_CLI_SAMPLES_H
#define TR_CLI_SAMPLES_H

#include "core/diag.h"
#include "scripts/cli_args.h"

/* Resolves the config as a launch would (launch inputs required), opens its training data and
 * prints the first n samples of the training split in the order the loop consumes them: each
 * sample's documents (GPT data: the low-level dataset and its document ids) and its
 * seq_length + 1 tokens (fine-tuning data: input ids and how many tokens carry loss). */
tr_status tr_cli_dump_samples(const tr_cli *cli, int n, tr_diags *d);

#endif
