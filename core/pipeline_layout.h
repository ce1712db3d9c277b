/* Megatron's pipeline layout grammar ("Et*3|(tt|)*2L"): E embedding, t transformer layer,
 * m MTP layer, L loss, '|' a stage boundary, (...)*k and x*k repeats, commas and spaces ignored.
 * Shared by validate() and the pipeline runtime so both read a layout the same way. */
#ifndef TR_PIPELINE_LAYOUT_H
#define TR_PIPELINE_LAYOUT_H

#include <stddef.h>

#include "core/status.h"

/* Expand a layout into one flat string of E/t/m/L/| symbols (malloc'd, NUL-terminated, at most
 * 65536 symbols). On malformed input returns TR_ERR_INVALID with *err naming the problem
 * ("has an unclosed '('") and *out NULL. */
tr_status tr_pipeline_layout_expand(const char *layout, char **out, size_t *n, const char **err);

#endif
