/* Loop-level settings the CPU runtime refuses (errors) or cannot log (warnings). */
#ifndef TR_RUNTIME_TRAIN_CHECKS_H
#define TR_RUNTIME_TRAIN_CHECKS_H

#include "core/config.h"
#include "core/diag.h"

/* Non-zero when an error was reported. */
int tr_train_check_features(const tr_config *c, tr_diags *d);

#endif
