/* Baseline variant: 4-wide vectors (SSE2 on x86-64, NEON on arm64), any CPU. */
#define SIMD_W 4
#define SIMD_ATTR
#define SIMD_TABLE tr_cpu_simd_generic
#define SIMD_ISA   "generic"
#include "kernels/cpu/simd/kernels.inc"
