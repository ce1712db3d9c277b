/* What run_recipe prints about a configuration: the dry-run summary (layout, derived values),
 * the recipe catalog, one recipe's description and the config key reference. */
#ifndef TR_CLI_REPORT_H
#define TR_CLI_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "core/validate.h"

/* Resolve one recipe with no files or overrides. world NULL: the recipe's minimum world. */
tr_status tr_cli_resolve_recipe(const char *name, const tr_world *world, bool skip_validate,
                                tr_config *c, tr_diags *d);

/* The parallel layout banner of a resolved config, and with groups every process group. */
tr_status tr_cli_print_layout(FILE *out, const tr_config *c, bool groups, tr_diags *d);
/* Derived values: DP, microbatches, padded vocab, parameters, FLOPs, scheduler steps. */
void tr_cli_print_derived(FILE *out, const tr_config *c);

tr_status tr_cli_list_recipes(FILE *out);
/* NOTFOUND (with a did-you-mean diagnostic) for an unknown name. */
tr_status tr_cli_describe_recipe(FILE *out, const char *name, const tr_world *world, tr_diags *d);
/* topic: NULL (the sections), a section name, or a dotted key. */
tr_status tr_cli_help_config(FILE *out, const char *topic, tr_diags *d);

/* "1.24B", "350M", "8.5K". */
void tr_cli_format_count(double x, char *buf, size_t cap);

#endif
