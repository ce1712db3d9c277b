/* run_recipe --plan and --search-layouts (runtime/plan, docs/plan.md). */
#ifndef TR_CLI_PLAN_H
#define TR_CLI_PLAN_H

#include "scripts/cli_args.h"

tr_status tr_cli_plan(const tr_cli *cli, tr_diags *d);
tr_status tr_cli_search_layouts(const tr_cli *cli, tr_diags *d);

#endif
