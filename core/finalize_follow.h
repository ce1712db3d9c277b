/* The parts of finalize() that keep derived values with their sources (a value the recipe
 * derived from another follows an override of that other), and the one warning finalize()
 * gives when it replaces a value the user wrote. For core/ (and --explain, which quotes
 * tr_finalize_effect_doc). */
#ifndef TR_FINALIZE_FOLLOW_H
#define TR_FINALIZE_FOLLOW_H

#include "core/config.h"

/* Did the user write field fid (a YAML file, the command line or the C API), as opposed to
 * the table default, a provider, a recipe or finalize() itself? */
bool tr_user_set(const tr_config *c, int fid);

/* Recompute the recipe-derived values whose sources the user overrode and which the user did
 * not set themselves: model.seq_length and dataset.seq_length follow each other, the packed
 * sequence size follows the sequence length, and dataset.pad_seq_to_mult becomes a multiple of
 * what the CP/SP layout needs (2*CP, and TP*CP with sequence parallelism). */
void tr_finalize_follow(tr_config *c);

/* finalize() is about to replace field fid, which the user wrote, with `now` (text) because
 * of `why`: warning finalize.user_value_replaced naming the change. Nothing when the user did
 * not write the field or when `differs` is false. */
void tr_finalize_replacing(const tr_config *c, int fid, bool differs, const char *now,
                           const char *why, tr_diags *d);

/* What finalize() may do to field fid, for --explain (NULL when it leaves the field alone). */
const char *tr_finalize_effect_doc(int fid);

#endif
