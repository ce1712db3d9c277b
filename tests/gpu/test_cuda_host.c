/* The CUDA backend's host-side logic, which runs (and must pass) on machines without a GPU:
 * arena accounting over caller memory, and the argument checks every op makes before it
 * touches the device (the same TR_ERR_INVALID cases as the CPU table). */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cuda/arena.h"
#include "kernels/cuda/cuda_mixed.h"
#include "kernels/cuda/cuda_ops.h"
#include "runtime/comm_nccl.h"
#include "tests/unit/harness.h"

static void test_arena_accounting(void) {
    const size_t cap = 4096;
    void *mem = aligned_alloc(TR_ARENA_ALIGN, cap);
    tr_arena a;
    CHECK(tr_arena_init(&a, TR_ARENA_ACTIVATIONS, mem, cap) == TR_OK);
    void *p1, *p2, *p3;
    CHECK(tr_arena_alloc(&a, 10, &p1) == TR_OK);
    CHECK(p1 == mem);
    CHECK_INT_EQ(a.used, TR_ARENA_ALIGN); /* rounded up to the alignment */
    size_t mark = tr_arena_mark(&a);
    CHECK(tr_arena_alloc(&a, 1000, &p2) == TR_OK);
    CHECK((uintptr_t)p2 % TR_ARENA_ALIGN == 0);
    CHECK((char *)p2 == (char *)mem + TR_ARENA_ALIGN);
    CHECK_INT_EQ(a.used, TR_ARENA_ALIGN + 1024);
    CHECK_INT_EQ(a.peak, TR_ARENA_ALIGN + 1024);
    CHECK(tr_arena_reset(&a, mark) == TR_OK);
    CHECK_INT_EQ(a.used, TR_ARENA_ALIGN);
    CHECK_INT_EQ(a.peak, TR_ARENA_ALIGN + 1024); /* the peak remembers */
    CHECK(tr_arena_alloc(&a, 0, &p3) == TR_OK);  /* zero bytes: a pointer, no space */
    CHECK_INT_EQ(a.used, TR_ARENA_ALIGN);
    /* exactly full succeeds, one more byte fails and changes nothing */
    CHECK(tr_arena_alloc(&a, cap - TR_ARENA_ALIGN, &p3) == TR_OK);
    CHECK_INT_EQ(a.used, cap);
    CHECK(tr_arena_alloc(&a, 1, &p3) == TR_ERR_NOMEM);
    CHECK(p3 == NULL);
    CHECK_INT_EQ(a.used, cap);
    CHECK(tr_arena_alloc(&a, SIZE_MAX, &p3) == TR_ERR_NOMEM); /* no wrap-around */
    CHECK(tr_arena_reset(&a, cap + 1) == TR_ERR_INVALID);
    CHECK(tr_arena_reset(&a, 0) == TR_OK);
    tr_arena_reset_peak(&a);
    CHECK_INT_EQ(a.peak, 0);
    CHECK(tr_arena_init(&a, TR_ARENA_PARAMS, (char *)mem + 8, 64) == TR_ERR_INVALID);
    CHECK(tr_arena_init(&a, TR_ARENA_KIND_COUNT, mem, 64) == TR_ERR_INVALID);
    free(mem);
}

static void test_arenas_peak_total(void) {
    tr_arenas s = {0};
    void *mem[TR_ARENA_KIND_COUNT];
    for (int k = 0; k < TR_ARENA_KIND_COUNT; k++) {
        mem[k] = aligned_alloc(TR_ARENA_ALIGN, 2048);
        CHECK(tr_arena_init(&s.a[k], (tr_arena_kind)k, mem[k], 2048) == TR_OK);
        void *p;
        CHECK(tr_arena_alloc(&s.a[k], (size_t)(k + 1) * TR_ARENA_ALIGN, &p) == TR_OK);
    }
    CHECK_INT_EQ(tr_arenas_peak_total(&s), 15 * TR_ARENA_ALIGN); /* 1+2+3+4+5 units */
    CHECK_STR_EQ(tr_arena_kind_name(TR_ARENA_OPTIMIZER), "optimizer");
    tr_arenas_log_peaks(&s);
    tr_arenas_destroy(&s); /* not owned: frees nothing */
    for (int k = 0; k < TR_ARENA_KIND_COUNT; k++) free(mem[k]);
}

/* Bad arguments are refused on the host, before the bound context is even looked at. */
static void test_argument_checks(void) {
    const tr_ops *g = tr_ops_cuda();
    float f[4];
    int32_t ids[4] = {0};
    CHECK(g->gemm(TR_NOTRANS, TR_NOTRANS, -1, 2, 2, 1, f, 2, f, 2, 0, f, 2) == TR_ERR_INVALID);
    CHECK(g->gemm(TR_NOTRANS, TR_NOTRANS, 2, 2, 3, 1, f, 2, f, 2, 0, f, 2) == TR_ERR_INVALID);
    CHECK(g->gemm(TR_NOTRANS, TR_NOTRANS, 0, 2, 3, 1, f, 3, f, 2, 0, f, 2) == TR_OK); /* empty */
    CHECK(g->add(f, NULL, 4) == TR_ERR_INVALID);
    CHECK(g->sum_squares(NULL, f, 4) == TR_ERR_INVALID);
    CHECK(g->layernorm_fwd(f, f, f, f, f, NULL, 2, 0, 1e-5f, 0) == TR_ERR_INVALID);
    CHECK(g->rope_fwd(f, f, f, f, 1, 1, 1, 4, 3) == TR_ERR_INVALID); /* odd rot_dim */
    tr_attn_desc d = {1, 4, 3, 2, 8, 0.5f, 1, 0, 0, NULL, 0, 0};     /* 3 heads, 2 groups */
    CHECK(g->attention_fwd(f, f, f, f, f, &d) == TR_ERR_INVALID);
    tr_attn_desc docs = {1, 4, 2, 2,   8, 0.5f,
                         0, 0, 0, ids, 0, 0}; /* documents need the causal mask */
    CHECK(g->attention_fwd(f, f, f, f, f, &docs) == TR_ERR_INVALID);
    CHECK(g->swiglu_bwd(f, f, f, 1, 2) == TR_ERR_INVALID);
    CHECK(g->dropout_fwd(f, f, 4, -0.1f, 1, 0) == TR_ERR_INVALID);
    CHECK(g->ce_stats(f, f, ids, 1, -1, 0) == TR_ERR_INVALID);
    tr_adamw_params a = {1e-3f, 0.9f, 0.95f, 1e-8f, 0, 0};
    CHECK(g->adamw(f, f, f, f, 4, &a) == TR_ERR_INVALID);
    CHECK(g->embedding_fwd(f, ids, f, 4, 1, 5, 2) == TR_ERR_INVALID);
    uint16_t h[4];
    CHECK(tr_cuda_gemm_bf16(TR_NOTRANS, TR_NOTRANS, 2, 2, 2, 1, h, 2, h, 2, 1.0f, f, TR_CUDA_F32, 2,
                            f) == TR_ERR_INVALID); /* bias needs beta == 0 */
    CHECK(tr_cuda_gemm_bf16(TR_NOTRANS, TR_NOTRANS, 2, 2, 2, 1, h, 2, h, 2, 0, f, TR_CUDA_F16, 2,
                            NULL) == TR_ERR_INVALID); /* fp16 output not offered */
}

/* A valid call with no context bound fails cleanly instead of using a default stream. */
static void test_unbound_context(void) {
    tr_cuda_bind(NULL);
    float f[4];
    CHECK(tr_cuda_bound() == NULL);
    CHECK(tr_ops_cuda()->fill(f, 4, 1.0f) == TR_ERR_INVALID);
    CHECK(tr_cuda_sync() == TR_ERR_INVALID);
}

static void test_backends_built(void) {
    CHECK(tr_comm_staged_built()); /* this test only exists in CUDA builds */
    printf("NCCL backend built: %s\n", tr_comm_nccl_built() ? "yes" : "no");
}

TR_TEST_MAIN(TR_TEST(test_arena_accounting), TR_TEST(test_arenas_peak_total),
             TR_TEST(test_argument_checks), TR_TEST(test_unbound_context),
             TR_TEST(test_backends_built))
