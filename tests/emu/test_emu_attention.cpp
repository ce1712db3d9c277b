/* The real attention kernels (kernels/cuda/attention_kernels.cuh, attention_tc_kernels.cuh) run
 * by the host emulator against the CPU op, with the launch geometry and limits of
 * tests/gpu/test_cuda_ops.c: 1e-5 (forward) and 1e-4 (backward) for the fp32 SIMT kernels, 2e-2
 * (bf16) and 5e-3 (fp16) for the tensor-core ones, whose derivation that file gives. Shapes are
 * smaller than on the GPU (the emulator runs a few million fibre switches a second) but cover
 * the same branches: GQA, causal or not, documents across tile edges, T not a multiple of any
 * tile, every tensor-core head_dim, fp32 and bf16 storage, misaligned tensors. */
#include "tests/emu/emu_test.h"

#include "tests/emu/cuda_emu.h"

#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/attention_tc_kernels.cuh"

#include <algorithm>
#include <type_traits>

namespace {

const tr_ops *cpu;

/* A device tensor: guarded host memory (emu::guarded), `off` elements past a 16-byte boundary. */
template <typename T> struct dbuf {
    T *p;
    size_t n, off;
    explicit dbuf(size_t n_, size_t off_ = 0) : p(emu::guarded<T>(n_, off_)), n(n_), off(off_) {
        memset((void *)p, 0xff, n * sizeof(T)); /* NaN in every storage type */
    }
    ~dbuf() {
        emu::guarded_free(p, n, off);
    }
    dbuf(const dbuf &) = delete;
    dbuf &operator=(const dbuf &) = delete;
};

/* Storage conversions through lowp_round.h, not through the code under test. */
void put(float *dst, const std::vector<float> &src) {
    memcpy(dst, src.data(), src.size() * sizeof(float));
}
void put(__nv_bfloat16 *dst, const std::vector<float> &src) {
    for (size_t i = 0; i < src.size(); i++) {
        const uint16_t b = (uint16_t)(tr_f32_bits(tr_round_bf16(src[i])) >> 16);
        memcpy((void *)(dst + i), &b, 2);
    }
}
std::vector<float> get(const float *src, size_t n) {
    return std::vector<float>(src, src + n);
}
std::vector<float> get(const __nv_bfloat16 *src, size_t n) {
    std::vector<float> r(n);
    for (size_t i = 0; i < n; i++) {
        uint16_t b;
        memcpy(&b, (const void *)(src + i), 2);
        r[i] = tr_f32_from_bits((uint32_t)b << 16);
    }
    return r;
}
void round_bf16(std::vector<float> &v) {
    for (auto &x : v) x = tr_round_bf16(x);
}

std::vector<int32_t> doc_starts(int B, int T, int doc_len) {
    std::vector<int32_t> ds;
    if (doc_len)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) ds.push_back(t / doc_len * doc_len);
    return ds;
}

/* A descriptor; p > 0 adds attention dropout with fixed, nonzero mask coordinates (a TP rank's
 * head offset among them, and the call placed as a block of a longer sequence, as context
 * parallelism's ring places it: at even token coordinates, or odd ones with `odd`). */
tr_attn_desc desc_of(int B, int T, int Hh, int G, int D, int causal, int lowp, int trusted, float p,
                     int odd = 0) {
    tr_attn_desc d = {};
    d.batch = B, d.seq = T, d.heads = Hh, d.groups = G, d.head_dim = D;
    d.scale = 1.0f / sqrtf((float)D), d.causal = causal, d.lowp = lowp;
    d.doc_start_trusted = trusted;
    if (p > 0.0f) {
        d.dropout = p, d.dropout_seed = 0xA77E17D0ull + (uint64_t)T, d.dropout_round = 17;
        d.dropout_layer = 5, d.head_offset = Hh, d.heads_total = 3 * Hh;
        d.dropout_row0 = 3, d.dropout_q0 = 2 * T + 6 + odd, d.dropout_k0 = 2 * T + 4 + 3 * odd;
    }
    return d;
}

/* The inputs and the CPU's results of one case. */
struct reference {
    std::vector<float> q, k, v, g, o, lse, dq, dk, dv;
    std::vector<int32_t> ds;
};

reference cpu_reference(tr_attn_desc &d, bool bf16_storage, uint64_t seed) {
    reference r;
    const size_t nq = (size_t)d.batch * d.seq * d.heads * d.head_dim;
    const size_t nk = (size_t)d.batch * d.seq * d.groups * d.head_dim;
    const size_t nl = (size_t)d.batch * d.heads * d.seq;
    emu_test::rng rng(seed);
    r.q = rng.vec(nq, -2, 2), r.k = rng.vec(nk, -2, 2), r.v = rng.vec(nk, -1, 1);
    r.g = rng.vec(nq, -1, 1);
    if (bf16_storage) round_bf16(r.q), round_bf16(r.k), round_bf16(r.v), round_bf16(r.g);
    r.o.resize(nq), r.lse.resize(nl), r.dq.resize(nq), r.dk.resize(nk), r.dv.resize(nk);
    CHECK(cpu->attention_fwd(r.o.data(), r.lse.data(), r.q.data(), r.k.data(), r.v.data(), &d) ==
          TR_OK);
    /* backward from the output as the storage holds it, as the GPU test does */
    if (bf16_storage) round_bf16(r.o);
    CHECK(cpu->attention_bwd(r.dq.data(), r.dk.data(), r.dv.data(), r.g.data(), r.q.data(),
                             r.k.data(), r.v.data(), r.o.data(), r.lse.data(), &d) == TR_OK);
    return r;
}

/* di [B, T, H] = rowsum(dO * O), by the kernel the CUDA op launches before either backward. */
template <typename S> void run_di(float *di, const S *dout, const S *o, const tr_attn_desc &d) {
    const int64_t rows = (int64_t)d.batch * d.seq * d.heads;
    emu::launch(dim3(tr_cuda_blocks(rows * 32, 256)), dim3(256), 0,
                [&] { attn_di_kernel<S>(di, dout, o, rows, d.head_dim); });
}

/* ---- tensor cores ------------------------------------------------------------------------- */

template <int D, typename H, typename S>
void tc_case(int B, int T, int Hh, int G, int causal, int doc_len, int misalign, float p = 0.0f) {
    const int lowp = std::is_same<H, __half>::value ? TR_LOWP_F16 : TR_LOWP_BF16;
    const bool bf16_storage = std::is_same<S, __nv_bfloat16>::value;
    tr_attn_desc d = desc_of(B, T, Hh, G, D, causal, lowp, 1, p);
    std::vector<int32_t> ds = doc_starts(B, T, doc_len);
    d.doc_start = doc_len ? ds.data() : NULL;
    reference r = cpu_reference(d, bf16_storage, (uint64_t)(T * 131 + D * 7 + Hh + doc_len));
    const double tol = lowp == TR_LOWP_BF16 ? 2e-2 : 5e-3;
    const size_t nq = r.q.size(), nk = r.k.size(), nl = r.lse.size();
    const size_t off = misalign ? 1 : 0;

    dbuf<S> Q(nq, off), K(nk, off), V(nk, off), Gd(nq, off), O(nq), O2(nq, off);
    dbuf<S> DQ(nq), DK(nk), DV(nk), DQ2(nq), DK2(nk), DV2(nk);
    dbuf<float> L(nl), L2(nl), DI((size_t)B * T * Hh);
    dbuf<int32_t> DS(doc_len ? ds.size() : 1);
    put(Q.p, r.q), put(K.p, r.k), put(V.p, r.v), put(Gd.p, r.g), put(O2.p, r.o), put(L2.p, r.lse);
    if (doc_len) memcpy(DS.p, ds.data(), ds.size() * sizeof(int32_t));
    d.doc_start = doc_len ? DS.p : NULL;
    const att_shape s = att_shape_of(&d);
    /* misaligned inputs must take stage()'s element-wise path, aligned ones the vector path */
    CHECK(((reinterpret_cast<uintptr_t>(Q.p) & 15) != 0) == (misalign != 0));

    emu::launch(tc_grid(&d, Hh, FW_ROWS), dim3(FW_THREADS), fwd_smem<D>(), [&] {
        /* the launcher's choice: the DROP instantiation exactly when dropping */
        if (p > 0.0f)
            tc_fwd_kernel<D, H, S, true>(O.p, L.p, Q.p, K.p, V.p, s);
        else
            tc_fwd_kernel<D, H, S, false>(O.p, L.p, Q.p, K.p, V.p, s);
    });
    run_di(DI.p, Gd.p, O2.p, d);
    auto backward = [&](S *dq, S *dk, S *dv) {
        emu::launch(tc_grid(&d, G, TC_ROWS), dim3(TC_THREADS), dkv_smem<D>(), [&] {
            if (p > 0.0f)
                tc_dkv_kernel<D, H, S, true>(dk, dv, Gd.p, Q.p, K.p, V.p, L2.p, DI.p, s);
            else
                tc_dkv_kernel<D, H, S, false>(dk, dv, Gd.p, Q.p, K.p, V.p, L2.p, DI.p, s);
        });
        emu::launch(tc_grid(&d, Hh, TC_ROWS), dim3(TC_THREADS), dq_smem<D>(), [&] {
            if (p > 0.0f)
                tc_dq_kernel<D, H, S, true>(dq, Gd.p, Q.p, K.p, V.p, L2.p, DI.p, s);
            else
                tc_dq_kernel<D, H, S, false>(dq, Gd.p, Q.p, K.p, V.p, L2.p, DI.p, s);
        });
    };
    backward(DQ.p, DK.p, DV.p);

    char name[128];
#define TC_NAME(what)                                                                              \
    snprintf(name, sizeof name, "tc %s %s D%d B%d T%d H%d G%d c%d doc%d%s p%.2f %s",               \
             lowp == 1 ? "bf16" : "fp16", bf16_storage ? "bf16io" : "f32io", D, B, T, Hh, G,       \
             causal, doc_len, misalign ? " mis" : "", p, what)
    TC_NAME("out");
    CHECK_REL(name, get(O.p, nq).data(), r.o.data(), nq, tol);
    TC_NAME("lse");
    CHECK_REL(name, L.p, r.lse.data(), nl, tol);
    const std::vector<float> dq = get(DQ.p, nq), dk = get(DK.p, nk), dv = get(DV.p, nk);
    if (T == 1) {
        /* One key: dS = dP - di is exactly 0, so dq and dk are rounding noise of dP (see
         * tests/gpu/test_cuda_ops.c); a wrong mask or fragment gives O(1) values. */
        for (float x : dq) CHECK(fabsf(x) < 0.05f);
        for (float x : dk) CHECK(fabsf(x) < 0.05f);
    } else {
        TC_NAME("dq");
        CHECK_REL(name, dq.data(), r.dq.data(), nq, tol);
        TC_NAME("dk");
        CHECK_REL(name, dk.data(), r.dk.data(), nk, tol);
    }
    TC_NAME("dv");
    CHECK_REL(name, dv.data(), r.dv.data(), nk, tol);
#undef TC_NAME
    /* No atomics, one writer per element: a second backward, its blocks and threads scheduled in
     * the opposite order, gives the same bits. */
    emu::set_reverse_schedule(true);
    backward(DQ2.p, DK2.p, DV2.p);
    emu::set_reverse_schedule(false);
    CHECK(memcmp(DQ.p, DQ2.p, nq * sizeof(S)) == 0);
    CHECK(memcmp(DK.p, DK2.p, nk * sizeof(S)) == 0);
    CHECK(memcmp(DV.p, DV2.p, nk * sizeof(S)) == 0);
}

void test_tc_bf16(void) {
    tc_case<64, __nv_bfloat16, float>(2, 1, 4, 4, 1, 0, 0);  /* one query */
    tc_case<64, __nv_bfloat16, float>(1, 63, 4, 2, 1, 0, 0); /* under one tile, GQA */
    tc_case<16, __nv_bfloat16, float>(1, 130, 2, 2, 1, 0, 0);
    tc_case<32, __nv_bfloat16, float>(1, 100, 2, 1, 0, 0, 0);  /* non-causal, MQA */
    tc_case<128, __nv_bfloat16, float>(1, 80, 2, 1, 1, 0, 0);  /* 32-row secondary tiles */
    tc_case<64, __nv_bfloat16, float>(1, 150, 2, 1, 1, 37, 0); /* documents across tiles */
    tc_case<64, __nv_bfloat16, float>(1, 257, 16, 4, 1, 0, 0); /* 1B-like GQA, heads per group 4 */
}

void test_tc_fp16(void) {
    tc_case<64, __half, float>(1, 130, 2, 2, 0, 0, 0); /* non-causal, three tiles */
    tc_case<128, __half, float>(1, 63, 2, 1, 0, 0, 0);
    tc_case<16, __half, float>(1, 70, 2, 2, 1, 5, 0); /* many short documents */
    tc_case<32, __half, float>(1, 90, 2, 1, 1, 30, 0);
    tc_case<128, __half, float>(1, 200, 4, 2, 1, 70, 0); /* 32-row secondary tiles, documents */
}

void test_tc_bf16_storage(void) {
    tc_case<64, __nv_bfloat16, __nv_bfloat16>(1, 97, 4, 2, 1, 0, 0);
    tc_case<128, __half, __nv_bfloat16>(1, 80, 2, 2, 1, 30, 0);
}

/* Tensors off a 16-byte boundary take stage()'s element-wise path. */
void test_tc_misaligned(void) {
    tc_case<64, __nv_bfloat16, float>(1, 70, 2, 1, 1, 0, 1);
    tc_case<32, __half, __nv_bfloat16>(1, 40, 2, 2, 0, 0, 1);
}

/* ---- fp32 SIMT kernels -------------------------------------------------------------------- */

template <int NE, typename S, bool DROP> void simt_run(const tr_attn_desc &d, const reference &r) {
    const bool bf16_storage = std::is_same<S, __nv_bfloat16>::value;
    const size_t nq = r.q.size(), nk = r.k.size(), nl = r.lse.size();
    const int B = d.batch, T = d.seq, Hh = d.heads, G = d.groups, D = d.head_dim;
    dbuf<S> Q(nq), K(nk), V(nk), Gd(nq), O(nq), O2(nq), DQ(nq), DK(nk), DV(nk);
    dbuf<float> L(nl), L2(nl), DI((size_t)B * T * Hh);
    dbuf<int32_t> DS(d.doc_start ? (size_t)B * T : 1);
    put(Q.p, r.q), put(K.p, r.k), put(V.p, r.v), put(Gd.p, r.g), put(O2.p, r.o), put(L2.p, r.lse);
    tr_attn_desc dd = d;
    if (d.doc_start) memcpy(DS.p, d.doc_start, (size_t)B * T * sizeof(int32_t));
    dd.doc_start = d.doc_start ? DS.p : NULL;
    const att_shape s = att_shape_of(&dd);
    const unsigned nb = (unsigned)((T + ATT_WARPS - 1) / ATT_WARPS);
    emu::launch(dim3(nb, Hh, B), dim3(ATT_WARPS * 32), attn_fwd_smem(D),
                [&] { attn_fwd_kernel<NE, S, DROP>(O.p, L.p, Q.p, K.p, V.p, s); });
    run_di(DI.p, Gd.p, O2.p, dd);
    emu::launch(dim3(nb, G, B), dim3(ATT_WARPS * 32), attn_dkv_smem(D), [&] {
        attn_dkv_kernel<NE, S, DROP>(DK.p, DV.p, Gd.p, Q.p, K.p, V.p, L2.p, DI.p, s);
    });
    emu::launch(dim3(nb, Hh, B), dim3(ATT_WARPS * 32), attn_dq_smem(D),
                [&] { attn_dq_kernel<NE, S, DROP>(DQ.p, Gd.p, Q.p, K.p, V.p, L2.p, DI.p, s); });
    /* fp32 limits; bf16 storage rounds every output (unit roundoff 2^-8, the GPU test's 1e-2) */
    const double tol = bf16_storage ? 1e-2 : 1e-5, tol_bwd = bf16_storage ? 1e-2 : 1e-4;
    char name[128];
#define SIMT_NAME(what)                                                                            \
    snprintf(name, sizeof name, "simt %s D%d B%d T%d H%d G%d c%d doc%d p%.2f %s",                  \
             bf16_storage ? "bf16io" : "f32io", D, B, T, Hh, G, d.causal, d.doc_start != NULL,     \
             d.dropout, what)
    SIMT_NAME("out");
    CHECK_REL(name, get(O.p, nq).data(), r.o.data(), nq, tol);
    SIMT_NAME("lse");
    CHECK_REL(name, L.p, r.lse.data(), nl, bf16_storage ? 1e-5 : tol);
    SIMT_NAME("dq");
    CHECK_REL(name, get(DQ.p, nq).data(), r.dq.data(), nq, tol_bwd);
    SIMT_NAME("dk");
    CHECK_REL(name, get(DK.p, nk).data(), r.dk.data(), nk, tol_bwd);
    SIMT_NAME("dv");
    CHECK_REL(name, get(DV.p, nk).data(), r.dv.data(), nk, tol_bwd);
#undef SIMT_NAME
}

template <typename S, bool DROP> void simt_width(const tr_attn_desc &d, const reference &r) {
    if (d.head_dim <= 64)
        simt_run<2, S, DROP>(d, r);
    else if (d.head_dim <= 128)
        simt_run<4, S, DROP>(d, r);
    else
        simt_run<8, S, DROP>(d, r);
}

template <typename S>
void simt_case(int B, int T, int Hh, int G, int D, int causal, int doc_len, float p = 0.0f,
               int odd = 0) {
    tr_attn_desc d = desc_of(B, T, Hh, G, D, causal, 0, 0, p, odd);
    std::vector<int32_t> ds = doc_starts(B, T, doc_len);
    d.doc_start = doc_len ? ds.data() : NULL;
    reference r = cpu_reference(d, std::is_same<S, __nv_bfloat16>::value,
                                (uint64_t)(T * 17 + D + Hh * 3 + doc_len));
    /* the launcher's register-row width (head_dim / 32 values per lane) and its DROP choice */
    if (p > 0.0f)
        simt_width<S, true>(d, r);
    else
        simt_width<S, false>(d, r);
}

/* Attention dropout: the kernels draw the CPU op's mask (kernels/common/attn_dropout.h), the
 * tensor-core ones two fragment entries per lane and the neighbour's two through a shuffle, so
 * a wrong row parity, word or exchange shows as O(1) errors against the CPU. Every head_dim and
 * a few tilings; GQA, documents, non-causal. */
void test_tc_dropout(void) {
    tc_case<64, __nv_bfloat16, float>(1, 150, 4, 2, 1, 0, 0, 0.1f);
    tc_case<16, __nv_bfloat16, float>(2, 70, 2, 1, 0, 0, 0, 0.3f);
    tc_case<32, __half, float>(1, 90, 2, 2, 1, 30, 0, 0.5f);
    tc_case<128, __half, float>(1, 80, 2, 1, 1, 0, 0, 0.2f);
    tc_case<64, __half, __nv_bfloat16>(1, 97, 4, 2, 1, 0, 0, 0.1f);
}

void test_simt_dropout(void) {
    simt_case<float>(2, 37, 4, 2, 64, 1, 0, 0.1f);
    simt_case<float>(1, 45, 2, 2, 80, 0, 0, 0.5f);
    simt_case<float>(1, 75, 2, 1, 32, 1, 9, 0.3f);
    simt_case<__nv_bfloat16>(1, 40, 4, 2, 64, 1, 0, 0.1f);
    simt_case<float>(1, 33, 2, 1, 32, 0, 0, 0.3f, 1); /* a block at odd coordinates */
}

void test_simt(void) {
    simt_case<float>(2, 37, 4, 2, 64, 1, 0);  /* GQA, T not a multiple of a tile */
    simt_case<float>(1, 45, 2, 2, 80, 0, 0);  /* head_dim not a multiple of 32, no mask */
    simt_case<float>(1, 20, 2, 1, 256, 1, 0); /* eight values per lane */
    simt_case<float>(1, 75, 2, 1, 32, 1, 9);  /* documents across tile edges */
    simt_case<__nv_bfloat16>(1, 40, 4, 2, 64, 1, 0);
}

/* The device-side doc_start validation: CPU rule, every malformed row found. */
void test_doc_start_check(void) {
    const int B = 2, T = 40;
    std::vector<int32_t> ds = doc_starts(B, T, 7);
    for (int bad = -1; bad < 3; bad++) {
        std::vector<int32_t> h = ds;
        if (bad == 0) h[0] = 1;             /* a row must start at 0 */
        if (bad == 1) h[T + 9] = 8;         /* neither t nor the previous entry */
        if (bad == 2) h[2 * T - 1] = T - 2; /* a decreasing start at the very end */
        dbuf<int32_t> dds(h.size());
        dbuf<int> flag(1);
        memcpy(dds.p, h.data(), h.size() * sizeof(int32_t));
        *flag.p = 0;
        emu::launch(dim3(tr_cuda_blocks((int64_t)B * T, 64)), dim3(64), 0,
                    [&] { doc_start_check_kernel(dds.p, B, T, flag.p); });
        CHECK_INT_EQ(*flag.p, bad >= 0);
    }
}

/* The host conversions of the CUDA headers (what the emulated kernels round with) against
 * lowp_round.h, bitwise: ties, subnormals, overflow and random values. */
void test_host_rounding(void) {
    emu_test::rng rng(7);
    std::vector<float> xs = {
        0.0f,     -0.0f,    1.0f,   1.00390625f, 1.01171875f, -1.00390625f,   3.4e38f,  65504.0f,
        65520.0f, 65519.0f, 1e-40f, 6e-8f,       3e-8f,       2.98023224e-8f, INFINITY, -INFINITY};
    for (int i = 0; i < 20000; i++) xs.push_back(ldexpf(rng.uniform(-1, 1), (i % 60) - 30));
    int bad_bf = 0, bad_h = 0;
    for (float x : xs) {
        const float b = __bfloat162float(__float2bfloat16_rn(x));
        const float h = __half2float(__float2half_rn(x));
        bad_bf += tr_f32_bits(b) != tr_f32_bits(tr_round_bf16(x));
        bad_h += tr_f32_bits(h) != tr_f32_bits(tr_round_f16(x));
    }
    CHECK_INT_EQ(bad_bf, 0);
    CHECK_INT_EQ(bad_h, 0);
}

} // namespace

namespace {

/* Context parallelism's log-sum-exp merge: the kernel against the CPU op, the running lse at a
 * stride (a half of a longer sequence) and some rows without keys yet (lse -inf, out NaN). */
void test_lse_merge() {
    const int rows = 37, heads = 3, D = 20, ld = 2 * rows;
    std::vector<float> o((size_t)rows * heads * D), ob(o.size()), lse((size_t)heads * ld),
        lseb((size_t)heads * rows);
    uint64_t x = 12345;
    auto next = [&x] {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        return (float)((x >> 40) * (1.0 / 16777216.0)) * 4.0f - 2.0f;
    };
    for (auto &v : o) v = next();
    for (auto &v : ob) v = next();
    for (auto &v : lse) v = next();
    for (auto &v : lseb) v = next();
    for (int t = 0; t < rows; t += 5) {
        lse[(size_t)(t % heads) * ld + t] = -INFINITY;
        for (int e = 0; e < D; e++) o[((size_t)t * heads + t % heads) * D + e] = NAN;
    }
    std::vector<float> ro = o, rlse = lse;
    CHECK(cpu->attention_merge(ro.data(), rlse.data(), ld, ob.data(), lseb.data(), rows, heads,
                               D) == TR_OK);
    dbuf<float> go(o.size()), gl(lse.size()), gob(ob.size()), glb(lseb.size());
    put(go.p, o), put(gl.p, lse), put(gob.p, ob), put(glb.p, lseb);
    emu::launch(dim3(tr_cuda_blocks((int64_t)rows * heads, 256)), dim3(256), 0,
                [&] { attn_merge_kernel(go.p, gl.p, ld, gob.p, glb.p, rows, heads, D); });
    std::vector<float> eo = get(go.p, o.size()), el = get(gl.p, lse.size());
    /* Equal values (-inf included) agree; a NaN anywhere does not. */
    auto off = [](float a, float b) {
        return a == b ? 0.0 : (a != a || b != b) ? INFINITY : (double)fabsf(a - b);
    };
    double worst = 0.0;
    for (size_t i = 0; i < eo.size(); i++) worst = std::max(worst, off(eo[i], ro[i]));
    for (size_t i = 0; i < el.size(); i++) worst = std::max(worst, off(el[i], rlse[i]));
    CHECK(worst <= 1e-6);
}

} // namespace

int main(int argc, char **argv) {
    cpu = tr_ops_cpu();
    static const tr_test_case tests[] = {
        TR_TEST(test_host_rounding), TR_TEST(test_doc_start_check), TR_TEST(test_simt),
        TR_TEST(test_tc_bf16),       TR_TEST(test_tc_fp16),         TR_TEST(test_tc_bf16_storage),
        TR_TEST(test_tc_misaligned), TR_TEST(test_simt_dropout),    TR_TEST(test_tc_dropout),
        TR_TEST(test_lse_merge),
    };
    return tr_test_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
