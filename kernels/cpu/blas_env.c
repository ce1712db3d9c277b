#include "kernels/cpu/blas_env.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *tr_cpu_blas_core(void) {
    const char *name = openblas_get_corename();
    return name ? name : "unknown";
}

/* Cores whose kernels are no wider than SSE: what OpenBLAS falls back to on unknown CPUs. */
static int is_narrow_core(const char *core) {
    static const char *const narrow[] = {"Prescott", "Core2",  "Penryn",     "Dunnington",
                                         "Nehalem",  "Atom",   "Opteron",    "Barcelona",
                                         "Bobcat",   "Katmai", "Coppermine", "Northwood",
                                         "Banias",   "Athlon", "unknown"};
    for (size_t i = 0; i < sizeof narrow / sizeof narrow[0]; i++)
        if (!strcasecmp(core, narrow[i])) return 1;
    return 0;
}

const char *tr_cpu_blas_better_core(void) {
    __builtin_cpu_init();
    const char *core = tr_cpu_blas_core();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
        if (is_narrow_core(core) || !strcasecmp(core, "Haswell") || !strcasecmp(core, "Zen"))
            return "SkylakeX";
        return NULL;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return is_narrow_core(core) ? "Haswell" : NULL;
    return NULL;
}

void tr_cpu_blas_reexec_if_slow(char **argv) {
    if (getenv("OPENBLAS_CORETYPE")) return; /* the user (or the environment) decided */
    const char *core = tr_cpu_blas_better_core();
    if (!core) return;
    if (setenv("OPENBLAS_CORETYPE", core, 0) != 0) return;
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the slow kernels rather than not at all. */
}
