/* A host emulator for the CUDA kernels of kernels/cuda, so that their real code runs on the CPU:
 * include this header, then the kernel headers to test (kernels/cuda/<family>_kernels.cuh), and
 * launch a kernel with emu::launch(grid, block, smem_bytes, [&] { kernel(args...); }).
 *
 * Every CUDA thread of a block is a fibre of one OS thread (a stack switch of a few instructions
 * on x86-64, ucontext elsewhere or with -DTR_EMU_UCONTEXT); the blocks of a grid run
 * one after another. A fiber runs until it reaches a synchronising operation, then hands over to
 * the next one, so the semantics of the collectives are exact:
 *  - __syncthreads: no thread returns before every live thread of the block has arrived;
 *  - __shfl_sync / __shfl_xor_sync and the tensor-core product (kernels/cuda/mma.cuh): every lane
 *    of the warp deposits its operands, the last to arrive computes the warp's result from all
 *    32 deposits, and only then does any lane read its part. Lanes that reach different
 *    collectives (a divergent shuffle, a barrier skipped by one warp) are reported and abort.
 * A block whose threads all wait on something that cannot happen (a barrier inside a branch
 * some threads skip) is a deadlock: reported, then abort().
 *
 * Shared memory is fresh for every block and filled with 0xff bytes (NaN as fp32, bf16 and
 * fp16), so a value read before it was written poisons the result. Dynamic shared memory ends at
 * an inaccessible page, so reading or writing past the launch's size faults; emu::guarded gives
 * host buffers with the same property for the kernels' global tensors.
 *
 * What it cannot show: timing and occupancy, data races that the serial schedule hides (a
 * missing barrier between two warps that happen to run in order here), the memory model, and
 * the last-ulp behaviour of device maths (expf, exp2f, logf come from the host libm; the mma's
 * fp32 accumulation is done in double here). Conversions to bf16 / fp16 are the CUDA headers'
 * own host implementations (round to nearest even, as the device). */
#ifndef TR_TESTS_EMU_CUDA_EMU_H
#define TR_TESTS_EMU_CUDA_EMU_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <map>
#include <type_traits>
#include <vector>

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

#if defined(__x86_64__) && !defined(TR_EMU_UCONTEXT)
#define TR_EMU_FAST_SWITCH 1
/* tr_emu_switch(save, next): pushes the callee-saved registers and the SSE / x87 control words
 * (the System V ABI's preserved state), stores the stack pointer in *save, and resumes the
 * fibre whose stack pointer is next. No signal mask is saved: that is swapcontext's system call,
 * which would dominate the emulator's run time. Local to each object file. */
extern "C" void tr_emu_switch(void **save, void *next);
asm(R"(
    .text
    .p2align 4
    .type tr_emu_switch, @function
tr_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size tr_emu_switch, .-tr_emu_switch
)");
#endif

namespace emu {

enum op_kind { OP_SHFL, OP_MMA_BF16, OP_MMA_F16 };

/* What one lane brings to a warp collective, and what it takes away. */
struct lane_in {
    int kind;
    unsigned mask;
    uint64_t v;
    int src; /* shuffle: the lane to read */
    uint32_t a[4], b[2];
    float c[4];
};
struct lane_out {
    uint64_t v;
    float c[4];
};

struct warp_state {
    int count = 0;
    unsigned gen = 0;
    lane_in in[32];
    lane_out out[32];
};

struct fiber {
#ifdef TR_EMU_FAST_SWITCH
    void *sp;
#else
    ucontext_t ctx;
#endif
    uint3 tid;
    unsigned linear; /* x + y * blockDim.x + z * blockDim.x * blockDim.y: warp = linear / 32 */
    bool done;
};

struct state {
#ifdef TR_EMU_FAST_SWITCH
    void *sched_sp;
#else
    ucontext_t sched;
#endif
    std::vector<fiber> fibers;
    int cur = 0, nth = 0, live = 0;
    uint3 block_idx, block_dim, grid_dim;
    /* __syncthreads */
    int bar_count = 0;
    unsigned bar_gen = 0;
    std::vector<warp_state> warps;
    unsigned long long progress = 0; /* bumped whenever a collective completes or a thread ends */
    bool reverse = false;            /* set_reverse_schedule */
    unsigned char *dyn_smem = nullptr;
    std::map<const void *, std::vector<unsigned char>> static_smem;
    void (*body)(void *) = nullptr;
    void *body_arg = nullptr;
    std::vector<unsigned char *> stacks;
};

inline state &ctx() {
    static state s;
    return s;
}

constexpr size_t STACK_BYTES = 256 * 1024;

[[noreturn]] inline void fail(const char *what) {
    state &s = ctx();
    fprintf(stderr, "cuda_emu: %s (block %u,%u,%u thread %u)\n", what, s.block_idx.x, s.block_idx.y,
            s.block_idx.z, s.fibers.empty() ? 0u : s.fibers[s.cur].linear);
    abort();
}

/* Back to the scheduler, which resumes the next thread. */
inline void yield() {
    state &s = ctx();
#ifdef TR_EMU_FAST_SWITCH
    tr_emu_switch(&s.fibers[s.cur].sp, s.sched_sp);
#else
    swapcontext(&s.fibers[s.cur].ctx, &s.sched);
#endif
}

inline void trampoline() {
    state &s = ctx();
    s.body(s.body_arg);
    s.fibers[s.cur].done = true;
    s.live--;
    s.progress++;
    /* Threads that have exited no longer hold up a barrier (as on the device). */
    if (s.bar_count > 0 && s.bar_count >= s.live) {
        s.bar_count = 0;
        s.bar_gen++;
    }
    /* uc_link returns to the scheduler */
}

#ifdef TR_EMU_FAST_SWITCH
/* A new fibre's first instruction: run the thread, then hand back for good. */
[[noreturn]] inline void fiber_entry() {
    trampoline();
    void *gone;
    tr_emu_switch(&gone, ctx().sched_sp);
    __builtin_unreachable();
}
#endif

/* getcontext and swapcontext return twice; kept out of launch() so that its locals are not
 * suspected of being clobbered (they are not: only this function's frame is resumed). */
[[gnu::noinline]] inline void init_fiber(state &s, int t, dim3 block) {
    fiber &fb = s.fibers[(size_t)t];
    fb.tid = make_uint3((unsigned)t % block.x, (unsigned)t / block.x % block.y,
                        (unsigned)t / (block.x * block.y));
    fb.linear = (unsigned)t;
    fb.done = false;
#ifdef TR_EMU_FAST_SWITCH
    /* The frame tr_emu_switch pops: control words, six registers, then fiber_entry as the return
     * address, above it a null one so that fiber_entry starts with the ABI's alignment. */
    uint64_t *top = reinterpret_cast<uint64_t *>(s.stacks[(size_t)t] + STACK_BYTES);
    uint32_t mxcsr = __builtin_ia32_stmxcsr();
    uint16_t fpcw;
    asm volatile("fnstcw %0" : "=m"(fpcw));
    *--top = 0;
    *--top = reinterpret_cast<uint64_t>(&fiber_entry);
    for (int r = 0; r < 6; r++) *--top = 0;
    *--top = (uint64_t)mxcsr | (uint64_t)fpcw << 32;
    fb.sp = top;
#else
    getcontext(&fb.ctx);
    fb.ctx.uc_stack.ss_sp = s.stacks[(size_t)t];
    fb.ctx.uc_stack.ss_size = STACK_BYTES;
    fb.ctx.uc_link = &s.sched;
    makecontext(&fb.ctx, trampoline, 0);
#endif
}

/* Runs thread t until it waits on a collective or ends. */
[[gnu::noinline]] inline void resume(state &s, int t) {
    s.cur = t;
#ifdef TR_EMU_FAST_SWITCH
    tr_emu_switch(&s.sched_sp, s.fibers[(size_t)t].sp);
#else
    swapcontext(&s.sched, &s.fibers[(size_t)t].ctx);
#endif
}

template <typename F> void call_body(void *f) {
    (*static_cast<F *>(f))();
}

/* Runs blocks, and threads within a block, in descending order from now on (ascending by
 * default): a result that changes with the schedule depends on an order the device does not
 * guarantee (a race through shared or global memory, an order-dependent reduction). */
inline void set_reverse_schedule(bool on) {
    ctx().reverse = on;
}

/* Runs f as every thread of every block of the grid. */
template <typename F> void launch(dim3 grid, dim3 block, size_t smem_bytes, F &&f) {
    state &s = ctx();
    const int nth = (int)(block.x * block.y * block.z);
    if (nth % 32 != 0 || nth > 1024)
        fail("launch: blocks must be a multiple of 32 threads, at most 1024");
    s.nth = nth;
    s.block_dim = block;
    s.grid_dim = grid;
    s.fibers.assign((size_t)nth, fiber{});
    s.warps.assign((size_t)nth / 32, warp_state{});
    while ((int)s.stacks.size() < nth) {
        void *p =
            mmap(nullptr, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) fail("launch: out of memory for stacks");
        s.stacks.push_back(static_cast<unsigned char *>(p));
    }
    /* Dynamic shared memory: its end is the start of a PROT_NONE page. */
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t rounded = (smem_bytes + 15) / 16 * 16;
    const size_t span = (rounded + page - 1) / page * page + page;
    unsigned char *map = static_cast<unsigned char *>(
        mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (map == MAP_FAILED) fail("launch: out of memory for shared memory");
    mprotect(map + span - page, page, PROT_NONE);
    s.dyn_smem = map + span - page - rounded;
    s.body = &call_body<typename std::remove_reference<F>::type>;
    s.body_arg = (void *)&f;
    const uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    for (uint64_t k = 0; k < nblocks; k++) {
        const uint64_t bl = s.reverse ? nblocks - 1 - k : k;
        s.block_idx = make_uint3((unsigned)(bl % grid.x), (unsigned)(bl / grid.x % grid.y),
                                 (unsigned)(bl / ((uint64_t)grid.x * grid.y)));
        memset(s.dyn_smem, 0xff, rounded);
        s.static_smem.clear();
        s.bar_count = 0;
        for (auto &w : s.warps) w.count = 0;
        s.live = nth;
        for (int t = 0; t < nth; t++) init_fiber(s, t, block);
        /* Round robin; a whole round in which no collective completes and no thread ends,
         * with every live thread waiting, is a deadlock. */
        unsigned long long seen = s.progress;
        int idle = 0;
        for (int k = 0; s.live > 0; k = (k + 1) % nth) {
            const int t = s.reverse ? nth - 1 - k : k;
            if (s.fibers[(size_t)t].done) continue;
            resume(s, t);
            if (s.progress != seen) {
                seen = s.progress;
                idle = 0;
            } else if (++idle > 2 * nth) {
                fail("deadlock: every thread waits on a collective that cannot complete");
            }
        }
    }
    munmap(map, span);
    s.dyn_smem = nullptr;
}

/* The warp's D = A B + C from the 32 lanes' fragments, decoded with the PTX ISA's formulas for
 * mma.m16n8k16 (groupID = lane / 4, threadID_in_group = lane % 4), written here independently of
 * kernels/common/mma_layout.h:
 *   A (16x16): a_i, i = 0..7 (register i/2, low half first): row groupID for i in {0,1,4,5},
 *              else groupID + 8; column threadID_in_group * 2 + (i & 1), + 8 for i >= 4;
 *   B (16x8):  b_i, i = 0..3: row threadID_in_group * 2 + (i & 1), + 8 for i >= 2; column groupID;
 *   C, D (16x8): c_i, i = 0..3: row groupID, + 8 for i >= 2; column threadID_in_group * 2 + (i &
 * 1). Products are summed in double and rounded once to fp32. */
inline float half_bits_to_float(uint16_t u, bool bf16) {
    if (bf16) {
        __nv_bfloat16_raw r;
        r.x = u;
        return __bfloat162float(__nv_bfloat16(r));
    }
    __half_raw r;
    r.x = u;
    return __half2float(__half(r));
}

inline void mma_16816(warp_state &w, bool bf16) {
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const int grp = l >> 2, tig = l & 3;
        for (int i = 0; i < 8; i++) {
            const uint32_t reg = w.in[l].a[i / 2];
            const uint16_t h = (uint16_t)(i & 1 ? reg >> 16 : reg & 0xffffu);
            const int row = (i == 0 || i == 1 || i == 4 || i == 5) ? grp : grp + 8;
            const int col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
            A[row][col] = half_bits_to_float(h, bf16);
        }
        for (int i = 0; i < 4; i++) {
            const uint32_t reg = w.in[l].b[i / 2];
            const uint16_t h = (uint16_t)(i & 1 ? reg >> 16 : reg & 0xffffu);
            const int row = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0);
            B[row][grp] = half_bits_to_float(h, bf16);
        }
    }
    for (int l = 0; l < 32; l++) {
        const int grp = l >> 2, tig = l & 3;
        for (int i = 0; i < 4; i++) {
            const int row = i < 2 ? grp : grp + 8, col = tig * 2 + (i & 1);
            double acc = w.in[l].c[i];
            for (int k = 0; k < 16; k++) acc += (double)A[row][k] * B[k][col];
            w.out[l].c[i] = (float)acc;
        }
    }
}

/* The calling thread's part of a warp collective: deposit, wait for the 32 lanes, collect. */
inline lane_out warp_collective(const lane_in &in) {
    state &s = ctx();
    const unsigned t = s.fibers[(size_t)s.cur].linear, lane = t & 31;
    warp_state &w = s.warps[t >> 5];
    if (in.mask != 0xffffffffu) fail("only full-warp masks are emulated");
    w.in[lane] = in;
    const unsigned gen = w.gen;
    if (++w.count == 32) {
        for (int l = 1; l < 32; l++)
            if (w.in[l].kind != w.in[0].kind) fail("lanes of a warp reached different collectives");
        if (in.kind == OP_SHFL) {
            for (int l = 0; l < 32; l++) w.out[l].v = w.in[w.in[l].src & 31].v;
        } else {
            mma_16816(w, in.kind == OP_MMA_BF16);
        }
        w.count = 0;
        w.gen++;
        s.progress++;
    } else {
        while (w.gen == gen) yield();
    }
    return w.out[lane];
}

template <typename T> T shfl(T v, int src) {
    static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
    lane_in in = {};
    in.kind = OP_SHFL;
    in.mask = 0xffffffffu;
    memcpy(&in.v, &v, sizeof v);
    in.src = src;
    lane_out out = warp_collective(in);
    T r;
    memcpy(&r, &out.v, sizeof r);
    return r;
}

inline void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1, int kind) {
    lane_in in = {};
    in.kind = kind;
    in.mask = 0xffffffffu;
    memcpy(in.a, a, sizeof in.a);
    in.b[0] = b0, in.b[1] = b1;
    memcpy(in.c, c, sizeof in.c);
    lane_out out = warp_collective(in);
    memcpy(c, out.c, sizeof out.c);
}

inline const uint3 &thread_idx() {
    return ctx().fibers[(size_t)ctx().cur].tid;
}

/* n elements of T, `offset` elements past a 16-byte aligned address (offset 1 misaligns a
 * tensor on purpose), ending less than 16 bytes before an inaccessible page (exactly at it when
 * the size is a multiple of 16); release with guarded_free. */
inline size_t guarded_span(size_t bytes) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + 15 + page - 1) / page * page + page;
}
template <typename T> T *guarded(size_t n, size_t offset = 0) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t bytes = (n + offset) * sizeof(T), span = guarded_span(bytes);
    unsigned char *map = static_cast<unsigned char *>(
        mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (map == MAP_FAILED) fail("guarded: out of memory");
    mprotect(map + span - page, page, PROT_NONE);
    const uintptr_t base = ((uintptr_t)(map + span - page) - bytes) & ~(uintptr_t)15;
    return reinterpret_cast<T *>(base) + offset;
}
template <typename T> void guarded_free(T *p, size_t n, size_t offset = 0) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t bytes = (n + offset) * sizeof(T), span = guarded_span(bytes);
    const uintptr_t end = (uintptr_t)(p - offset) + bytes;
    const uintptr_t guard = (end + page - 1) / page * page;
    munmap(reinterpret_cast<void *>(guard + page - span), span);
}

} // namespace emu

/* ---- the device API the kernel headers use ------------------------------------------------ */

#define threadIdx (emu::thread_idx())
#define blockIdx  (emu::ctx().block_idx)
#define blockDim  (emu::ctx().block_dim)
#define gridDim   (emu::ctx().grid_dim)

inline void __syncthreads() {
    emu::state &s = emu::ctx();
    const unsigned gen = s.bar_gen;
    if (++s.bar_count >= s.live) {
        s.bar_count = 0;
        s.bar_gen++;
        s.progress++;
        return;
    }
    while (s.bar_gen == gen) emu::yield();
}

template <typename T> T __shfl_sync(unsigned mask, T v, int src) {
    if (mask != 0xffffffffu) emu::fail("only full-warp masks are emulated");
    return emu::shfl(v, src);
}
template <typename T> T __shfl_xor_sync(unsigned mask, T v, int x) {
    if (mask != 0xffffffffu) emu::fail("only full-warp masks are emulated");
    return emu::shfl(v, (int)(emu::ctx().fibers[(size_t)emu::ctx().cur].linear & 31) ^ x);
}

/* One OS thread runs every fiber and none is preempted, so plain updates are atomic here. */
inline int atomicExch(int *p, int v) {
    int old = *p;
    *p = v;
    return old;
}

/* The device's integer min/max overloads; a single int version would silently truncate the
 * 64-bit calls (sum_squares' block bounds). */
#define TR_EMU_MINMAX(T)                                                                           \
    inline T min(T a, T b) {                                                                       \
        return a < b ? a : b;                                                                      \
    }                                                                                              \
    inline T max(T a, T b) {                                                                       \
        return a > b ? a : b;                                                                      \
    }
TR_EMU_MINMAX(int)
TR_EMU_MINMAX(unsigned)
TR_EMU_MINMAX(long)
TR_EMU_MINMAX(unsigned long)
TR_EMU_MINMAX(long long)
TR_EMU_MINMAX(unsigned long long)
#undef TR_EMU_MINMAX

inline unsigned char *tr_emu_dynamic_smem() {
    return emu::ctx().dyn_smem;
}
/* Garbage-filled like the dynamic part; one buffer per declaration and block. */
inline void *tr_emu_static_smem(const void *key, size_t bytes) {
    auto &m = emu::ctx().static_smem;
    auto it = m.find(key);
    if (it == m.end()) it = m.emplace(key, std::vector<unsigned char>(bytes, 0xff)).first;
    return it->second.data();
}

inline void tr_mma_16816_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    emu::mma(c, a, b0, b1, emu::OP_MMA_BF16);
}
inline void tr_mma_16816_f16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    emu::mma(c, a, b0, b1, emu::OP_MMA_F16);
}

#endif
