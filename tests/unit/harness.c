#include "tests/unit/harness.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

int tr_test_failures;

static char deadline_what[200];

static void on_deadline(int sig) {
    (void)sig;
    static const char head[] = "  hang: ";
    (void)!write(2, head, sizeof head - 1);
    (void)!write(2, deadline_what, strlen(deadline_what));
    (void)!write(2, "\n", 1);
    _exit(3);
}

void tr_test_deadline(unsigned seconds, const char *what) {
    snprintf(deadline_what, sizeof deadline_what, "%s", what ? what : "");
    signal(SIGALRM, on_deadline);
    alarm(seconds);
}

int tr_test_main(int argc, char **argv, const tr_test_case *tests, int n) {
    int passed = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        if (argc > 1 && !strstr(tests[i].name, argv[1])) continue;
        tr_test_failures = 0;
        tests[i].fn();
        if (tr_test_failures) {
            fprintf(stderr, "FAIL %s (%d checks)\n", tests[i].name, tr_test_failures);
            failed++;
        } else {
            passed++;
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

char *tr_test_read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}
