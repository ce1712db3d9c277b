/* One spelling for functions that both the C backend and CUDA kernels call. */
#ifndef TR_KERNELS_HOSTDEV_H
#define TR_KERNELS_HOSTDEV_H

#ifdef __CUDACC__
#define TR_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TR_HOST_DEVICE static inline
#endif

#endif
