/* Internal: the few hot inner loops of the CPU backend (attention tiles, softmax rows, GeLU),
 * compiled once per x86 ISA level from kernels/cpu/simd/kernels.inc and picked at run time from
 * CPUID, so one binary runs on any x86-64 and uses AVX-512 where present. Vector types never appear
 * in these signatures, so the variants share one plain C ABI. */
#ifndef TR_CPU_SIMD_H
#define TR_CPU_SIMD_H

#include <stdint.h>

#include "core/status.h"

typedef struct tr_cpu_simd {
    const char *isa; /* "avx512", "avx2" or "generic" */
    /* C[M,N] += A B with A(i,k) = A[i*ars + k*acs] (covers A and A^T), B [K,N] row-major */
    void (*tile_mm)(int M, int N, int K, const float *A, int64_t ars, int64_t acs, const float *B,
                    int64_t ldb, float *C, int64_t ldc);
    /* p[j] = exp(p[j]*scale - sub) for j < n_valid (all arguments <= 0), 0 for j in [n_valid, n);
     * returns the sum of the new values */
    float (*exp_row)(float *p, int n, int n_valid, float scale, float sub);
    void (*scale)(float *x, int n, float s);                 /* x *= s */
    float (*row_max)(const float *x, int n);                 /* -inf for n == 0 */
    double (*sum_exp)(const float *x, int n, float m);       /* sum exp(x - m), x <= m */
    void (*scaled_exp)(float *x, int n, float m, float mul); /* x = mul * exp(x - m) */
    void (*dsoftmax)(float *dp, const float *p, int n, float di,
                     float scale); /* dp = p*(dp-di)*s */
    /* GeLU over n elements, exact (erf) or tanh form: y = gelu(x), dx = dy * gelu'(x). Outputs
     * may alias inputs. Every element goes through the same vector code (the tail is padded), so
     * results do not depend on how a range is split across threads. Accurate to about 1e-7
     * relative to max(1, |x|); +-inf give the limits (0 or x; slope 0 or 1), NaN stays NaN. */
    void (*gelu_fwd)(float *y, const float *x, int64_t n, int tanh_approx);
    void (*gelu_bwd)(float *dx, const float *dy, const float *x, int64_t n, int tanh_approx);
} tr_cpu_simd;

/* The variant in use: TR_CPU_ISA from the environment if set and supported, else the widest
 * the CPU supports. */
const tr_cpu_simd *tr_cpu_simd_active(void);

/* The named variant if this CPU can run it, else NULL. */
const tr_cpu_simd *tr_cpu_simd_variant(const char *isa);

/* For tests and benchmarks: switch the variant every op uses. Must not race with running ops.
 * TR_ERR_NOTFOUND when the CPU lacks it or the name is unknown. */
tr_status tr_cpu_simd_select(const char *isa);

extern const tr_cpu_simd tr_cpu_simd_generic;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TR_CPU_SIMD_X86 1
extern const tr_cpu_simd tr_cpu_simd_avx2;
extern const tr_cpu_simd tr_cpu_simd_avx512;
#endif

#endif
