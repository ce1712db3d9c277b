/* Reference documents generated from the tables that define the configuration: the field table
 * (docs/config-reference.md, run_recipe --help-config) and the rule table
 * (docs/validation-rules.md). One generator serves the trestle_gen_docs tool, the CLI and the
 * staleness test, so the checked-in docs cannot drift from the code without a test failing. */
#ifndef TR_DOCS_GEN_H
#define TR_DOCS_GEN_H

#include <stdio.h>

#include "core/field.h"
#include "core/status.h"

/* The header line and separator of a field table (the same before every section). */
tr_status tr_docs_field_table_header(FILE *out);
/* One markdown table row: key, type, default, allowed values, unit, flags, description. */
tr_status tr_docs_field_row(FILE *out, const tr_field *f);
/* A section's heading, its description and its table of fields. */
tr_status tr_docs_section(FILE *out, int section);

/* Index of the section named name, or -1. */
int tr_docs_section_index(const char *name);

/* The whole of docs/config-reference.md. */
tr_status tr_docs_config_reference(FILE *out);
/* The whole of docs/validation-rules.md. */
tr_status tr_docs_validation_rules(FILE *out);
/* docs/effects.md: the keys by whether they have their effect (flags and capability rules). */
tr_status tr_docs_effects(FILE *out);

/* The paths, relative to the source root, of the generated documents and their writers. */
typedef struct tr_docs_file {
    const char *path;
    tr_status (*write)(FILE *out);
} tr_docs_file;
extern const tr_docs_file tr_docs_files[];
extern const int tr_docs_file_count;

#endif
