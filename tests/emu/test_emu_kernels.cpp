/* The SIMT kernels beyond attention, run by the host emulator (tests/emu/cuda_emu.h) with their
 * launchers' geometry, against the CPU backend's ops with the limits of
 * tests/gpu/test_cuda_ops.c: 1e-5 where device transcendental functions or a different summation
 * order enter (cross entropy, norms), 1e-6 where both evaluate the same float expressions
 * (rope, optimizers, element-wise helpers, dropout, embeddings), and bitwise for the casts (against
 * the CPU's cast_lowp / round_lowp, the rounding of kernels/common/lowp_round.h). */
#include "tests/emu/emu_test.h"

#include "tests/emu/cuda_emu.h"

#include "kernels/cuda/cross_entropy_kernels.cuh"
#include "kernels/cuda/elementwise_kernels.cuh"
#include "kernels/cuda/gemm_lowp_kernels.cuh"
#include "kernels/cuda/mixed_kernels.cuh"
#include "kernels/cuda/norm_kernels.cuh"
#include "kernels/cuda/optim_kernels.cuh"
#include "kernels/cuda/rope_kernels.cuh"

#include <signal.h>
#include <sys/wait.h>

namespace {

const tr_ops *cpu;
constexpr double FP32 = 1e-5;

/* A device array: guarded memory (faults past the end) starting as a copy of h. */
template <typename T> struct dev {
    T *p;
    size_t n;
    explicit dev(const std::vector<T> &h) : p(emu::guarded<T>(h.size())), n(h.size()) {
        memcpy(p, h.data(), n * sizeof(T));
    }
    explicit dev(size_t n_) : p(emu::guarded<T>(n_)), n(n_) {
        memset(p, 0xff, n * sizeof(T));
    }
    ~dev() {
        emu::guarded_free(p, n);
    }
    dev(const dev &) = delete;
    dev &operator=(const dev &) = delete;
};

/* ---- cross entropy ------------------------------------------------------------------------ */

void ce_stats_dev(float *stats, const float *logits, const int32_t *tg, int rows, int vl, int vs) {
    emu::launch(dim3((unsigned)rows), dim3(CE_THREADS), 0,
                [&] { ce_stats_kernel(stats, logits, tg, rows, vl, vs); });
}

/* Two vocabulary shards of several blocks' width each, ignored targets, targets in either
 * shard, a row with -inf logits (first among them): stats, merge, rebase, loss and backward. */
void test_cross_entropy(void) {
    const int rows = 12, V = 2500, split = 1100;
    emu_test::rng rng(11);
    std::vector<float> logits = rng.vec((size_t)rows * V, -8, 8);
    for (int j = 0; j < V; j += 3) logits[(size_t)5 * V + j] = -INFINITY;
    std::vector<int32_t> tg(rows);
    for (int r = 0; r < rows; r++) tg[r] = r % 5 == 2 ? -1 : (int32_t)rng.uniform(0, (float)V);
    tg[5] = 1; /* a finite logit of the row with -inf ones */
    std::vector<float> l0((size_t)rows * split), l1((size_t)rows * (V - split));
    for (int r = 0; r < rows; r++) {
        memcpy(&l0[(size_t)r * split], &logits[(size_t)r * V], sizeof(float) * split);
        memcpy(&l1[(size_t)r * (V - split)], &logits[(size_t)r * V + split],
               sizeof(float) * (V - split));
    }
    std::vector<float> s0(3 * rows), s1(3 * rows);
    CHECK(cpu->ce_stats(s0.data(), l0.data(), tg.data(), rows, split, 0) == TR_OK);
    CHECK(cpu->ce_stats(s1.data(), l1.data(), tg.data(), rows, V - split, split) == TR_OK);
    dev<float> d0(l0), d1(l1), ds0(3 * rows), ds1(3 * rows);
    dev<int32_t> dtg(tg);
    ce_stats_dev(ds0.p, d0.p, dtg.p, rows, split, 0);
    ce_stats_dev(ds1.p, d1.p, dtg.p, rows, V - split, split);
    CHECK_REL("ce_stats shard 0", ds0.p, s0.data(), s0.size(), FP32);
    CHECK_REL("ce_stats shard 1", ds1.p, s1.data(), s1.size(), FP32);

    std::vector<float> merged = s0;
    CHECK(cpu->ce_merge(merged.data(), s1.data(), rows) == TR_OK);
    dev<float> dm(s0), dother(s1);
    emu::launch(dim3((unsigned)((rows + 255) / 256)), dim3(256), 0,
                [&] { ce_merge_kernel(dm.p, dother.p, rows); });
    CHECK_REL("ce_merge", dm.p, merged.data(), merged.size(), FP32);

    /* rebase both shards to the global max, then add the sums: ce_merge's result */
    std::vector<float> gmax(rows);
    for (int r = 0; r < rows; r++) gmax[r] = s0[r] > s1[r] ? s0[r] : s1[r];
    dev<float> dg(gmax), r0(s0), r1(s1);
    dev<int> bad(std::vector<int>{0});
    for (float *st : {r0.p, r1.p})
        emu::launch(dim3((unsigned)((rows + 255) / 256)), dim3(256), 0,
                    [&] { ce_rebase_kernel(st, dg.p, rows, bad.p); });
    CHECK_INT_EQ(*bad.p, 0);
    for (int i = rows; i < 3 * rows; i++) r0.p[i] += r1.p[i];
    CHECK_REL("ce_rebase + sum == ce_merge", r0.p, merged.data(), merged.size(), FP32);
    std::vector<float> low(rows);
    for (int r = 0; r < rows; r++) low[r] = s0[r] - 1.0f;
    dev<float> dlow(low), r2(s0);
    emu::launch(dim3(1), dim3(256), 0, [&] { ce_rebase_kernel(r2.p, dlow.p, rows, bad.p); });
    CHECK_INT_EQ(*bad.p, 1); /* a "global" max below a shard's: reported */

    std::vector<float> loss(rows);
    CHECK(cpu->ce_loss(loss.data(), merged.data(), tg.data(), rows) == TR_OK);
    dev<float> dloss(rows);
    emu::launch(dim3(1), dim3(256), 0, [&] { ce_loss_kernel(dloss.p, dm.p, dtg.p, rows); });
    CHECK_REL("ce_loss (ignored rows 0)", dloss.p, loss.data(), loss.size(), FP32);

    std::vector<float> scale = rng.vec(rows, 0.5f, 2.0f);
    dev<float> dscale(scale);
    CHECK(cpu->ce_bwd(l1.data(), merged.data(), tg.data(), scale.data(), rows, V - split, split) ==
          TR_OK);
    emu::launch(dim3((unsigned)rows), dim3(CE_THREADS), 0,
                [&] { ce_bwd_kernel(d1.p, dm.p, dtg.p, dscale.p, rows, V - split, split); });
    CHECK_REL("ce_bwd shard 1 (in place)", d1.p, l1.data(), l1.size(), FP32);
}

/* ---- norms -------------------------------------------------------------------------------- */

/* What tr_cuda_colsum launches: partial sums per chunk of rows, then the chunks in order. */
void colsum_dev(float *sum_xhat, float *sum_dy, const float *dy, const float *x, const float *mean,
                const float *rstd, int rows, int cols) {
    const int chunk = colsum_chunk(rows), chunks = (rows + chunk - 1) / chunk;
    const size_t n = (size_t)chunks * cols;
    dev<double> scratch(2 * n);
    double *pa = sum_xhat ? scratch.p : nullptr, *pb = sum_dy ? scratch.p + n : nullptr;
    emu::launch(dim3((unsigned)((cols + 31) / 32), (unsigned)chunks), dim3(32, COLSUM_ROWS), 0,
                [&] { colsum_partial_kernel(pa, pb, dy, x, mean, rstd, rows, cols, chunk); });
    emu::launch(dim3((unsigned)((cols + 255) / 256)), dim3(256), 0,
                [&] { colsum_final_kernel(sum_xhat, sum_dy, pa, pb, chunks, cols); });
}

/* LayerNorm and RMSNorm, plain and zero-centred, forward and backward (dx, dw, db accumulate onto
 * random values); rows span two column-sum chunks; dim 72 is not a multiple of a warp, 8 and
 * 16 leave most of a block's threads without an element and 128 half of them (the q/k norms of
 * qk_layernorm run over head_dim). */
static void check_norms(int dim, emu_test::rng &rng) {
    const int rows = 300;
    const size_t n = (size_t)rows * dim;
    for (int zc = 0; zc < 2; zc++)
        for (int rms = 0; rms < 2; rms++) {
            const float gshift = zc ? 1.0f : 0.0f;
            std::vector<float> x = rng.vec(n, -3, 5), w = rng.vec(dim, 0.5f, 1.5f),
                               b = rng.vec(dim, -1, 1);
            std::vector<float> y(n), mean(rows), rstd(rows);
            dev<float> dx(x), dw(w), db(b), dy(n), dmean(rows), drstd(rows);
            if (rms)
                CHECK(cpu->rmsnorm_fwd(y.data(), rstd.data(), x.data(), w.data(), rows, dim, 1e-5f,
                                       zc) == TR_OK);
            else
                CHECK(cpu->layernorm_fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                         b.data(), rows, dim, 1e-5f, zc) == TR_OK);
            emu::launch(dim3((unsigned)rows), dim3(NORM_THREADS), 0, [&] {
                if (rms)
                    norm_fwd_kernel<true>(dy.p, nullptr, drstd.p, dx.p, dw.p, nullptr, dim, 1e-5f,
                                          gshift);
                else
                    norm_fwd_kernel<false>(dy.p, dmean.p, drstd.p, dx.p, dw.p, db.p, dim, 1e-5f,
                                           gshift);
            });
            char name[80];
            const char *nm = rms ? "rmsnorm" : "layernorm";
            if (!rms) {
                snprintf(name, sizeof name, "layernorm_fwd mean zc=%d", zc);
                CHECK_REL(name, dmean.p, mean.data(), (size_t)rows, FP32);
            }
            snprintf(name, sizeof name, "%s_fwd y zc=%d dim=%d", nm, zc, dim);
            CHECK_REL(name, dy.p, y.data(), n, FP32);
            snprintf(name, sizeof name, "%s_fwd rstd zc=%d", nm, zc);
            CHECK_REL(name, drstd.p, rstd.data(), (size_t)rows, FP32);

            /* backward from the CPU's saved statistics */
            std::vector<float> g = rng.vec(n, -1, 1), gx = rng.vec(n, -1, 1),
                               gw = rng.vec(dim, -1, 1), gb = rng.vec(dim, -1, 1);
            dev<float> dg(g), dgx(gx), dgw(gw), dgb(gb), dmean2(mean), drstd2(rstd);
            if (rms)
                CHECK(cpu->rmsnorm_bwd(gx.data(), gw.data(), g.data(), x.data(), w.data(),
                                       rstd.data(), rows, dim, zc) == TR_OK);
            else
                CHECK(cpu->layernorm_bwd(gx.data(), gw.data(), gb.data(), g.data(), x.data(),
                                         w.data(), mean.data(), rstd.data(), rows, dim,
                                         zc) == TR_OK);
            emu::launch(dim3((unsigned)rows), dim3(NORM_THREADS), 0, [&] {
                if (rms)
                    norm_bwd_kernel<true>(dgx.p, dg.p, dx.p, dw.p, nullptr, drstd2.p, dim, gshift);
                else
                    norm_bwd_kernel<false>(dgx.p, dg.p, dx.p, dw.p, dmean2.p, drstd2.p, dim,
                                           gshift);
            });
            colsum_dev(dgw.p, rms ? nullptr : dgb.p, dg.p, dx.p, rms ? nullptr : dmean2.p, drstd2.p,
                       rows, dim);
            snprintf(name, sizeof name, "%s_bwd dx zc=%d dim=%d", nm, zc, dim);
            CHECK_REL(name, dgx.p, gx.data(), n, FP32);
            snprintf(name, sizeof name, "%s_bwd dw zc=%d dim=%d", nm, zc, dim);
            CHECK_REL(name, dgw.p, gw.data(), (size_t)dim, FP32);
            if (!rms) {
                snprintf(name, sizeof name, "layernorm_bwd db zc=%d", zc);
                CHECK_REL(name, dgb.p, gb.data(), (size_t)dim, FP32);
            }
        }
}

void test_norms(void) {
    emu_test::rng rng(5);
    for (int dim : {72, 8, 16, 128}) check_norms(dim, rng);
}

/* ---- casts -------------------------------------------------------------------------------- */

/* Values that exercise rounding: ties to even both ways, fp16 overflow and subnormals, bf16 and
 * fp16 NaN, infinities, then random magnitudes over many binades. */
std::vector<float> cast_inputs(size_t n) {
    std::vector<float> v = {
        0.0f,     -0.0f,    1.0f,     1.00390625f, 1.01171875f, -1.00390625f, 1.00048828f,
        65504.0f, 65519.0f, 65520.0f, 1e5f,        -1e5f,       6e-8f,        2.98023224e-8f,
        1e-40f,   3.4e38f,  INFINITY, -INFINITY,   NAN,         -NAN};
    emu_test::rng rng(3);
    while (v.size() < n) v.push_back(ldexpf(rng.uniform(-1, 1), (int)(v.size() % 50) - 25));
    return v;
}

template <typename H> void cast_case(tr_lowp dtype, const char *what) {
    const int rows = 7, cols = 301, ld = 333; /* a padded source, as gemm_lowp's operands */
    std::vector<float> src = cast_inputs((size_t)rows * ld);
    /* the CPU's bit patterns of the packed rows x cols */
    std::vector<uint16_t> want((size_t)rows * cols);
    std::vector<float> packed((size_t)rows * cols);
    for (int r = 0; r < rows; r++)
        memcpy(&packed[(size_t)r * cols], &src[(size_t)r * ld], sizeof(float) * cols);
    CHECK(cpu->cast_lowp(dtype, want.data(), packed.data(), (int64_t)packed.size()) == TR_OK);

    dev<float> dsrc(src), dpacked(packed);
    dev<H> dst(packed.size()), flat(packed.size());
    emu::launch(grid_2d(rows, cols), dim3(TR_CUDA_THREADS), 0,
                [&] { pack_cast_kernel<H>(dst.p, dsrc.p, rows, cols, ld); });
    const int64_t n = (int64_t)packed.size();
    emu::launch(dim3(tr_cuda_blocks(n, TR_CUDA_THREADS)), dim3(TR_CUDA_THREADS), 0,
                [&] { cast_kernel<H, float>(flat.p, dpacked.p, n); });
    int bad_pack = 0, bad_cast = 0;
    for (size_t i = 0; i < want.size(); i++) {
        uint16_t a, b;
        memcpy(&a, (const void *)(dst.p + i), 2);
        memcpy(&b, (const void *)(flat.p + i), 2);
        bad_pack += a != want[i];
        bad_cast += b != want[i];
    }
    printf("  %s: pack_cast %d, cast %d of %zu differ\n", what, bad_pack, bad_cast, want.size());
    CHECK_INT_EQ(bad_pack, 0);
    CHECK_INT_EQ(bad_cast, 0);

    /* back to fp32, and round_lowp's round trip in place, against the CPU's round_lowp */
    std::vector<float> rounded = packed;
    CHECK(cpu->round_lowp(dtype, rounded.data(), n) == TR_OK);
    dev<float> back(packed.size()), trip(packed);
    emu::launch(dim3(tr_cuda_blocks(n, TR_CUDA_THREADS)), dim3(TR_CUDA_THREADS), 0,
                [&] { cast_kernel<float, H>(back.p, flat.p, n); });
    emu::launch(dim3(tr_cuda_blocks(n, TR_CUDA_THREADS)), dim3(TR_CUDA_THREADS), 0,
                [&] { round_trip_kernel<H>(trip.p, n); });
    int bad_back = 0, bad_trip = 0;
    for (size_t i = 0; i < rounded.size(); i++) {
        if (isnan(rounded[i])) { /* NaN payloads are not part of the contract */
            bad_back += !isnan(back.p[i]);
            bad_trip += !isnan(trip.p[i]);
            continue;
        }
        bad_back += tr_f32_bits(back.p[i]) != tr_f32_bits(rounded[i]);
        bad_trip += tr_f32_bits(trip.p[i]) != tr_f32_bits(rounded[i]);
    }
    CHECK_INT_EQ(bad_back, 0);
    CHECK_INT_EQ(bad_trip, 0);
}

void test_casts(void) {
    cast_case<__nv_bfloat16>(TR_LOWP_BF16, "bf16");
    cast_case<__half>(TR_LOWP_F16, "fp16");
}

/* bias_rows_2d (gemm_lowp's bias epilogue) and unscale_check, bitwise against the CPU. */
void test_bias_unscale(void) {
    const int rows = 9, cols = 300, ldc = 310;
    emu_test::rng rng(9);
    std::vector<float> c = rng.vec((size_t)rows * ldc, -1, 1), bias = rng.vec(cols, -1, 1);
    std::vector<float> want = c;
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) want[(size_t)r * ldc + j] += bias[j];
    dev<float> dc(c), db(bias);
    emu::launch(grid_2d(rows, cols), dim3(TR_CUDA_THREADS), 0,
                [&] { bias_rows_2d_kernel(dc.p, db.p, rows, cols, ldc); });
    CHECK(memcmp(dc.p, want.data(), want.size() * sizeof(float)) == 0);

    for (int with_inf = 0; with_inf < 2; with_inf++) {
        std::vector<float> g = rng.vec(1000, -4, 4);
        if (with_inf) g[777] = INFINITY;
        std::vector<float> gc = g;
        float found = 0.0f;
        CHECK(cpu->unscale_check(gc.data(), (int64_t)gc.size(), 0.125f, &found) == TR_OK);
        dev<float> dg(g), dfound(std::vector<float>{0.0f});
        const int64_t n = (int64_t)g.size();
        emu::launch(dim3(tr_cuda_blocks(n, TR_CUDA_THREADS)), dim3(TR_CUDA_THREADS), 0,
                    [&] { unscale_check_kernel(dg.p, n, 0.125f, dfound.p); });
        CHECK(*dfound.p == found);
        CHECK_INT_EQ(*dfound.p == 1.0f, with_inf);
        CHECK(memcmp(dg.p, gc.data(), gc.size() * sizeof(float)) == 0);
    }
}

/* ---- rope and optimizers ------------------------------------------------------------------ */

/* Forward out of place with a partial rotation (copied tail), backward in place, from the CPU's
 * table (the CUDA op builds the same table on the host). */
void test_rope(void) {
    const int B = 2, T = 9, H = 3, D = 20, rot = 12;
    tr_rope_params p = {rot, 10000.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0};
    std::vector<float> cs((size_t)T * rot / 2), sn((size_t)T * rot / 2);
    CHECK(cpu->rope_table(cs.data(), sn.data(), &p, T, 3) == TR_OK);
    emu_test::rng rng(13);
    const size_t n = (size_t)B * T * H * D;
    std::vector<float> x = rng.vec(n, -2, 2), y(n), g = rng.vec(n, -1, 1), gx = g;
    CHECK(cpu->rope_fwd(y.data(), x.data(), cs.data(), sn.data(), B, T, H, D, rot) == TR_OK);
    CHECK(cpu->rope_bwd(gx.data(), gx.data(), cs.data(), sn.data(), B, T, H, D, rot) == TR_OK);
    dev<float> dcs(cs), dsn(sn), dx(x), dy(n), dg(g);
    const int64_t total = (int64_t)n;
    const dim3 grid(tr_cuda_blocks(total, TR_CUDA_THREADS)), block(TR_CUDA_THREADS);
    emu::launch(grid, block, 0,
                [&] { rope_kernel(dy.p, dx.p, dcs.p, dsn.p, total, T, H, D, rot, 1.0f); });
    emu::launch(grid, block, 0,
                [&] { rope_kernel(dg.p, dg.p, dcs.p, dsn.p, total, T, H, D, rot, -1.0f); });
    CHECK_REL("rope_fwd", dy.p, y.data(), n, 1e-6);
    CHECK_REL("rope_bwd in place", dg.p, gx.data(), n, 1e-6);
}

void test_optim(void) {
    const int64_t n = 1000;
    emu_test::rng rng(17);
    std::vector<float> p = rng.vec(n, -1, 1), g = rng.vec(n, -1, 1), m = rng.vec(n, -0.1f, 0.1f),
                       v = rng.vec(n, 0, 0.01f);
    const tr_adamw_params ap = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7, 0.5f}; /* a clip scale */
    dev<float> dp(p), dg(g), dm(m), dv(v);
    CHECK(cpu->adamw(p.data(), g.data(), m.data(), v.data(), n, &ap) == TR_OK);
    /* the launcher's bias corrections */
    const float bc1 = (float)(1.0 - pow(ap.beta1, (double)ap.step));
    const float bc2 = (float)(1.0 - pow(ap.beta2, (double)ap.step));
    emu::launch(dim3(tr_cuda_blocks(n, TR_CUDA_THREADS)), dim3(TR_CUDA_THREADS), 0, [&] {
        adamw_kernel(dp.p, dg.p, dm.p, dv.p, n, ap.lr, ap.beta1, ap.beta2, ap.eps, ap.weight_decay,
                     bc1, bc2, ap.grad_scale);
    });
    CHECK_REL("adamw param", dp.p, p.data(), (size_t)n, 1e-6);
    CHECK_REL("adamw m", dm.p, m.data(), (size_t)n, 1e-6);
    CHECK_REL("adamw v", dv.p, v.data(), (size_t)n, 1e-6);
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        std::vector<float> q = rng.vec(n, -1, 1), buf = rng.vec(n, -1, 1);
        const tr_sgd_params sp = {0.05f, 0.9f, 0.01f, nesterov};
        dev<float> dq(q), dbuf(buf);
        CHECK(cpu->sgd(q.data(), g.data(), buf.data(), n, &sp) == TR_OK);
        emu::launch(dim3(tr_cuda_blocks(n, TR_CUDA_THREADS)), dim3(TR_CUDA_THREADS), 0, [&] {
            sgd_kernel(dq.p, dg.p, dbuf.p, n, sp.lr, sp.momentum, sp.weight_decay, sp.nesterov);
        });
        CHECK_REL(nesterov ? "sgd nesterov param" : "sgd param", dq.p, q.data(), (size_t)n, 1e-6);
        CHECK_REL("sgd momentum buffer", dbuf.p, buf.data(), (size_t)n, 1e-6);
    }
}

/* ---- element-wise ------------------------------------------------------------------------- */

/* The grid every LAUNCH of elementwise.cu uses. */
template <typename F> void launch_flat(int64_t n, F &&f) {
    emu::launch(dim3(tr_cuda_blocks(n, TR_CUDA_THREADS)), dim3(TR_CUDA_THREADS), 0, f);
}

/* add/fill/scale, sum_squares over several 4096-element blocks and a partial one, GeLU (both),
 * SwiGLU, dropout (the CPU's Philox mask), embeddings with ids outside the shard and repeats. */
void test_elementwise(void) {
    const int64_t n = 3 * 4096 + 77;
    emu_test::rng rng(19);
    std::vector<float> x = rng.vec((size_t)n, -3, 3), y = rng.vec((size_t)n, -1, 1);
    dev<float> dx(x), dy(y);
    std::vector<float> want = y;
    CHECK(cpu->add(want.data(), x.data(), n) == TR_OK && cpu->scale(want.data(), n, 0.37f) == 0);
    launch_flat(n, [&] { add_kernel(dy.p, dx.p, n); });
    launch_flat(n, [&] { scale_kernel(dy.p, n, 0.37f); });
    CHECK_REL("add, scale", dy.p, want.data(), (size_t)n, 1e-6);
    float ss = 0.0f;
    CHECK(cpu->sum_squares(&ss, want.data(), n) == TR_OK);
    const int64_t nb = (n + SSQ_BLOCK - 1) / SSQ_BLOCK;
    dev<double> partial((size_t)nb);
    dev<float> dss(1);
    emu::launch(dim3((unsigned)nb), dim3(256), 0, [&] { ssq_blocks_kernel(partial.p, dy.p, n); });
    emu::launch(dim3(1), dim3(1024), 0, [&] { ssq_final_kernel(dss.p, partial.p, nb); });
    CHECK_REL("sum_squares", dss.p, &ss, 1, 1e-6);
    launch_flat(n, [&] { fill_kernel(dy.p, n, 2.5f); });
    int unfilled = 0;
    for (int64_t i = 0; i < n; i++) unfilled += dy.p[i] != 2.5f;
    CHECK_INT_EQ(unfilled, 0);

    std::vector<float> g = rng.vec((size_t)n, -1, 1), out((size_t)n);
    dev<float> dg(g), dout((size_t)n);
    for (int t = 0; t < 2; t++) {
        CHECK(cpu->gelu_fwd(out.data(), x.data(), n, t) == TR_OK);
        launch_flat(n, [&] { gelu_fwd_kernel(dout.p, dx.p, n, t); });
        CHECK_REL(t ? "gelu_fwd tanh" : "gelu_fwd erf", dout.p, out.data(), (size_t)n, 1e-5);
        CHECK(cpu->gelu_bwd(out.data(), g.data(), x.data(), n, t) == TR_OK);
        launch_flat(n, [&] { gelu_bwd_kernel(dout.p, dg.p, dx.p, n, t); });
        CHECK_REL(t ? "gelu_bwd tanh" : "gelu_bwd erf", dout.p, out.data(), (size_t)n, 1e-5);
    }
    const int rows = 37, ffn = 53;
    const int64_t total = (int64_t)rows * ffn;
    std::vector<float> sx = rng.vec((size_t)(2 * total), -3, 3), sy((size_t)total),
                       sdy = rng.vec((size_t)total, -1, 1), sdx((size_t)(2 * total));
    dev<float> dsx(sx), dsy((size_t)total), dsdy(sdy), dsdx((size_t)(2 * total));
    CHECK(cpu->swiglu_fwd(sy.data(), sx.data(), rows, ffn) == TR_OK);
    CHECK(cpu->swiglu_bwd(sdx.data(), sdy.data(), sx.data(), rows, ffn) == TR_OK);
    launch_flat(total, [&] { swiglu_fwd_kernel(dsy.p, dsx.p, total, ffn); });
    launch_flat(total, [&] { swiglu_bwd_kernel(dsdx.p, dsdy.p, dsx.p, total, ffn); });
    CHECK_REL("swiglu_fwd", dsy.p, sy.data(), (size_t)total, 1e-5);
    CHECK_REL("swiglu_bwd", dsdx.p, sdx.data(), (size_t)(2 * total), 1e-5);

    CHECK(cpu->dropout_fwd(out.data(), x.data(), n, 0.3f, 1234, 999) == TR_OK);
    launch_flat(n, [&] { dropout_kernel(dout.p, dx.p, n, 0.3f, 1234, 999); });
    CHECK(memcmp(dout.p, out.data(), (size_t)n * sizeof(float)) == 0);

    /* a vocabulary shard [10, 40) of a 50-token vocabulary, repeated and foreign ids */
    const int ntok = 29, dim = 70, v0 = 10, v1 = 40;
    std::vector<int32_t> ids(ntok);
    for (int i = 0; i < ntok; i++) ids[i] = (i * 7) % 50;
    ids[3] = ids[4] = 12;
    std::vector<float> table = rng.vec((size_t)(v1 - v0) * dim, -1, 1), eo((size_t)ntok * dim),
                       ed = rng.vec((size_t)ntok * dim, -1, 1), tgrad = table;
    dev<int32_t> dids(ids);
    dev<float> dtable(table), deo((size_t)ntok * dim), ded(ed), dtg(tgrad);
    CHECK(cpu->embedding_fwd(eo.data(), ids.data(), table.data(), ntok, dim, v0, v1) == TR_OK);
    CHECK(cpu->embedding_bwd(tgrad.data(), ids.data(), ed.data(), ntok, dim, v0, v1) == TR_OK);
    const int64_t etotal = (int64_t)ntok * dim;
    launch_flat(etotal, [&] { emb_fwd_kernel(deo.p, dids.p, dtable.p, etotal, dim, v0, v1); });
    emu::launch(dim3((unsigned)((dim + 127) / 128)), dim3(128), 0,
                [&] { emb_bwd_kernel(dtg.p, dids.p, ded.p, ntok, dim, v0, v1); });
    CHECK(memcmp(deo.p, eo.data(), eo.size() * sizeof(float)) == 0);
    CHECK(memcmp(dtg.p, tgrad.data(), tgrad.size() * sizeof(float)) == 0);

    const int B = 3, T = 11, off = 4;
    std::vector<float> px = rng.vec((size_t)B * T * dim, -1, 1),
                       wpe = rng.vec((size_t)(off + T) * dim, -1, 1), pw = wpe;
    dev<float> dpx(px), dwpe(wpe), dpw(pw);
    CHECK(cpu->pos_embedding_fwd(px.data(), wpe.data(), B, T, dim, off) == TR_OK);
    CHECK(cpu->pos_embedding_bwd(pw.data(), px.data(), B, T, dim, off) == TR_OK);
    const int64_t ptotal = (int64_t)B * T * dim, wtotal = (int64_t)T * dim;
    launch_flat(ptotal, [&] { pos_fwd_kernel(dpx.p, dwpe.p, ptotal, T, dim, off); });
    launch_flat(wtotal, [&] { pos_bwd_kernel(dpw.p, dpx.p, B, wtotal, T, dim, off); });
    CHECK(memcmp(dpx.p, px.data(), px.size() * sizeof(float)) == 0);
    CHECK(memcmp(dpw.p, pw.data(), pw.size() * sizeof(float)) == 0);
}

/* ---- the emulator's own checks ------------------------------------------------------------ */

/* Runs f in a child process; true when the child died of `sig` (the emulator aborts on a broken
 * collective, the guard page faults). */
template <typename F> bool dies_of(int sig, F &&f) {
    fflush(stdout), fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        f();
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return false;
    return WIFSIGNALED(status) && WTERMSIG(status) == sig;
}

/* Kernel shapes the emulator must refuse: lane 0 at a barrier while its warp waits for it in a
 * shuffle (deadlock), half a warp in a shuffle and half in an mma, and a store one element past
 * the launch's dynamic shared memory. */
/* DoRA's row and column reductions: a block per row (row_sum_squares), a thread per column
 * (col_dot), flat scalings; against the CPU's ops. */
void test_row_col(void) {
    const int rows = 45, cols = 300;
    emu_test::rng rng(23);
    std::vector<float> a = rng.vec((size_t)rows * cols, -2, 2),
                       b = rng.vec((size_t)rows * cols, -1, 1);
    std::vector<float> s = rng.vec((size_t)cols, 0.5, 1.5), mag = rng.vec((size_t)rows, 1, 2);
    dev<float> da(a), db(b), ds(s), dmag(mag);
    std::vector<float> sq((size_t)rows);
    CHECK(cpu->row_sum_squares(sq.data(), a.data(), rows, cols) == TR_OK);
    dev<float> dsq((size_t)rows);
    emu::launch(dim3((unsigned)rows), dim3(256), 0, [&] { row_ssq_kernel(dsq.p, da.p, cols); });
    CHECK_REL("row_sum_squares", dsq.p, sq.data(), (size_t)rows, 1e-6);
    std::vector<float> dot((size_t)cols, 0.5f);
    dev<float> ddot(dot);
    CHECK(cpu->col_dot(dot.data(), a.data(), b.data(), s.data(), rows, cols) == TR_OK);
    launch_flat(cols, [&] { col_dot_kernel(ddot.p, da.p, db.p, ds.p, rows, cols); });
    CHECK_REL("col_dot", ddot.p, dot.data(), (size_t)cols, 1e-6);
    std::vector<float> scaled = b;
    CHECK(cpu->col_scale(scaled.data(), s.data(), rows, cols) == TR_OK);
    const int64_t n = (int64_t)rows * cols;
    launch_flat(n, [&] { col_scale_kernel(db.p, ds.p, n, cols); });
    CHECK_REL("col_scale", db.p, scaled.data(), (size_t)n, 1e-7);
    std::vector<float> scale((size_t)rows), inv((size_t)rows);
    CHECK(cpu->norm_scale(scale.data(), inv.data(), mag.data(), sq.data(), rows) == TR_OK);
    dev<float> dscale((size_t)rows);
    launch_flat(rows, [&] { norm_scale_kernel(dscale.p, dsq.p, dmag.p, dsq.p, rows); });
    CHECK_REL("norm_scale inverse (in place)", dsq.p, inv.data(), (size_t)rows, 1e-6);
    CHECK_REL("norm_scale", dscale.p, scale.data(), (size_t)rows, 1e-6);
}

void test_emulator_checks(void) {
    CHECK(dies_of(SIGABRT, [] {
        emu::launch(dim3(1), dim3(64), 0, [] {
            if (threadIdx.x == 0)
                __syncthreads();
            else
                (void)__shfl_sync(0xffffffffu, 1.0f, 0);
        });
    }));
    CHECK(dies_of(SIGABRT, [] {
        emu::launch(dim3(1), dim3(32), 0, [] {
            float c[4] = {0, 0, 0, 0};
            const uint32_t a[4] = {0, 0, 0, 0};
            if (threadIdx.x < 16)
                (void)__shfl_xor_sync(0xffffffffu, 1.0f, 1);
            else
                tr_mma_16816_bf16(c, a, 0, 0);
        });
    }));
    CHECK(dies_of(SIGSEGV, [] {
        emu::launch(dim3(1), dim3(32), 64 * sizeof(float), [] {
            TR_DYNAMIC_SMEM(float, sm);
            sm[64 + threadIdx.x] = 1.0f;
        });
    }));
    /* and a well-formed kernel with the same collectives runs */
    CHECK(!dies_of(SIGABRT, [] {
        emu::launch(dim3(2), dim3(64), 64 * sizeof(float), [] {
            TR_DYNAMIC_SMEM(float, sm);
            sm[threadIdx.x] = (float)threadIdx.x;
            __syncthreads();
            const float v = __shfl_sync(0xffffffffu, sm[63 - threadIdx.x], 0);
            if (v != (float)(63 - (threadIdx.x & ~31u))) abort();
        });
    }));
}

} // namespace

int main(int argc, char **argv) {
    cpu = tr_ops_cpu();
    static const tr_test_case tests[] = {
        TR_TEST(test_cross_entropy), TR_TEST(test_norms),   TR_TEST(test_casts),
        TR_TEST(test_bias_unscale),  TR_TEST(test_rope),    TR_TEST(test_optim),
        TR_TEST(test_elementwise),   TR_TEST(test_row_col), TR_TEST(test_emulator_checks),
    };
    return tr_test_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
