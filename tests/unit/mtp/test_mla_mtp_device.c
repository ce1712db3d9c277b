/* Multi-latent attention with multi-token prediction on a device (runtime/device/device.h)
 * against the same model on the host: losses of two microbatches (each depth's too), the
 * accumulated gradients. TR_TEST_DEVICE picks the device: cpu-strict (default; every device
 * buffer PROT_NONE outside the device layer, so host code that touched one would fault; results
 * bitwise the host's) or cuda (registered as gpu_mla_mtp_device; relative limits). */
#include <math.h>
#include <stdlib.h>

#include "runtime/device/device.h"
#include "runtime/model/model.h"
#include "tests/unit/harness.h"
#include "tests/unit/model/device_compare.h"
#include "tests/unit/model/tiny_models.h"

static tr_device_kind g_kind = TR_DEVICE_CPU_STRICT;
static tr_device *g_dev;

static tr_model_spec spec(int q_lora) {
    tr_model_spec s = tr_test_padded_llama_spec(16, 24, 8);
    s.groups = s.heads;
    s.rope = 0;
    s.head_dim = 6;
    s.mla = (tr_mla_spec){.on = 1,
                          .q_lora_rank = q_lora,
                          .kv_lora_rank = 7,
                          .qk_dim = 4,
                          .rope_dim = 4,
                          .v_dim = 6,
                          .norms = 1,
                          .yarn = 1,
                          .rope_base = 10000.0,
                          .factor = 4.0,
                          .mscale = 0.8,
                          .mscale_all_dim = 0.6,
                          .original_max_position = 4.0,
                          .beta_fast = 32.0,
                          .beta_slow = 1.0};
    s.mtp_layers = 2;
    s.mtp_scale = 0.15f;
    return s;
}

static void matches_host(tr_model_spec s) {
    const int B = 2, n = B * s.seq;
    tr_model host, dev;
    tr_model_part whole = {0, s.num_layers, true, true, 1};
    CHECK_INT_EQ(tr_model_create(&host, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B), TR_OK);
    CHECK_INT_EQ(tr_model_create_parts_on(&dev, g_dev, &s, (tr_tp_shard){0, 1}, B, &whole, 1),
                 TR_OK);
    tr_model *ms[2] = {&host, &dev};
    for (int k = 0; k < 2; k++) CHECK_INT_EQ(tr_model_init_weights(ms[k], 31), TR_OK);
    int32_t ids[64], tg[64];
    for (int mb = 0; mb < 2; mb++) {
        tr_test_batch(ids, tg, n, s.vocab_real, mb);
        float loss[2] = {-1.0f, -1.0f};
        for (int k = 0; k < 2; k++) {
            CHECK_INT_EQ(tr_model_forward(ms[k], ids, tg, &loss[k]), TR_OK);
            CHECK_INT_EQ(tr_model_backward(ms[k], 0.5f), TR_OK);
        }
        printf("  microbatch %d loss host %.9g device %.9g\n", mb, loss[0], loss[1]);
        if (g_kind == TR_DEVICE_CPU_STRICT)
            CHECK(loss[0] == loss[1]);
        else
            CHECK(fabsf(loss[0] - loss[1]) <= 1e-5f * fabsf(loss[0]));
    }
    float dh[2], dd[2];
    CHECK_INT_EQ(tr_model_mtp_losses(&host, dh), TR_OK);
    CHECK_INT_EQ(tr_model_mtp_losses(&dev, dd), TR_OK);
    tr_test_check_close(g_kind, "MTP losses", dd, dh, 2, 1e-5);
    float *back = malloc((size_t)host.n_params * sizeof *back);
    CHECK(tr_device_to_host(g_dev, back, dev.grads, (size_t)host.n_params * sizeof *back) == TR_OK);
    tr_test_check_close(g_kind, "accumulated gradients", back, host.grads, host.n_params, 1e-4);
    free(back);
    tr_model_free(&dev);
    tr_model_free(&host);
}

static void test_compressed_queries(void) {
    matches_host(spec(5));
}

static void test_direct_queries(void) {
    matches_host(spec(0));
}

int main(int argc, char **argv) {
    static const tr_test_case tests[] = {TR_TEST(test_compressed_queries),
                                         TR_TEST(test_direct_queries)};
    return tr_test_device_main(argc, argv, tests, 2, &g_kind, &g_dev);
}
