/* run_recipe --validate-all: the recipe catalog checked for a list of world sizes. */
#ifndef TR_CLI_CATALOG_H
#define TR_CLI_CATALOG_H

#include "scripts/cli_args.h"

/* Failures become errors in d (exit code 2); the summary goes to stdout (stderr in JSON mode). */
tr_status tr_cli_validate_all(const tr_cli *cli, tr_diags *d);

#endif
