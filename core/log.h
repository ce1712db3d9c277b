/* The logger: the one piece of process-wide state Trestle keeps. */
#ifndef TR_LOG_H
#define TR_LOG_H

typedef enum tr_log_level { TR_LOG_DEBUG = 0, TR_LOG_INFO, TR_LOG_WARN, TR_LOG_ERROR } tr_log_level;

void tr_log_set_level(tr_log_level level);
/* Rank prefix for multi-process runs; -1 (the default) prints none. */
void tr_log_set_rank(int rank);
void tr_log(tr_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define TR_INFO(...)  tr_log(TR_LOG_INFO, __VA_ARGS__)
#define TR_WARN(...)  tr_log(TR_LOG_WARN, __VA_ARGS__)
#define TR_ERROR(...) tr_log(TR_LOG_ERROR, __VA_ARGS__)
#define TR_DEBUG(...) tr_log(TR_LOG_DEBUG, __VA_ARGS__)

#endif
