#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>

/* The only process-wide state in Trestle: how much to log and which rank we are. */
static tr_log_level g_level = TR_LOG_INFO;
static int g_rank = -1;

void tr_log_set_level(tr_log_level level) {
    g_level = level;
}

void tr_log_set_rank(int rank) {
    g_rank = rank;
}

void tr_log(tr_log_level level, const char *fmt, ...) {
    static const char *const tags[] = {"debug", "info", "warning", "error"};
    if (level < g_level) return;
    FILE *out = level >= TR_LOG_WARN ? stderr : stdout;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (g_rank >= 0)
        fprintf(out, "[rank %d] %s: %s\n", g_rank, tags[level], line);
    else
        fprintf(out, "%s: %s\n", tags[level], line);
}
