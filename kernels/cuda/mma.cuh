/* Internal: the warp-wide tensor-core product D = A B + C, mma.sync.m16n8k16 with fp32
 * accumulators and bf16 or fp16 operands, fragments as in kernels/common/mma_layout.h (a: four
 * registers of two halves, b: two, c: four floats, updated in place).
 *
 * The instruction is only ever reached through these two functions, so that the kernel headers
 * compile as host C++ too: without __CUDACC__ they are declared here and defined by the host
 * emulator of tests/emu (tests/emu/cuda_emu.h), which performs the warp's product itself. */
#ifndef TR_CUDA_MMA_CUH
#define TR_CUDA_MMA_CUH

#include <stdint.h>

#if defined(__CUDACC__)

__device__ __forceinline__ void tr_mma_16816_bf16(float c[4], const uint32_t a[4], uint32_t b0,
                                                  uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void tr_mma_16816_f16(float c[4], const uint32_t a[4], uint32_t b0,
                                                 uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#else

void tr_mma_16816_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
void tr_mma_16816_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);

#endif

#endif
