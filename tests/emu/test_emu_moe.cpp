/* The MoE kernels (kernels/cuda/moe_kernels.cuh) run by the host emulator with their launchers'
 * geometry (kernels/cuda/moe.cu) against the CPU ops. Top-k, its backward and the permutations
 * evaluate the same float expressions in the same order as the CPU, so they must be bitwise
 * equal (the emulator uses the host's libm; on a GPU, device expf and FMA contraction may move
 * the last bit); dprob is a block reduction in double, compared at 1e-6 relative. Inputs: ties
 * in the logits, k = 1, group-limited routing, the selection bias, an empty expert, dropped
 * assignments, padding rows and out-of-range indices. */
#include "tests/emu/emu_test.h"

#include "tests/emu/cuda_emu.h"

#include "kernels/cuda/moe_kernels.cuh"

namespace {

const tr_ops *cpu;

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

template <typename T> bool same_bits(const T *a, const T *b, size_t n) {
    return memcmp(a, b, n * sizeof(T)) == 0;
}

#define CHECK_BITS(name, got, want, n)                                                             \
    do {                                                                                           \
        bool ok_ = same_bits((got), (want), (n));                                                  \
        printf("  %-44s %s\n", (name), ok_ ? "bitwise equal" : "DIFFERENT");                       \
        if (!ok_) tr_test_failures++;                                                              \
    } while (0)

unsigned route_blocks(int tokens) {
    return (unsigned)((tokens + MOE_ROUTE_THREADS - 1) / MOE_ROUTE_THREADS);
}

struct route_case {
    const char *name;
    int experts, topk, score, pre, groups, group_topk;
    bool bias, ties;
    float scale;
};

/* One routing configuration: forward (idx, prob) and backward (dlogits) against the CPU op. */
void check_route(const route_case &c, emu_test::rng &rng) {
    const int T = 200; /* two blocks of 128, the second partial */
    const int E = c.experts, k = c.topk;
    std::vector<float> logits = rng.vec((size_t)T * E, -4, 4);
    if (c.ties) /* a few values only: equal logits (and equal scores) everywhere */
        for (auto &v : logits) v = roundf(v / 2.0f);
    std::vector<float> bias = rng.vec(E, -0.2f, 0.2f);
    dev<float> dbias(bias);
    tr_route_desc d = {T, E, k, c.score, c.pre, c.groups, c.group_topk, c.scale, nullptr};
    tr_route_desc dd = d;
    if (c.bias) d.bias = bias.data(), dd.bias = dbias.p;
    std::vector<int32_t> idx((size_t)T * k);
    std::vector<float> prob((size_t)T * k);
    CHECK(cpu->moe_topk(idx.data(), prob.data(), logits.data(), &d) == TR_OK);
    dev<float> dl(logits), dprob((size_t)T * k);
    dev<int32_t> didx((size_t)T * k);
    dev<float> wf((size_t)T * tr_route_work_floats(E));
    dev<int32_t> wi((size_t)T * tr_route_work_ints(E));
    emu::launch(dim3(route_blocks(T)), dim3(MOE_ROUTE_THREADS), 0,
                [&] { moe_topk_kernel(didx.p, dprob.p, dl.p, dd, wf.p, wi.p); });
    char name[96];
    snprintf(name, sizeof name, "%s: idx", c.name);
    CHECK_BITS(name, didx.p, idx.data(), idx.size());
    snprintf(name, sizeof name, "%s: prob", c.name);
    CHECK_BITS(name, dprob.p, prob.data(), prob.size());

    std::vector<float> g = rng.vec((size_t)T * k, -1, 1), dlog((size_t)T * E);
    CHECK(cpu->moe_topk_bwd(dlog.data(), g.data(), logits.data(), idx.data(), &d) == TR_OK);
    dev<float> dg(g), ddlog((size_t)T * E), wf2((size_t)T * tr_route_work_floats(E));
    emu::launch(dim3(route_blocks(T)), dim3(MOE_ROUTE_THREADS), 0,
                [&] { moe_topk_bwd_kernel(ddlog.p, dg.p, dl.p, didx.p, dd, wf2.p); });
    snprintf(name, sizeof name, "%s: dlogits", c.name);
    CHECK_BITS(name, ddlog.p, dlog.data(), dlog.size());
}

void test_route(void) {
    emu_test::rng rng(17);
    const route_case cases[] = {
        {"softmax pre", 16, 4, TR_ROUTE_SOFTMAX, 1, 0, 0, false, false, 1.0f},
        {"softmax post", 16, 2, TR_ROUTE_SOFTMAX, 0, 0, 0, false, false, 1.0f},
        {"softmax post, k=1", 8, 1, TR_ROUTE_SOFTMAX, 0, 0, 0, false, false, 1.0f},
        {"softmax pre, ties", 12, 3, TR_ROUTE_SOFTMAX, 1, 0, 0, false, true, 1.0f},
        {"softmax post, ties, groups", 16, 4, TR_ROUTE_SOFTMAX, 0, 4, 2, false, true, 1.0f},
        {"sigmoid, bias, groups, scale", 32, 8, TR_ROUTE_SIGMOID, 0, 8, 4, true, false, 2.5f},
        {"sigmoid, ties, bias", 16, 4, TR_ROUTE_SIGMOID, 0, 0, 0, true, true, 1.0f},
        {"sigmoid, k=1", 16, 1, TR_ROUTE_SIGMOID, 0, 0, 0, false, false, 1.0f},
        {"sqrtsoftplus, groups k=1 per group", 24, 2, TR_ROUTE_SQRTSOFTPLUS, 0, 6, 2, true, false,
         1.5f},
        {"sqrtsoftplus, k=1", 8, 1, TR_ROUTE_SQRTSOFTPLUS, 0, 0, 0, false, true, 1.0f},
    };
    for (const route_case &c : cases) check_route(c, rng);
}

/* A routing of T tokens, k choices each, over E experts into expert-sorted rows: expert 2 gets
 * nothing, about a fifth of the assignments are dropped, each expert block ends in a padding row,
 * and one assignment names a row past the end and one row an assignment past the end (both read
 * as -1). */
struct layout {
    int T, k, rows;
    std::vector<int32_t> row_a, pos;
};

layout make_layout(int T, int k, int E, emu_test::rng &rng) {
    layout L{T, k, 0, {}, std::vector<int32_t>((size_t)T * k, -1)};
    std::vector<int> expert((size_t)T * k);
    for (int a = 0; a < T * k; a++) {
        int e = (int)rng.uniform(0, (float)E);
        if (e == 2) e = 3;
        expert[(size_t)a] = rng.uniform(0, 1) < 0.2f ? -1 : e;
    }
    for (int e = 0; e < E; e++) {
        for (int a = 0; a < T * k; a++)
            if (expert[(size_t)a] == e) {
                L.pos[(size_t)a] = (int32_t)L.row_a.size();
                L.row_a.push_back(a);
            }
        L.row_a.push_back(-1);
    }
    L.rows = (int)L.row_a.size();
    L.pos[5] = L.rows + 3;
    L.row_a[1] = T * k + 7;
    return L;
}

void test_permute(void) {
    emu_test::rng rng(23);
    const int T = 37, k = 3, E = 5, dim = 70;
    layout L = make_layout(T, k, E, rng);
    const int rows = L.rows, n_a = T * k;
    std::vector<float> x = rng.vec((size_t)T * dim, -2, 2), ye = rng.vec((size_t)rows * dim, -2, 2);
    std::vector<float> prob = rng.vec((size_t)n_a, 0, 1), dy = rng.vec((size_t)T * dim, -1, 1);
    dev<int32_t> drow_a(L.row_a), dpos(L.pos);
    dev<float> dx(x), dye(ye), dprob(prob), ddy(dy);

    std::vector<float> xp((size_t)rows * dim);
    CHECK(cpu->moe_permute(xp.data(), x.data(), L.row_a.data(), rows, T, k, dim) == TR_OK);
    dev<float> dxp((size_t)rows * dim);
    int64_t n = (int64_t)rows * dim;
    emu::launch(dim3(tr_cuda_blocks(n, TR_CUDA_THREADS)), dim3(TR_CUDA_THREADS), 0,
                [&] { moe_permute_kernel(dxp.p, dx.p, drow_a.p, rows, n_a, k, dim); });
    CHECK_BITS("permute", dxp.p, xp.data(), xp.size());

    std::vector<float> gx((size_t)T * dim);
    CHECK(cpu->moe_permute_bwd(gx.data(), ye.data(), L.pos.data(), rows, T, k, dim) == TR_OK);
    dev<float> dgx((size_t)T * dim);
    emu::launch(dim3(tr_cuda_blocks((int64_t)T * dim, TR_CUDA_THREADS)), dim3(TR_CUDA_THREADS), 0,
                [&] { moe_permute_bwd_kernel(dgx.p, dye.p, dpos.p, rows, T, k, dim); });
    CHECK_BITS("permute_bwd", dgx.p, gx.data(), gx.size());

    std::vector<float> y((size_t)T * dim);
    CHECK(cpu->moe_unpermute(y.data(), ye.data(), prob.data(), L.pos.data(), rows, T, k, dim) ==
          TR_OK);
    dev<float> dyo((size_t)T * dim);
    emu::launch(dim3(tr_cuda_blocks((int64_t)T * dim, TR_CUDA_THREADS)), dim3(TR_CUDA_THREADS), 0,
                [&] { moe_unpermute_kernel(dyo.p, dye.p, dprob.p, dpos.p, rows, T, k, dim); });
    CHECK_BITS("unpermute", dyo.p, y.data(), y.size());

    std::vector<float> gye((size_t)rows * dim), gprob((size_t)n_a);
    CHECK(cpu->moe_unpermute_bwd(gye.data(), gprob.data(), dy.data(), ye.data(), prob.data(),
                                 L.row_a.data(), L.pos.data(), rows, T, k, dim) == TR_OK);
    dev<float> dgye((size_t)rows * dim);
    emu::launch(dim3(tr_cuda_blocks(n, TR_CUDA_THREADS)), dim3(TR_CUDA_THREADS), 0, [&] {
        moe_unpermute_bwd_rows_kernel(dgye.p, ddy.p, dprob.p, drow_a.p, rows, n_a, k, dim);
    });
    CHECK_BITS("unpermute_bwd: dye", dgye.p, gye.data(), gye.size());
    /* the launcher's one block per assignment, and fewer blocks than assignments (grid stride) */
    for (unsigned blocks : {(unsigned)n_a, 7u}) {
        dev<float> dgprob((size_t)n_a);
        emu::launch(dim3(blocks), dim3(MOE_DOT_THREADS), 0, [&] {
            moe_unpermute_bwd_prob_kernel(dgprob.p, ddy.p, dye.p, dpos.p, rows, n_a, k, dim);
        });
        char name[64];
        snprintf(name, sizeof name, "unpermute_bwd: dprob (%u blocks)", blocks);
        CHECK_REL(name, dgprob.p, gprob.data(), gprob.size(), 1e-6);
        CHECK(dgprob.p[5] == 0.0f); /* the out-of-range row: dropped */
    }
}

} // namespace

int main(int argc, char **argv) {
    cpu = tr_ops_cpu();
    static const tr_test_case tests[] = {TR_TEST(test_route), TR_TEST(test_permute)};
    return tr_test_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
