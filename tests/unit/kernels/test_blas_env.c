/* OpenBLAS core selection: the override the launcher sets must really change the kernels the
 * library loads, and the choice must match the CPU's instruction sets. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "kernels/cpu/blas_env.h"
#include "tests/unit/harness.h"

static const char *self_path;

/* The core a fresh process of this test reports when OPENBLAS_CORETYPE=core. */
static int child_core(const char *core, char *out, size_t cap) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "OPENBLAS_CORETYPE=%s %s --print-core", core, self_path);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    if (!fgets(out, (int)cap, p)) out[0] = 0;
    out[strcspn(out, "\n")] = 0;
    return pclose(p);
}

static void test_override_reaches_openblas(void) {
    const char *better = tr_cpu_blas_better_core();
    const char *wanted = better ? better : tr_cpu_blas_core();
    char got[64];
    CHECK_INT_EQ(child_core(wanted, got, sizeof got), 0);
    CHECK(strcasecmp(got, wanted) == 0);
}

static void test_better_core_matches_isa(void) {
    __builtin_cpu_init();
    const char *better = tr_cpu_blas_better_core();
    if (!better) return; /* already as wide as the CPU: nothing to check */
    if (!strcmp(better, "SkylakeX")) CHECK(__builtin_cpu_supports("avx512f"));
    if (!strcmp(better, "Haswell")) CHECK(__builtin_cpu_supports("avx2"));
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--print-core")) {
        printf("%s\n", tr_cpu_blas_core());
        return 0;
    }
    self_path = "/proc/self/exe";
    static char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n > 0) path[n] = 0, self_path = path;
    static const tr_test_case tests[] = {TR_TEST(test_override_reaches_openblas),
                                         TR_TEST(test_better_core_matches_isa)};
    return tr_test_main(argc, argv, tests, 2);
}
