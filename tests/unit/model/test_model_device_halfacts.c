/* Half-precision saved activations on a device (runtime/device/device.h): a bf16 and an fp16 model
 * whose linear layers' inputs are saved half (device buffers written by cast_lowp, read by
 * gemm_lowp_ex as ready operands) against the same model on the same device saving them fp32
 * (spec.no_half_acts), and against the host's fp32-saved model: losses of two microbatches and
 * the accumulated gradients.
 *
 * TR_TEST_DEVICE picks the device: cpu-strict (default; every result bitwise) or cuda
 * (registered as gpu_halfacts_device; exits 77 without a usable GPU). On CUDA the two device runs
 * round the same values and run the same cuBLASLt GEMMs, so they agree closely (not necessarily
 * bitwise: the library may pick another algorithm for another operand address); the host is the
 * CPU emulation, whose fp32 sums go in another order, so a looser relative L2 limit. */
#include <math.h>
#include <stdlib.h>

#include "runtime/device/device.h"
#include "runtime/model/model.h"
#include "tests/unit/model/device_compare.h"
#include "tests/unit/harness.h"
#include "tests/unit/model/tiny_models.h"

static tr_device_kind g_kind = TR_DEVICE_CPU_STRICT;
static tr_device *g_dev;

static tr_model_spec spec(int lowp) {
    tr_model_spec s = tr_test_padded_llama_spec(32, 48, 16);
    s.lowp = lowp;
    return s;
}

static void check_close(const char *what, const float *got, const float *want, int64_t n,
                        double cuda_limit) {
    tr_test_check_close(g_kind, what, got, want, n, cuda_limit);
}

/* Two microbatches through model m (gradients accumulate); losses to loss[2], gradients to a
 * host copy in *grads (allocated). */
static void two_microbatches(tr_model *m, float loss[2], float **grads) {
    const int n = m->batch * m->spec.seq;
    int32_t ids[128], tg[128];
    CHECK_INT_EQ(tr_model_init_weights(m, 21), TR_OK);
    for (int mb = 0; mb < 2; mb++) {
        tr_test_batch(ids, tg, n, m->full.vocab_real, mb);
        loss[mb] = NAN;
        CHECK_INT_EQ(tr_model_forward(m, ids, tg, &loss[mb]), TR_OK);
        CHECK_INT_EQ(tr_model_backward(m, 0.5f), TR_OK);
    }
    *grads = malloc((size_t)m->n_params * sizeof **grads);
    CHECK_INT_EQ(tr_device_to_host(m->dev, *grads, m->grads, (size_t)m->n_params * sizeof **grads),
                 TR_OK);
}

static void check_precision(int lowp, const char *name) {
    printf(" %s\n", name);
    const int B = 2;
    tr_model_part whole = {0, 2, true, true, 1};
    tr_model half, full, host;
    tr_model_spec s = spec(lowp);
    CHECK_INT_EQ(tr_model_create_parts_on(&half, g_dev, &s, (tr_tp_shard){0, 1}, B, &whole, 1),
                 TR_OK);
    s.no_half_acts = 1;
    CHECK_INT_EQ(tr_model_create_parts_on(&full, g_dev, &s, (tr_tp_shard){0, 1}, B, &whole, 1),
                 TR_OK);
    CHECK_INT_EQ(tr_model_create(&host, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B), TR_OK);
    CHECK(half.slot_acts[0].layers[1].ln2_h && half.slot_acts[0].lnf_h);
    CHECK(!full.slot_acts[0].layers[1].ln2_h && !full.slot_acts[0].lnf_h);
    float lh[2], lf[2], lc[2], *gh = NULL, *gf = NULL, *gc = NULL;
    two_microbatches(&half, lh, &gh);
    two_microbatches(&full, lf, &gf);
    two_microbatches(&host, lc, &gc);
    for (int mb = 0; mb < 2; mb++) {
        printf("  microbatch %d loss: half %.9g, fp32-saved %.9g, host %.9g\n", mb, lh[mb], lf[mb],
               lc[mb]);
        CHECK(isfinite(lh[mb]));
        check_close("loss vs fp32-saved on the device", &lh[mb], &lf[mb], 1, 1e-5);
        check_close("loss vs host", &lh[mb], &lc[mb], 1, 1e-3);
    }
    if (gh && gf && gc) {
        check_close("gradients vs fp32-saved on the device", gh, gf, half.n_params, 1e-3);
        check_close("gradients vs host", gh, gc, half.n_params, 3e-2);
    }
    free(gh);
    free(gf);
    free(gc);
    tr_model_free(&half);
    tr_model_free(&full);
    tr_model_free(&host);
}

static void test_half_acts_on_device(void) {
    check_precision(TR_LOWP_BF16, "bf16");
    check_precision(TR_LOWP_F16, "fp16");
}

int main(int argc, char **argv) {
    static const tr_test_case tests[] = {TR_TEST(test_half_acts_on_device)};
    return tr_test_device_main(argc, argv, tests, 1, &g_kind, &g_dev);
}
