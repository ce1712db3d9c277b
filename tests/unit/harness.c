#include "tests/unit/harness.h"

int tr_test_failures;

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
