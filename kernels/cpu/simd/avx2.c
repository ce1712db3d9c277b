/* AVX2 + FMA variant: 8-wide vectors. Only called after CPUID says the CPU has both. */
#include "kernels/cpu/simd/simd.h"

#ifdef TR_CPU_SIMD_X86
#define SIMD_W     8
#define SIMD_ATTR  __attribute__((target("avx2,fma")))
#define SIMD_TABLE tr_cpu_simd_avx2
#define SIMD_ISA   "avx2"
#include "kernels/cpu/simd/kernels.inc"
#else
typedef int tr_cpu_simd_avx2_unused; /* ISO C forbids an empty translation unit */
#endif
