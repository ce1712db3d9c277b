/* OpenBLAS chooses its compute kernels once, when the library loads, from the CPU's model
 * name. Virtual CPUs that report a generic name ("Intel(R) Xeon(R) Processor") get the SSE3
 * fallback, four to five times slower than the AVX-512 or AVX2 kernels the CPU actually runs.
 * The choice can only be overridden by OPENBLAS_CORETYPE in the environment at load time. */
#ifndef TR_KERNELS_CPU_BLAS_ENV_H
#define TR_KERNELS_CPU_BLAS_ENV_H

/* The OpenBLAS core name in use ("SkylakeX", "Haswell", "Prescott", ...). */
const char *tr_cpu_blas_core(void);

/* The core OpenBLAS should use on this CPU judged by its instruction sets, or NULL when the
 * one in use is already as wide as the CPU allows. */
const char *tr_cpu_blas_better_core(void);

/* For main() only, before any threads or MPI: when OPENBLAS_CORETYPE is unset and a better
 * core exists, set it and execute the program again (same argv) so OpenBLAS loads with it.
 * Returns (doing nothing) when there is nothing to gain, when the variable is already set by
 * the user, or when the re-execution fails. */
void tr_cpu_blas_reexec_if_slow(char **argv);

#endif
