/* Internal: shared-memory declarations of the kernel headers. Under nvcc they are the plain
 * __shared__ declarations; compiled as host C++ (tests/emu) they become pointers into the
 * emulated thread block's shared memory, which the emulator (tests/emu/cuda_emu.h) provides
 * through tr_emu_dynamic_smem() and tr_emu_static_smem(key, bytes). */
#ifndef TR_CUDA_SMEM_CUH
#define TR_CUDA_SMEM_CUH

#if defined(__CUDACC__)

/* The launch's dynamic shared memory as an array of `type` (which may carry __align__). */
#define TR_DYNAMIC_SMEM(type, name) extern __shared__ type name[]
/* A statically sized block-wide array; dims in brackets, e.g. TR_STATIC_SMEM(float, p, [32]). */
#define TR_STATIC_SMEM(type, name, dims) __shared__ type name dims

#else

#define TR_DYNAMIC_SMEM(type, name)                                                                \
    type *const name = reinterpret_cast<type *>(tr_emu_dynamic_smem())
/* One key per declaration (and per template instance): every thread of a block gets the same
 * storage, a new block new storage. */
#define TR_STATIC_SMEM(type, name, dims)                                                           \
    static char name##_emu_key;                                                                    \
    type(&name) dims =                                                                             \
        *reinterpret_cast<type(*) dims>(tr_emu_static_smem(&name##_emu_key, sizeof(type dims)))

#endif

#endif
