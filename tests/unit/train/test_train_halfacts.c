/* Half-precision saved activations (docs/runtime.md, "Saved activations"), one rank:
 *  - training with the linear layers' inputs saved in bf16/fp16 is BITWISE training with them
 *    saved in fp32 (tr_train_opts.no_half_acts), losses and final parameters, bf16 and fp16, GPT
 *    and Llama, with and without the weight copy, through tr_train_run;
 *  - LoRA: the inputs of adapted layers stay fp32, the others are half, and a forward and
 *    backward (adapters trained) is bitwise the fp32-stored one;
 *  - pipeline slots: each (part, slot) keeps its own half buffers (two microbatches in flight);
 *  - the activation memory drops by 2 bytes per element of the replaced tensors (6 per element
 *    of a gathered norm output under sequence parallelism, whose local fp32 rows go too),
 *    measured through the size of the activation allocation, with the expected drop computed
 *    here from the shapes. */
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "recipes/resolve.h"
#include "runtime/model/model.h"
#include "runtime/train/train.h"
#include "tests/unit/model/tiny_models.h"
#include "tests/unit/train/train_compare.h"

/* The first layer's norm output and the head's input were saved in half precision. */
static bool saved_half(const tr_model *m) {
    const tr_slot_acts *a = &m->slot_acts[0];
    return a->layers[0].ln1_h && a->layers[0].act_h && a->lnf_h && !a->layers[0].ln1;
}

static void check_bitwise(const char *recipe, const char *precision, const char *extra,
                          int no_copy) {
    tr_test_train_bitwise(
        recipe, precision, extra, (tr_train_opts){.no_weight_copy = no_copy, .no_half_acts = 0},
        (tr_train_opts){.no_weight_copy = no_copy, .no_half_acts = 1}, saved_half,
        no_copy ? "with fp32 saved activations (no weight copy)" : "with fp32 saved activations");
}

static void test_half_acts_are_bitwise_fp32_acts(void) {
    const char *bf16 = "mixed_precision.preset=bf16_mixed",
               *fp16 = "mixed_precision.preset=fp16_mixed";
    check_bitwise("gpt_tiny_pretrain", bf16, "optimizer.lr=3e-3", 0);
    check_bitwise("llama_tiny_pretrain", bf16, "optimizer.lr=3e-3", 0);
    check_bitwise("gpt_tiny_pretrain", fp16, "mixed_precision.loss_scale=1024", 0);
    check_bitwise("llama_tiny_pretrain", fp16, "mixed_precision.loss_scale=1024", 0);
    /* Without the weight copy the GEMMs round the fp32 weights beside a half activation. */
    check_bitwise("gpt_tiny_pretrain", bf16, "optimizer.lr=3e-3", 1);
}

static void make_batch(const tr_model_spec *s, int rows, int32_t *ids, int32_t *tgt, int salt) {
    for (int i = 0; i < rows; i++) {
        ids[i] = (i * 7 + 3 + salt) % s->vocab;
        tgt[i] = (i * 5 + 1 + 2 * salt) % s->vocab;
    }
}

/* LoRA on QKV and fc2 (both adapter factors random, so every adapter gradient is non-zero): ln1
 * and the MLP activation stay fp32 for the adapters, ln2 and the final norm output are half;
 * loss, parameter gradients and the adapters' gradients are bitwise the fp32-stored run's. */
static void test_lora_inputs_stay_fp32(void) {
    enum { B = 2, T = 8 };
    tr_model m[2];
    float loss[2];
    for (int k = 0; k < 2; k++) {
        tr_model_spec s = tr_test_llama_spec(T);
        s.lowp = TR_LOWP_BF16;
        s.lora_rank = 2;
        s.lora_targets = (1u << TR_LORA_QKV) | (1u << TR_LORA_FC2);
        s.lora_scale = 0.5f;
        s.lora_a_init = TR_INIT_XAVIER;
        s.lora_b_init = TR_INIT_XAVIER;
        s.no_half_acts = k;
        CHECK_INT_EQ(tr_model_create(&m[k], &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B), TR_OK);
        CHECK_INT_EQ(tr_model_init_weights(&m[k], 5), TR_OK);
        int32_t ids[B * T], tgt[B * T];
        make_batch(&s, B * T, ids, tgt, 0);
        CHECK_INT_EQ(tr_model_forward(&m[k], ids, tgt, &loss[k]), TR_OK);
        CHECK_INT_EQ(tr_model_backward(&m[k], 1.0f), TR_OK);
    }
    const tr_slot_acts *h = &m[0].slot_acts[0], *f = &m[1].slot_acts[0];
    for (int i = 0; i < 2; i++) {
        const tr_layer_acts *a = &h->layers[i];
        CHECK(a->ln1 && !a->ln1_h); /* QKV's adapter reads it */
        CHECK(!a->ln2 && a->ln2_h);
        CHECK(a->act && !a->act_h); /* fc2's adapter reads it */
        CHECK(f->layers[i].ln2 && !f->layers[i].ln2_h);
    }
    CHECK(h->lnf_h && !h->lnf && f->lnf && !f->lnf_h);
    CHECK(loss[0] == loss[1]);
    CHECK(m[0].n_params == m[1].n_params &&
          memcmp(m[0].grads, m[1].grads, sizeof(float) * (size_t)m[0].n_params) == 0);
    const tr_param_info *qa =
        tr_model_find_param(&m[0], "decoder.layers.0.self_attention.linear_qkv.adapter.linear_in"
                                   ".weight");
    CHECK(qa != NULL);
    if (qa) {
        bool nonzero = false;
        for (int64_t e = 0; e < qa->numel; e++) nonzero |= m[0].grads[qa->offset + e] != 0.0f;
        CHECK(nonzero);
    }
    tr_model_free(&m[0]);
    tr_model_free(&m[1]);
}

/* Two microbatches in flight in one part (a pipeline stage's slots): both forwards run before
 * either backward, so a half buffer shared between slots would give the first backward the
 * second microbatch's inputs. Gradients and input gradients are bitwise the fp32-stored ones. */
static void test_pipeline_slots_keep_their_own(void) {
    enum { B = 1, T = 8 };
    tr_model_spec s = tr_test_gpt_spec(T);
    s.lowp = TR_LOWP_F16;
    tr_model_part first = {.first_layer = 0, .num_layers = 2, .has_embedding = true, .slots = 2};
    int64_t n = (int64_t)B * T * s.hidden;
    float *out[2][2], *dy = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) dy[i] = (float)((i * 29) % 41) / 20.0f - 1.0f;
    tr_model m[2];
    for (int k = 0; k < 2; k++) {
        s.no_half_acts = k;
        CHECK_INT_EQ(
            tr_model_create_parts(&m[k], &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B, &first, 1),
            TR_OK);
        CHECK_INT_EQ(tr_model_init_weights(&m[k], 9), TR_OK);
        int32_t ids[2][B * T], tgt[B * T];
        for (int slot = 0; slot < 2; slot++) {
            out[k][slot] = malloc(sizeof(float) * (size_t)n);
            make_batch(&s, B * T, ids[slot], tgt, 3 * slot);
            CHECK_INT_EQ(
                tr_model_forward_part(&m[k], 0, slot, ids[slot], NULL, NULL, out[k][slot], NULL),
                TR_OK);
        }
        for (int slot = 0; slot < 2; slot++)
            CHECK_INT_EQ(tr_model_backward_part(&m[k], 0, slot, 1.0f, dy, NULL), TR_OK);
    }
    CHECK(m[0].slot_acts[0].layers[0].ln1_h != m[0].slot_acts[1].layers[0].ln1_h);
    CHECK(m[0].slot_acts[1].layers[1].act_h && !m[1].slot_acts[1].layers[1].act_h);
    for (int slot = 0; slot < 2; slot++)
        CHECK(memcmp(out[0][slot], out[1][slot], sizeof(float) * (size_t)n) == 0);
    CHECK(memcmp(m[0].grads, m[1].grads, sizeof(float) * (size_t)m[0].n_params) == 0);
    for (int k = 0; k < 2; k++) {
        for (int slot = 0; slot < 2; slot++) free(out[k][slot]);
        tr_model_free(&m[k]);
    }
    free(dy);
}

/* Activation bytes of a model: the floats of its one activation allocation (every slot and the
 * shared scratch), as requested from the device. */
static int64_t act_bytes(const tr_model_spec *s, tr_tp_shard tp, int batch) {
    tr_model m;
    if (tr_model_create(&m, s, tp, tr_ops_cpu(), batch) != TR_OK) return 0;
    int64_t bytes = m.act_numel * (int64_t)sizeof(float);
    tr_model_free(&m);
    return bytes;
}

/* Shapes whose half buffers fill whole 64-byte blocks (the layout's alignment), so the saving is
 * exactly 2 bytes per element: per layer ln1, ln2 [b*s, h] and the activation [b*s, ffn], plus
 * the final norm output. Under sequence parallelism each gathered norm output [b*s, h] also
 * drops its local fp32 rows (allocated [b*s, h] too): 4 + 4 - 2 bytes per element. */
static void test_activation_bytes_drop(void) {
    enum { B = 2, T = 8 };
    tr_model_spec s = tr_test_llama_spec(T);
    const int64_t bt = B * T, L = s.num_layers, C = s.hidden;
    s.lowp = TR_LOWP_BF16;
    int64_t half = act_bytes(&s, (tr_tp_shard){0, 1}, B);
    s.no_half_acts = 1;
    int64_t full = act_bytes(&s, (tr_tp_shard){0, 1}, B);
    s.lowp = 0;
    int64_t fp32 = act_bytes(&s, (tr_tp_shard){0, 1}, B);
    CHECK(half > 0 && full == fp32);
    CHECK_INT_EQ(full - half, 2 * (L * (2 * bt * C + bt * s.ffn) + bt * C));
    printf("  llama tiny, mbs %d seq %d: %lld activation bytes in fp32, %lld with half inputs\n", B,
           T, (long long)full, (long long)half);

    /* TP 2 with sequence parallelism: this rank's ffn is half the model's (and the padded
     * vocabulary must split). */
    s.vocab = 32;
    s.lowp = TR_LOWP_BF16;
    s.sequence_parallel = 1;
    s.no_half_acts = 0;
    half = act_bytes(&s, (tr_tp_shard){0, 2}, B);
    s.no_half_acts = 1;
    full = act_bytes(&s, (tr_tp_shard){0, 2}, B);
    int64_t ffn_local = s.ffn / 2;
    CHECK(half > 0);
    CHECK_INT_EQ(full - half, L * (2 * 6 * bt * C + 2 * bt * ffn_local) + 6 * bt * C);

    /* LoRA on every linear layer: only the output layer's input is half. */
    s.sequence_parallel = 0;
    s.lora_rank = 2;
    s.lora_targets = (1u << TR_LORA_TARGETS) - 1;
    s.lora_scale = 1.0f;
    s.lora_a_init = TR_INIT_XAVIER;
    s.lora_b_init = TR_INIT_ZERO;
    s.no_half_acts = 0;
    half = act_bytes(&s, (tr_tp_shard){0, 1}, B);
    s.no_half_acts = 1;
    full = act_bytes(&s, (tr_tp_shard){0, 1}, B);
    CHECK(half > 0);
    CHECK_INT_EQ(full - half, 2 * bt * C);
}

TR_TEST_MAIN(TR_TEST(test_half_acts_are_bitwise_fp32_acts), TR_TEST(test_lora_inputs_stay_fp32),
             TR_TEST(test_pipeline_slots_keep_their_own), TR_TEST(test_activation_bytes_drop))
