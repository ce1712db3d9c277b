/* SIGTERM/SIGINT during training: the handler only records the signal; the loop finishes the
 * current iteration, logs, and returns. The handler is one-shot (SA_RESETHAND), so a second
 * Ctrl-C kills a run that is stuck. */
#ifndef TR_RUNTIME_TRAIN_SIGNAL_H
#define TR_RUNTIME_TRAIN_SIGNAL_H

#include <signal.h>

typedef struct tr_train_signals {
    struct sigaction old_term, old_int;
    int installed;
} tr_train_signals;

void tr_train_signals_install(tr_train_signals *s);
void tr_train_signals_restore(tr_train_signals *s);
/* The signal received since install, or 0. */
int tr_train_signal_pending(void);

#endif
