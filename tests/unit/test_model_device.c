/* The model and optimizer on a device (runtime/device.h) against the same model on the host:
 * initial weights, losses of two microbatches (masked targets, padded vocabulary, GQA, RoPE,
 * SwiGLU, dropout), accumulated gradients, and the parameters after an AdamW step.
 *
 * TR_TEST_DEVICE picks the device: cpu-strict (default; every device buffer PROT_NONE outside
 * the device layer, results bitwise the host's) or cuda (registered as gpu_model_device; exits
 * 77 without a usable GPU; fp32 GEMMs and reductions in another order, so relative L2 limits). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/device.h"
#include "runtime/model.h"
#include "runtime/optimizer.h"
#include "tests/unit/harness.h"

static tr_device_kind g_kind = TR_DEVICE_CPU_STRICT;
static tr_device *g_dev;

static tr_model_spec spec(void) {
    tr_model_spec s = {.num_layers = 2,
                       .hidden = 16,
                       .heads = 4,
                       .groups = 2,
                       .head_dim = 8,
                       .ffn = 24,
                       .vocab = 40,
                       .vocab_real = 37,
                       .seq = 8,
                       .swiglu = 1,
                       .rope = 1,
                       .eps = 1e-6f,
                       .init_std = 0.3,
                       .embed_init_std = 0.5,
                       .hidden_dropout = 0.1f};
    s.rope_p = (tr_rope_params){.rot_dim = 8, .base = 10000.0};
    return s;
}

/* Bitwise on cpu-strict; on CUDA the relative L2 error within limit. */
static double rel_err(const float *got, const float *want, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static void check_same(const char *what, const float *dev_buf, const float *host, int64_t n,
                       double cuda_limit) {
    float *back = malloc((size_t)n * sizeof *back);
    CHECK(tr_device_to_host(g_dev, back, dev_buf, (size_t)n * sizeof *back) == TR_OK);
    double e = rel_err(back, host, n);
    printf("  %-28s rel err %.3e\n", what, e);
    if (g_kind == TR_DEVICE_CPU_STRICT)
        CHECK(memcmp(back, host, (size_t)n * sizeof *back) == 0);
    else
        CHECK(e <= cuda_limit);
    free(back);
}

static void batch(int32_t *ids, int32_t *tg, int n, int real, int shift) {
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)((i * 7 + 3 + shift) % real);
        tg[i] = i % 5 == 2 ? -1 : (int32_t)((i * 5 + 1 + shift) % real);
    }
}

static void test_train_step_matches_host(void) {
    tr_model_spec s = spec();
    const int B = 2, n = B * s.seq;
    tr_model host, dev;
    tr_model_part whole = {0, s.num_layers, true, true, 1};
    CHECK_INT_EQ(tr_model_create(&host, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B), TR_OK);
    CHECK_INT_EQ(tr_model_create_parts_on(&dev, g_dev, &s, (tr_tp_shard){0, 1}, B, &whole, 1),
                 TR_OK);
    tr_model *ms[2] = {&host, &dev};
    for (int k = 0; k < 2; k++) {
        CHECK_INT_EQ(tr_model_init_weights(ms[k], 77), TR_OK);
        ms[k]->dropout_seed = 5;
    }
    check_same("initial parameters", dev.params, host.params, host.n_params, 0.0);

    int32_t ids[64], tg[64];
    for (int mb = 0; mb < 2; mb++) {
        batch(ids, tg, n, s.vocab_real, mb);
        float loss[2] = {-1.0f, -1.0f};
        for (int k = 0; k < 2; k++) {
            ms[k]->dropout_round = (uint64_t)mb;
            CHECK_INT_EQ(tr_model_forward(ms[k], ids, tg, &loss[k]), TR_OK);
            CHECK_INT_EQ(tr_model_backward(ms[k], 0.5f), TR_OK);
        }
        CHECK(host.n_valid == dev.n_valid && host.n_valid > 0 && host.n_valid < n);
        printf("  microbatch %d loss host %.9g device %.9g\n", mb, loss[0], loss[1]);
        if (g_kind == TR_DEVICE_CPU_STRICT)
            CHECK(loss[0] == loss[1]);
        else
            CHECK(fabsf(loss[0] - loss[1]) <= 1e-5f * fabsf(loss[0]));
    }
    check_same("accumulated gradients", dev.grads, host.grads, host.n_params, 1e-4);

    tr_optimizer_spec os = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .clip_grad = 1.0};
    tr_optimizer oh, od;
    CHECK_INT_EQ(tr_optimizer_create(&oh, &os, tr_ops_cpu(), host.info, host.n_info, host.n_params),
                 TR_OK);
    CHECK_INT_EQ(tr_optimizer_create_on(&od, g_dev, &os, dev.info, dev.n_info, dev.n_params),
                 TR_OK);
    double nh = 0.0, nd = 0.0;
    CHECK_INT_EQ(tr_grad_norm(tr_ops_cpu(), host.grads, host.n_params, &nh), TR_OK);
    CHECK_INT_EQ(tr_grad_norm_on(g_dev, dev.grads, dev.n_params, &nd), TR_OK);
    CHECK(nh > 0.0 && (g_kind == TR_DEVICE_CPU_STRICT ? nh == nd : fabs(nh - nd) <= 1e-5 * nh));
    CHECK_INT_EQ(tr_optimizer_step(&oh, host.params, host.grads, 1e-2, 0.1), TR_OK);
    CHECK_INT_EQ(tr_optimizer_step(&od, dev.params, dev.grads, 1e-2, 0.1), TR_OK);
    check_same("parameters after AdamW", dev.params, host.params, host.n_params, 1e-5);
    tr_optimizer_free(&od);
    tr_optimizer_free(&oh);
    tr_model_free(&dev);
    tr_model_free(&host);
}

int main(int argc, char **argv) {
    const char *name = getenv("TR_TEST_DEVICE");
    if (name && tr_device_kind_parse(name, &g_kind) != TR_OK) return 2;
    tr_diags d;
    tr_diags_init(&d);
    tr_status st = tr_device_open(g_kind, 0, 1, &d, &g_dev);
    tr_diags_free(&d);
    if (st != TR_OK && g_kind == TR_DEVICE_CUDA) {
        printf("SKIPPED: no usable CUDA device\n");
        return 77;
    }
    if (st != TR_OK) return 1;
    static const tr_test_case tests[] = {TR_TEST(test_train_step_matches_host)};
    int rc = tr_test_main(argc, argv, tests, 1);
    tr_device_close(g_dev);
    return rc;
}
