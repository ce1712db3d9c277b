/* The CUDA backend's host-side logic, which runs (and must pass) on machines without a GPU:
 * arena accounting over caller memory, and the argument checks every op makes before it
 * touches the device (the same TR_ERR_INVALID cases as the CPU table). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/arena.h"
#include "kernels/cuda/cuda_mixed.h"
#include "kernels/cuda/cuda_ops.h"
#include "runtime/comm/nccl.h"
#include "runtime/comm/staged.h"
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
    tr_attn_desc d = {.batch = 1,
                      .seq = 4,
                      .heads = 3,
                      .groups = 2,
                      .head_dim = 8,
                      .scale = 0.5f,
                      .causal = 1}; /* 3 heads, 2 groups */
    CHECK(g->attention_fwd(f, f, f, f, f, &d) == TR_ERR_INVALID);
    tr_attn_desc docs = {.batch = 1,
                         .seq = 4,
                         .heads = 2,
                         .groups = 2,
                         .head_dim = 8,
                         .scale = 0.5f,
                         .doc_start = ids}; /* documents need the causal mask */
    CHECK(g->attention_fwd(f, f, f, f, f, &docs) == TR_ERR_INVALID);
    /* attention dropout: p in (0, 1), heads inside heads_total, as on the CPU */
    tr_attn_desc drop = {.batch = 1,
                         .seq = 4,
                         .heads = 2,
                         .groups = 2,
                         .head_dim = 8,
                         .scale = 0.5f,
                         .causal = 1,
                         .dropout = 1.0f};
    CHECK(g->attention_fwd(f, f, f, f, f, &drop) == TR_ERR_INVALID);
    drop.dropout = 0.1f, drop.head_offset = 1, drop.heads_total = 2;
    CHECK(g->attention_fwd(f, f, f, f, f, &drop) == TR_ERR_INVALID);
    CHECK(g->swiglu_bwd(f, f, f, 1, 2) == TR_ERR_INVALID);
    CHECK(g->dropout_fwd(f, f, 4, -0.1f, 1, 0) == TR_ERR_INVALID);
    CHECK(g->ce_stats(f, f, ids, 1, -1, 0) == TR_ERR_INVALID);
    tr_adamw_params a = {1e-3f, 0.9f, 0.95f, 1e-8f, 0, 0, 1.0f};
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

/* ---- The argument checks against the CPU table's, case by case, on any machine ---------------
 * A check-only context makes every CUDA op stop after its argument checks (TR_OK) or refuse
 * (TR_ERR_INVALID) without touching memory; the CPU op gets the same arguments over host buffers
 * large enough for every valid call. Each op's sizes range over negative, zero and small values,
 * and each pointer over a buffer and NULL (and aliasing where an op refuses it). */
#define BUF_FLOATS 4096
#define NBUF       8
static float g_buf[NBUF][BUF_FLOATS];
static int32_t g_ids[BUF_FLOATS]; /* token ids / targets: -1 (ignored) or small valid ids */
static const tr_ops *cpu_ops, *cuda_ops;
static int g_cases, g_mismatches;

static void same_rc(const char *op, tr_status c, tr_status g, const char *args) {
    g_cases++;
    if (c == g) return;
    if (g_mismatches++ < 20)
        fprintf(stderr, "  %s(%s): cpu %d, cuda %d\n", op, args, (int)c, (int)g);
}

/* Pointer argument i of a call: buffer i, or NULL when bit i of mask is set. */
static float *P(unsigned mask, int i) {
    return mask >> i & 1u ? NULL : g_buf[i];
}
static const int32_t *IDS(unsigned mask, int i) {
    return mask >> i & 1u ? NULL : g_ids;
}

static const int SZ[] = {-1, 0, 1, 3};
#define NSZ 4

/* The k-th size of combination i (i enumerates NSZ^k combinations). */
static int sz(int i, int k) {
    while (k--) i /= NSZ;
    return SZ[i % NSZ];
}

/* Two sizes and two of 4 choices: combination i < SIZES2_PICKS2 gives sz(i, 0), sz(i, 1) and the
 * choices pick(i, 0), pick(i, 1), each in [0, 4). */
#define SIZES2_PICKS2 (NSZ * NSZ * 16)
static int pick(int i, int k) {
    return i / (NSZ * NSZ) / (k ? 4 : 1) % 4;
}

#define CMP(op, fmt, ...)                                                                          \
    do {                                                                                           \
        char a_[160];                                                                              \
        snprintf(a_, sizeof a_, fmt, __VA_ARGS__);                                                 \
        same_rc(#op, cpu_ops->op(ARGS), cuda_ops->op(ARGS), a_);                                   \
    } while (0)

static void flat_cases(void) {
    const float ps[] = {-0.1f, 0.0f, 0.5f, 1.0f};
    for (unsigned m = 0; m < 4; m++)
        for (int i = 0; i < NSZ; i++) {
            int n = sz(i, 0);
#define ARGS P(m, 0), P(m, 1), n
            CMP(add, "mask %u n %d", m, n);
            CMP(sum_squares, "mask %u n %d", m, n);
#undef ARGS
#define ARGS P(m, 0), n, 0.5f
            CMP(fill, "mask %u n %d", m, n);
            CMP(scale, "mask %u n %d", m, n);
#undef ARGS
#define ARGS P(m, 0), n, 0.5f, P(m, 1)
            CMP(unscale_check, "mask %u n %d", m, n);
#undef ARGS
            for (int t = 0; t < 2; t++) {
#define ARGS P(m, 0), P(m, 1), n, t
                CMP(gelu_fwd, "mask %u n %d", m, n);
#undef ARGS
#define ARGS P(m, 0), P(m, 1), P(m, 2), n, t
                CMP(gelu_bwd, "mask %u n %d", m, n);
#undef ARGS
            }
            for (int k = 0; k < 4; k++) {
#define ARGS P(m, 0), P(m, 1), n, ps[k], 7, 3
                CMP(dropout_fwd, "mask %u n %d p %g", m, n, ps[k]);
                CMP(dropout_bwd, "mask %u n %d p %g", m, n, ps[k]);
#undef ARGS
            }
        }
}

static void layout_cases(void) {
    const int64_t ld[] = {-1, 0, 2, 5};
    for (unsigned m = 0; m < 4; m++)
        for (int i = 0; i < SIZES2_PICKS2; i++) {
            int rows = sz(i, 0), cols = sz(i, 1), a = pick(i, 0), b = pick(i, 1);
#define ARGS P(m, 0), ld[a], P(m, 1), ld[b], rows, cols
            CMP(copy_2d, "mask %u ldd %lld lds %lld rows %d cols %d", m, (long long)ld[a],
                (long long)ld[b], rows, cols);
#undef ARGS
#define ARGS P(m, 0), ld[a], rows, cols, 1.0f
            CMP(fill_2d, "mask %u ld %lld rows %d cols %d", m, (long long)ld[a], rows, cols);
#undef ARGS
#define ARGS g_buf[0] + b, ld[a], g_buf[0], 5, rows, cols /* overlapping views of one buffer */
            CMP(copy_2d, "overlap +%d ldd %lld rows %d cols %d", b, (long long)ld[a], rows, cols);
#undef ARGS
        }
    for (unsigned m = 0; m < 8; m++)
        for (int i = 0; i < NSZ; i++) {
            int rows = sz(i, 0);
#define ARGS P(m, 0), P(m, 1), IDS(m, 2), rows
            CMP(loss_mean, "mask %u rows %d", m, rows);
#undef ARGS
        }
}

static void embedding_cases(void) {
    const int vs[] = {-1, 0, 2, 4};
    for (unsigned m = 0; m < 8; m++)
        for (int i = 0; i < SIZES2_PICKS2; i++) {
            int n = sz(i, 0), dim = sz(i, 1), a = pick(i, 0), b = pick(i, 1);
#define ARGS P(m, 0), IDS(m, 1), P(m, 2), n, dim, vs[a], vs[b]
            CMP(embedding_fwd, "mask %u n %d dim %d vocab [%d, %d)", m, n, dim, vs[a], vs[b]);
            CMP(embedding_bwd, "mask %u n %d dim %d vocab [%d, %d)", m, n, dim, vs[a], vs[b]);
#undef ARGS
        }
    for (unsigned m = 0; m < 4; m++)
        for (int i = 0; i < NSZ * NSZ * NSZ * 3; i++) {
            int batch = sz(i, 0), seq = sz(i, 1), dim = sz(i, 2), off = i / (NSZ * NSZ * NSZ) - 1;
#define ARGS P(m, 0), P(m, 1), batch, seq, dim, off
            CMP(pos_embedding_fwd, "mask %u b %d s %d dim %d off %d", m, batch, seq, dim, off);
            CMP(pos_embedding_bwd, "mask %u b %d s %d dim %d off %d", m, batch, seq, dim, off);
#undef ARGS
        }
}

static void norm_cases(void) {
    for (unsigned m = 0; m < 64; m++)
        for (int i = 0; i < NSZ * NSZ * 2; i++) {
            int rows = sz(i, 0), dim = sz(i, 1), zc = i / (NSZ * NSZ);
#define ARGS P(m, 0), P(m, 1), P(m, 2), P(m, 3), P(m, 4), P(m, 5), rows, dim, 1e-5f, zc
            CMP(layernorm_fwd, "mask %u rows %d dim %d", m, rows, dim);
#undef ARGS
#define ARGS P(m, 0), P(m, 1), P(m, 2), P(m, 3), rows, dim, 1e-5f, zc
            CMP(rmsnorm_fwd, "mask %u rows %d dim %d", m, rows, dim);
#undef ARGS
#define ARGS P(m, 0), P(m, 1), P(m, 2), P(m, 3), P(m, 4), P(m, 5), rows, dim, zc
            CMP(rmsnorm_bwd, "mask %u rows %d dim %d", m, rows, dim);
#undef ARGS
        }
    for (unsigned m = 0; m < 256; m++)
        for (int i = 0; i < NSZ * NSZ; i++) {
            int rows = sz(i, 0), dim = sz(i, 1);
#define ARGS P(m, 0), P(m, 1), P(m, 2), P(m, 3), P(m, 4), P(m, 5), P(m, 6), P(m, 7), rows, dim, 1
            CMP(layernorm_bwd, "mask %u rows %d dim %d", m, rows, dim);
#undef ARGS
        }
}

static void rope_cases(void) {
    tr_rope_params ok = {.rot_dim = 4, .base = 10000.0};
    tr_rope_params l3 = {.rot_dim = 4,
                         .base = 500000.0,
                         .llama3 = 1,
                         .factor = 8,
                         .low_freq_factor = 1,
                         .high_freq_factor = 4,
                         .original_max_position = 64};
    tr_rope_params par[] = {ok, ok, ok, l3, l3, l3};
    par[1].rot_dim = 3, par[2].base = 1.0, par[4].high_freq_factor = 1, par[5].factor = 0;
    for (unsigned m = 0; m < 4; m++)
        for (int i = 0; i < NSZ * 3 * 6; i++) {
            int seq = sz(i, 0), off = i / NSZ % 3 - 1, k = i / (NSZ * 3);
#define ARGS P(m, 0), P(m, 1), &par[k], seq, off
            CMP(rope_table, "params %d mask %u seq %d off %d", k, m, seq, off);
#undef ARGS
        }
    const int rots[] = {-2, 0, 1, 2, 4, 6};
    for (unsigned m = 0; m < 16; m++)
        for (int i = 0; i < NSZ * NSZ * NSZ * 6 * 6; i++) {
            int batch = sz(i, 0), seq = sz(i, 1), heads = sz(i, 2);
            int hd = i / (NSZ * NSZ * NSZ) % 6 - 1, rot = rots[i / (NSZ * NSZ * NSZ * 6)];
#define ARGS P(m, 0), P(m, 1), P(m, 2), P(m, 3), batch, seq, heads, hd, rot
            CMP(rope_fwd, "mask %u b %d s %d h %d hd %d rot %d", m, batch, seq, heads, hd, rot);
            CMP(rope_bwd, "mask %u b %d s %d h %d hd %d rot %d", m, batch, seq, heads, hd, rot);
#undef ARGS
        }
}

static void activation_cases(void) {
    for (unsigned m = 0; m < 8; m++)
        for (int i = 0; i < NSZ * NSZ; i++) {
            int rows = sz(i, 0), ffn = sz(i, 1);
#define ARGS P(m, 0), P(m, 1), rows, ffn
            CMP(swiglu_fwd, "mask %u rows %d ffn %d", m, rows, ffn);
#undef ARGS
#define ARGS P(m, 0), P(m, 1), P(m, 2), rows, ffn
            CMP(swiglu_bwd, "mask %u rows %d ffn %d", m, rows, ffn);
#undef ARGS
#define ARGS g_buf[0], g_buf[1], g_buf[0], rows, ffn /* dx aliases x */
            CMP(swiglu_bwd, "dx == x rows %d ffn %d", rows, ffn);
#undef ARGS
#define ARGS g_buf[0], g_buf[0], g_buf[1], rows, ffn /* dx aliases dy */
            CMP(swiglu_bwd, "dx == dy rows %d ffn %d", rows, ffn);
#undef ARGS
        }
}

static void cross_entropy_cases(void) {
    const int vs[] = {-1, 0, 2};
    memset(g_buf, 0, sizeof g_buf);
    for (unsigned m = 0; m < 16; m++)
        for (int i = 0; i < NSZ * NSZ * 3; i++) {
            int rows = sz(i, 0), vl = sz(i, 1), a = i / (NSZ * NSZ);
#define ARGS P(m, 0), P(m, 1), IDS(m, 2), rows, vl, vs[a]
            CMP(ce_stats, "mask %u rows %d vocab %d start %d", m, rows, vl, vs[a]);
#undef ARGS
#define ARGS P(m, 0), P(m, 1), IDS(m, 2), P(m, 3), rows, vl, vs[a]
            CMP(ce_bwd, "mask %u rows %d vocab %d start %d", m, rows, vl, vs[a]);
#undef ARGS
        }
    /* stats whose max (0, or -inf after ce_loss) never exceeds the "global" max 0: every
     * ce_rebase is valid, so only the argument checks decide */
    memset(g_buf, 0, sizeof g_buf);
    for (unsigned m = 0; m < 8; m++)
        for (int i = 0; i < NSZ; i++) {
            int rows = sz(i, 0);
#define ARGS P(m, 0), P(m, 1), rows
            CMP(ce_merge, "mask %u rows %d", m, rows);
            CMP(ce_rebase, "mask %u rows %d", m, rows);
#undef ARGS
#define ARGS P(m, 0), P(m, 1), IDS(m, 2), rows
            CMP(ce_loss, "mask %u rows %d", m, rows);
#undef ARGS
        }
}

static void optimizer_cases(void) {
    const float moms[] = {0.0f, 0.9f};
    for (unsigned m = 0; m < 16; m++)
        for (int i = 0; i < NSZ * 3; i++) {
            int n = sz(i, 0), step = i / NSZ - 1;
            tr_adamw_params a = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 1.0f};
#define ARGS P(m, 0), P(m, 1), P(m, 2), P(m, 3), n, &a
            CMP(adamw, "mask %u n %d step %d", m, n, step);
#undef ARGS
            for (int k = 0; k < 2; k++) {
                tr_sgd_params s = {0.1f, moms[k], 0.0f, 1};
#define ARGS P(m, 0), P(m, 1), P(m, 2), n, &s
                CMP(sgd, "mask %u n %d momentum %g", m, n, moms[k]);
#undef ARGS
            }
        }
#define ARGS g_buf[0], g_buf[1], g_buf[2], g_buf[3], 4, NULL
    CMP(adamw, "%s", "no params");
#undef ARGS
#define ARGS g_buf[0], g_buf[1], g_buf[2], 4, NULL
    CMP(sgd, "%s", "no params");
#undef ARGS
}

static void test_checks_match_cpu(void) {
    cpu_ops = tr_ops_cpu();
    cuda_ops = tr_ops_cuda();
    for (int i = 0; i < BUF_FLOATS; i++) g_ids[i] = i % 3 == 2 ? -1 : i % 2;
    tr_cuda_ctx *ctx = NULL;
    CHECK(tr_cuda_ctx_create_check_only(&ctx) == TR_OK);
    tr_cuda_bind(ctx);
    flat_cases();
    layout_cases();
    embedding_cases();
    norm_cases();
    rope_cases();
    activation_cases();
    cross_entropy_cases();
    optimizer_cases();
    tr_cuda_ctx_destroy(ctx);
    CHECK(tr_cuda_bound() == NULL);
    printf("argument checks: %d calls, %d differ from the CPU's\n", g_cases, g_mismatches);
    CHECK(g_cases > 10000);
    CHECK_INT_EQ(g_mismatches, 0);
}

static void test_backends_built(void) {
    CHECK(tr_comm_staged_built()); /* this test only exists in CUDA builds */
    printf("NCCL backend built: %s\n", tr_comm_nccl_built() ? "yes" : "no");
}

TR_TEST_MAIN(TR_TEST(test_arena_accounting), TR_TEST(test_arenas_peak_total),
             TR_TEST(test_argument_checks), TR_TEST(test_checks_match_cpu),
             TR_TEST(test_unbound_context), TR_TEST(test_backends_built))
