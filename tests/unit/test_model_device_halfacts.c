/* Half-precision saved activations on a device (runtime/device.h): a bf16 and an fp16 model
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
#include <string.h>

#include "runtime/device.h"
#include "runtime/model.h"
#include "tests/unit/harness.h"

static tr_device_kind g_kind = TR_DEVICE_CPU_STRICT;
static tr_device *g_dev;

static tr_model_spec spec(int lowp) {
    tr_model_spec s = {.num_layers = 2,
                       .hidden = 32,
                       .heads = 4,
                       .groups = 2,
                       .head_dim = 8,
                       .ffn = 48,
                       .vocab = 40,
                       .vocab_real = 37,
                       .seq = 16,
                       .swiglu = 1,
                       .rope = 1,
                       .eps = 1e-6f,
                       .init_std = 0.3,
                       .embed_init_std = 0.5,
                       .lowp = lowp};
    s.rope_p = (tr_rope_params){.rot_dim = 8, .base = 10000.0};
    return s;
}

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

/* Bitwise on cpu-strict; within the relative L2 limit on CUDA. */
static void check_close(const char *what, const float *got, const float *want, int64_t n,
                        double cuda_limit) {
    double e = rel_err(got, want, n);
    printf("  %-40s rel err %.3e\n", what, e);
    if (g_kind == TR_DEVICE_CPU_STRICT)
        CHECK(memcmp(got, want, (size_t)n * sizeof *got) == 0);
    else
        CHECK(e <= cuda_limit);
}

static void batch(int32_t *ids, int32_t *tg, int n, int real, int shift) {
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)((i * 7 + 3 + shift) % real);
        tg[i] = i % 5 == 2 ? -1 : (int32_t)((i * 5 + 1 + shift) % real);
    }
}

/* Two microbatches through model m (gradients accumulate); losses to loss[2], gradients to a
 * host copy in *grads (allocated). */
static void two_microbatches(tr_model *m, float loss[2], float **grads) {
    const int n = m->batch * m->spec.seq;
    int32_t ids[128], tg[128];
    CHECK_INT_EQ(tr_model_init_weights(m, 21), TR_OK);
    for (int mb = 0; mb < 2; mb++) {
        batch(ids, tg, n, m->full.vocab_real, mb);
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
    static const tr_test_case tests[] = {TR_TEST(test_half_acts_on_device)};
    int rc = tr_test_main(argc, argv, tests, 1);
    tr_device_close(g_dev);
    return rc;
}
