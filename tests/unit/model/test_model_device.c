/* The model and optimizer on a device (runtime/device/device.h) against the same model on the host:
 * initial weights, losses of two microbatches (masked targets, padded vocabulary, GQA, RoPE,
 * SwiGLU, dropout; again with qk_layernorm), accumulated gradients, and the parameters after an
 * AdamW step.
 *
 * TR_TEST_DEVICE picks the device: cpu-strict (default; every device buffer PROT_NONE outside
 * the device layer, results bitwise the host's) or cuda (registered as gpu_model_device; exits
 * 77 without a usable GPU; fp32 GEMMs and reductions in another order, so relative L2 limits). */
#include <math.h>
#include <stdlib.h>

#include "runtime/device/device.h"
#include "runtime/model/model.h"
#include "runtime/optimizer/optimizer.h"
#include "tests/unit/model/device_compare.h"
#include "tests/unit/harness.h"
#include "tests/unit/model/tiny_models.h"

static tr_device_kind g_kind = TR_DEVICE_CPU_STRICT;
static tr_device *g_dev;

static tr_model_spec spec(void) {
    tr_model_spec s = tr_test_padded_llama_spec(16, 24, 8);
    s.hidden_dropout = 0.1f;
    return s;
}

/* A device buffer against the host's: bitwise on cpu-strict, within cuda_limit on CUDA. */
static void check_same(const char *what, const float *dev_buf, const float *host, int64_t n,
                       double cuda_limit) {
    float *back = malloc((size_t)n * sizeof *back);
    CHECK(tr_device_to_host(g_dev, back, dev_buf, (size_t)n * sizeof *back) == TR_OK);
    tr_test_check_close(g_kind, what, back, host, n, cuda_limit);
    free(back);
}

static void train_step_matches_host(tr_model_spec s) {
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
        tr_test_batch(ids, tg, n, s.vocab_real, mb);
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

static void test_train_step_matches_host(void) {
    train_step_matches_host(spec());
}

/* With qk_layernorm: the norm ops over head_dim (8) rows of q and k on the device. */
static void test_qk_norm_train_step_matches_host(void) {
    tr_model_spec s = spec();
    s.qk_norm = 1;
    train_step_matches_host(s);
}

int main(int argc, char **argv) {
    static const tr_test_case tests[] = {TR_TEST(test_train_step_matches_host),
                                         TR_TEST(test_qk_norm_train_step_matches_host)};
    return tr_test_device_main(argc, argv, tests, 2, &g_kind, &g_dev);
}
