/* AVX-512F variant: 16-wide vectors. Only called after CPUID says the CPU has AVX-512F and FMA. */
#include "kernels/cpu/simd/simd.h"

#ifdef TR_CPU_SIMD_X86
#define SIMD_W     16
#define SIMD_ATTR  __attribute__((target("avx512f,avx2,fma")))
#define SIMD_TABLE tr_cpu_simd_avx512
#define SIMD_ISA   "avx512"
#include "kernels/cpu/simd/kernels.inc"
#else
typedef int tr_cpu_simd_avx512_unused; /* ISO C forbids an empty translation unit */
#endif
