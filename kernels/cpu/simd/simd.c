/* Run-time choice among the ISA variants of the hot loops. */
#include "kernels/cpu/simd/simd.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic(const tr_cpu_simd *) g_active;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

const tr_cpu_simd *tr_cpu_simd_variant(const char *isa) {
    if (!isa) return NULL;
    if (!strcmp(isa, "generic")) return &tr_cpu_simd_generic;
#ifdef TR_CPU_SIMD_X86
    __builtin_cpu_init();
    int fma = __builtin_cpu_supports("fma");
    if (!strcmp(isa, "avx2") && fma && __builtin_cpu_supports("avx2")) return &tr_cpu_simd_avx2;
    if (!strcmp(isa, "avx512") && fma && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx2"))
        return &tr_cpu_simd_avx512;
#endif
    return NULL;
}

static void pick(void) {
    const tr_cpu_simd *s = tr_cpu_simd_variant(getenv("TR_CPU_ISA"));
    if (!s) s = tr_cpu_simd_variant("avx512");
    if (!s) s = tr_cpu_simd_variant("avx2");
    if (!s) s = &tr_cpu_simd_generic;
    atomic_store(&g_active, s);
}

const tr_cpu_simd *tr_cpu_simd_active(void) {
    pthread_once(&g_once, pick);
    return atomic_load(&g_active);
}

tr_status tr_cpu_simd_select(const char *isa) {
    const tr_cpu_simd *s = tr_cpu_simd_variant(isa);
    if (!s) return TR_ERR_NOTFOUND;
    pthread_once(&g_once, pick);
    atomic_store(&g_active, s);
    return TR_OK;
}
