/* Minimal test harness: CHECK macros count failures; tr_test_main runs the listed tests and
 * prints the closing "N passed, N failed" line that CI reads. */
#ifndef TR_TEST_HARNESS_H
#define TR_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct tr_test_case {
    const char *name;
    void (*fn)(void);
} tr_test_case;

extern int tr_test_failures; /* failures in the current test */

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);             \
            tr_test_failures++;                                                                    \
        }                                                                                          \
    } while (0)

#define CHECK_INT_EQ(a, b)                                                                         \
    do {                                                                                           \
        long long ca_ = (long long)(a), cb_ = (long long)(b);                                      \
        if (ca_ != cb_) {                                                                          \
            fprintf(stderr, "  %s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__, #a,  \
                    ca_, #b, cb_);                                                                 \
            tr_test_failures++;                                                                    \
        }                                                                                          \
    } while (0)

#define CHECK_STR_EQ(a, b)                                                                         \
    do {                                                                                           \
        const char *ca_ = (a), *cb_ = (b);                                                         \
        if (!ca_ || !cb_ || strcmp(ca_, cb_) != 0) {                                               \
            fprintf(stderr, "  %s:%d: \"%s\" != \"%s\"\n", __FILE__, __LINE__,                     \
                    ca_ ? ca_ : "(null)", cb_ ? cb_ : "(null)");                                   \
            tr_test_failures++;                                                                    \
        }                                                                                          \
    } while (0)

#define CHECK_CONTAINS(hay, needle)                                                                \
    do {                                                                                           \
        const char *ch_ = (hay), *cn_ = (needle);                                                  \
        if (!ch_ || !strstr(ch_, cn_)) {                                                           \
            fprintf(stderr, "  %s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__,       \
                    ch_ ? ch_ : "(null)", cn_);                                                    \
            tr_test_failures++;                                                                    \
        }                                                                                          \
    } while (0)

/* |a-b| <= rtol*max(|a|,|b|) + atol */
#define CHECK_CLOSE(a, b, rtol, atol)                                                              \
    do {                                                                                           \
        double ca_ = (double)(a), cb_ = (double)(b);                                               \
        double tol_ = (rtol)*fmax(fabs(ca_), fabs(cb_)) + (atol);                                  \
        if (!(fabs(ca_ - cb_) <= tol_)) {                                                          \
            fprintf(stderr, "  %s:%d: %s = %.9g vs %s = %.9g (tol %.3g)\n", __FILE__, __LINE__,    \
                    #a, ca_, #b, cb_, tol_);                                                       \
            tr_test_failures++;                                                                    \
        }                                                                                          \
    } while (0)

#define TR_TEST(fn)                                                                                \
    { #fn, fn }

/* The whole file as a NUL-terminated malloc'd string, or NULL when it cannot be read. */
char *tr_test_read_file(const char *path);
/* Arms a watchdog: if the process is still inside the guarded call after `seconds`, it prints
 * "hang: <what>" and exits 3, so a blocking read or a runaway loop fails the test instead of
 * stalling it. tr_test_deadline(0, NULL) disarms it. */
void tr_test_deadline(unsigned seconds, const char *what);

/* Runs the tests (all, or those whose name contains argv[1]); returns the process exit code. */
int tr_test_main(int argc, char **argv, const tr_test_case *tests, int n);

#define TR_TEST_MAIN(...)                                                                          \
    int main(int argc, char **argv) {                                                              \
        static const tr_test_case tests_[] = {__VA_ARGS__};                                        \
        return tr_test_main(argc, argv, tests_, (int)(sizeof tests_ / sizeof tests_[0]));          \
    }

#endif
