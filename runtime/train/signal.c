/* See runtime/train/signal.h. A signal handler can only talk to the loop through a global;
 * this is that one flag. */
#include "runtime/train/signal.h"

#include <string.h>

#include "runtime/comm/comm.h"

static volatile sig_atomic_t pending_signal;

static void on_signal(int sig) {
    pending_signal = sig;
}

void tr_train_signals_install(tr_train_signals *s) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    pending_signal = 0;
    sigaction(SIGTERM, &sa, &s->old_term);
    sigaction(SIGINT, &sa, &s->old_int);
    s->installed = 1;
    tr_comm_set_stop_flag(&pending_signal);
}

void tr_train_signals_restore(tr_train_signals *s) {
    if (!s->installed) return;
    sigaction(SIGTERM, &s->old_term, NULL);
    sigaction(SIGINT, &s->old_int, NULL);
    s->installed = 0;
    tr_comm_set_stop_flag(NULL);
}

int tr_train_signal_pending(void) {
    return (int)pending_signal;
}
