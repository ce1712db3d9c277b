/* The half-precision weight copy (docs/runtime.md, "Mixed precision"), one rank:
 *  - training with the copy is BITWISE training with per-GEMM casting (losses and final
 *    parameters), bf16 and fp16, on GPT (biases: the fused bias) and Llama (tied embedding as the
 *    output layer), through tr_train_run;
 *  - a stale copy is caught: parameters changed behind the model's back (no
 *    tr_model_params_changed) make the next forward fail on a host device, and with that check
 *    off, the stale copy visibly changes the loss, which tr_model_params_changed repairs;
 *  - a copy is cast once per change, and an optimizer step leaves LoRA's frozen base's copy;
 *  - the copy costs 2 bytes per linear-weight element and exists only in mixed precision. */
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "recipes/resolve.h"
#include "runtime/model/model.h"
#include "runtime/train/train.h"
#include "tests/unit/model/tiny_models.h"
#include "tests/unit/train/train_compare.h"

static bool had_copy(const tr_model *m) {
    return m->wcopy != NULL;
}

static void check_bitwise(const char *recipe, const char *precision, const char *extra) {
    tr_test_train_bitwise(recipe, precision, extra, (tr_train_opts){.no_weight_copy = 0},
                          (tr_train_opts){.no_weight_copy = 1}, had_copy,
                          "with and without the copy");
}

static void test_copy_is_bitwise_per_gemm_casting(void) {
    const char *bf16 = "mixed_precision.preset=bf16_mixed",
               *fp16 = "mixed_precision.preset=fp16_mixed";
    check_bitwise("gpt_tiny_pretrain", bf16, "optimizer.lr=3e-3");
    check_bitwise("llama_tiny_pretrain", bf16, "optimizer.lr=3e-3");
    /* A static scale that fits, so every step updates the parameters (and the copy). */
    check_bitwise("gpt_tiny_pretrain", fp16, "mixed_precision.loss_scale=1024");
    check_bitwise("llama_tiny_pretrain", fp16, "mixed_precision.loss_scale=1024");
}

static float forward(tr_model *m, const int32_t *ids, const int32_t *tgt, tr_status *st) {
    float loss = NAN;
    *st = tr_model_forward(m, ids, tgt, &loss);
    return loss;
}

static void test_stale_copy_is_caught(void) {
    enum { B = 2, T = 8 };
    tr_model_spec s = tr_test_gpt_spec(T);
    s.lowp = TR_LOWP_BF16;
    tr_model m, ref;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B), TR_OK);
    s.no_weight_copy = 1;
    CHECK_INT_EQ(tr_model_create(&ref, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B), TR_OK);
    CHECK(m.wcopy != NULL && ref.wcopy == NULL);
    CHECK_INT_EQ(tr_model_init_weights(&m, 7), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&ref, 7), TR_OK);
    int32_t ids[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) {
        ids[i] = (i * 7 + 3) % s.vocab;
        tgt[i] = (i * 5 + 1) % s.vocab;
    }
    tr_status st;
    float before = forward(&m, ids, tgt, &st);
    CHECK_INT_EQ(st, TR_OK);
    CHECK(before == forward(&ref, ids, tgt, &st));
    /* Change every fp32 weight by far more than a bf16 ulp, without telling the model. */
    for (int64_t i = 0; i < m.n_params; i++) {
        m.params[i] *= 1.25f;
        ref.params[i] *= 1.25f;
    }
    float want = forward(&ref, ids, tgt, &st);
    CHECK_INT_EQ(st, TR_OK);
    CHECK(want != before);
    /* The host device compares a copy it believes current with a fresh cast: an error. */
    forward(&m, ids, tgt, &st);
    CHECK_INT_EQ(st, TR_ERR_INTERNAL);
    /* Without that check (as on a GPU) the stale copy is used, and the loss shows it. */
    m.wcopy_verify = false;
    float stale = forward(&m, ids, tgt, &st);
    CHECK_INT_EQ(st, TR_OK);
    CHECK(stale != want);
    /* The one call every parameter write owes the model brings it back, bitwise. */
    tr_model_params_changed(&m);
    m.wcopy_verify = true;
    float fresh = forward(&m, ids, tgt, &st);
    CHECK_INT_EQ(st, TR_OK);
    CHECK(fresh == want);
    tr_model_free(&m);
    tr_model_free(&ref);
}

/* A pipeline's last stage with a tied embedding holds its own copy of the word embedding as the
 * output weight: its half-precision copy is made and used, and the stage's loss, input gradient
 * and parameter gradients are bitwise those of per-GEMM casting. */
static void test_last_stage_tied_copy(void) {
    enum { B = 2, T = 8 };
    tr_model_spec s = tr_test_gpt_spec(T);
    s.lowp = TR_LOWP_BF16;
    tr_model_part last = {.first_layer = 1, .num_layers = 1, .has_loss = true, .slots = 1};
    tr_model m[2];
    for (int k = 0; k < 2; k++) {
        s.no_weight_copy = k;
        CHECK_INT_EQ(
            tr_model_create_parts(&m[k], &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B, &last, 1),
            TR_OK);
        CHECK_INT_EQ(tr_model_init_weights(&m[k], 11), TR_OK);
    }
    CHECK(m[0].has_tied_copy && m[0].wcopy && !m[1].wcopy);
    const tr_param_info *emb = tr_model_find_param(&m[0], "embedding.word_embeddings.weight");
    CHECK(emb && emb->tied_copy && m[0].wcopy_off[emb - m[0].info] >= 0);
    int64_t n = (int64_t)B * T * s.hidden;
    float *x = malloc(sizeof(float) * (size_t)n), *dx[2];
    int32_t tgt[B * T];
    for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    for (int i = 0; i < B * T; i++) tgt[i] = (i * 5 + 2) % s.vocab;
    float loss[2];
    for (int k = 0; k < 2; k++) {
        dx[k] = malloc(sizeof(float) * (size_t)n);
        CHECK_INT_EQ(tr_model_forward_part(&m[k], 0, 0, NULL, tgt, x, NULL, &loss[k]), TR_OK);
        CHECK_INT_EQ(tr_model_backward_part(&m[k], 0, 0, 1.0f, NULL, dx[k]), TR_OK);
    }
    CHECK(loss[0] == loss[1]);
    CHECK(memcmp(dx[0], dx[1], sizeof(float) * (size_t)n) == 0);
    CHECK(m[0].n_params == m[1].n_params &&
          memcmp(m[0].grads, m[1].grads, sizeof(float) * (size_t)m[0].n_params) == 0);
    for (int k = 0; k < 2; k++) {
        free(dx[k]);
        tr_model_free(&m[k]);
    }
    free(x);
}

/* How often the copy is made: once per linear weight after a change, never again while nothing
 * changes, and after an optimizer step (tr_model_params_stepped) not for LoRA's frozen base. */
static int n_casts;

static tr_status counting_cast(tr_lowp t, uint16_t *dst, const float *src, int64_t n) {
    n_casts++;
    return tr_ops_cpu()->cast_lowp(t, dst, src, n);
}

static int casts_of_forward(tr_model *m, const int32_t *ids, const int32_t *tgt) {
    n_casts = 0;
    float loss;
    CHECK_INT_EQ(tr_model_forward(m, ids, tgt, &loss), TR_OK);
    return n_casts;
}

static void test_recast_only_when_changed(void) {
    enum { T = 8 };
    tr_ops ops = *tr_ops_cpu();
    ops.cast_lowp = counting_cast;
    int32_t ids[T], tgt[T];
    for (int i = 0; i < T; i++) ids[i] = i + 1, tgt[i] = i + 2;
    for (int lora = 0; lora < 2; lora++) {
        tr_model_spec s = tr_test_llama_spec(T);
        s.lowp = TR_LOWP_BF16;
        if (lora) {
            s.lora_rank = 2;
            s.lora_targets = (1u << TR_LORA_TARGETS) - 1;
            s.lora_scale = 1.0f;
            s.lora_a_init = TR_INIT_XAVIER;
            s.lora_b_init = TR_INIT_ZERO;
        }
        tr_model m;
        CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, &ops, 1), TR_OK);
        CHECK_INT_EQ(tr_model_init_weights(&m, 3), TR_OK);
        /* The copy verification casts too: off, to count the refreshes alone. */
        m.wcopy_verify = false;
        const int weights = 4 * s.num_layers + 1;
        /* Every forward also saves the inputs of QKV, fc1, fc2 (unless an adapter reads them in
         * fp32: all of them here with LoRA) and the output layer in half precision, one cast
         * each (docs/runtime.md, "Saved activations"). */
        const int acts = (lora ? 0 : 3 * s.num_layers) + 1;
        CHECK_INT_EQ(casts_of_forward(&m, ids, tgt), weights + acts);
        CHECK_INT_EQ(casts_of_forward(&m, ids, tgt), acts);
        tr_model_params_stepped(&m);
        CHECK_INT_EQ(casts_of_forward(&m, ids, tgt), (lora ? 0 : weights) + acts);
        tr_model_params_changed(&m);
        CHECK_INT_EQ(casts_of_forward(&m, ids, tgt), weights + acts);
        tr_model_free(&m);
    }
}

static void test_copy_only_in_mixed_precision(void) {
    tr_model_spec s = tr_test_llama_spec(8);
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_OK);
    CHECK(m.wcopy == NULL);
    tr_model_free(&m);
    s.lowp = TR_LOWP_F16;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_OK);
    CHECK(m.wcopy != NULL);
    /* Exactly the linear weights (untied Llama: 4 per layer and the output layer) have a copy,
     * each at a 256-byte aligned offset. */
    int with = 0;
    for (int i = 0; i < m.n_info; i++) {
        if (m.wcopy_off[i] < 0) continue;
        with++;
        CHECK(m.wcopy_off[i] % 128 == 0);
        CHECK(strstr(m.info[i].name, "linear_") || strstr(m.info[i].name, "output_layer"));
    }
    CHECK_INT_EQ(with, 4 * s.num_layers + 1);
    tr_model_free(&m);
}

TR_TEST_MAIN(TR_TEST(test_copy_is_bitwise_per_gemm_casting), TR_TEST(test_stale_copy_is_caught),
             TR_TEST(test_last_stage_tied_copy), TR_TEST(test_recast_only_when_changed),
             TR_TEST(test_copy_only_in_mixed_precision))
