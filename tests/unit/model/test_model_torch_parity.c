/* Parity with PyTorch/transformers: a tiny LlamaForCausalLM and GPT2LMHeadModel, weights mapped
 * to Trestle's layout by tests/reference/make_fixtures.py. Logits, loss and every parameter's
 * gradient must match at fp32 to a relative error <= 1e-4 (max abs difference over the
 * tensor's max abs value), and the parameters after 3 AdamW steps must match as well. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "tests/unit/model/fixture.h"
#include "runtime/model/model.h"
#include "runtime/optimizer/optimizer.h"

/* max|a - b| / max|b|: relative to the tensor's scale, so near-zero elements do not dominate. */
static double rel_err(const float *a, const float *b, int64_t n) {
    double diff = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        ref = fmax(ref, fabs((double)b[i]));
    }
    return ref > 0.0 ? diff / ref : diff;
}

/* Elements whose gradient is mathematically zero (a key bias: softmax ignores a per-query
 * constant) have fp32 round-off as gradient, which Adam normalises into a full-size step in
 * either direction; after the optimizer steps only elements with a real gradient compare. */
static double rel_err_masked(const float *a, const float *b, const float *g, int64_t n) {
    double gmax = 0.0, diff = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; i++) gmax = fmax(gmax, fabs((double)g[i]));
    for (int64_t i = 0; i < n; i++) {
        ref = fmax(ref, fabs((double)b[i]));
        if (fabs((double)g[i]) > 1e-4 * gmax) diff = fmax(diff, fabs((double)a[i] - b[i]));
    }
    return ref > 0.0 ? diff / ref : diff;
}

static void check_params(const tr_model *m, const fixture *f, const float *buf, const char *prefix,
                         double tol) {
    for (int i = 0; i < m->n_info; i++) {
        const tr_param_info *p = &m->info[i];
        const fix_tensor *t = fixture_get(f, prefix, p->name);
        CHECK(t != NULL);
        if (!t) continue;
        CHECK_INT_EQ(t->n, p->numel);
        if ((int64_t)t->n != p->numel) continue;
        const fix_tensor *g = fixture_get(f, "g:", p->name);
        double e = strcmp(prefix, "p3:") == 0 && g
                       ? rel_err_masked(buf + p->offset, t->data, g->data, p->numel)
                       : rel_err(buf + p->offset, t->data, p->numel);
        if (!(e <= tol)) fprintf(stderr, "  %s%s: relative error %.3g\n", prefix, p->name, e);
        CHECK(e <= tol);
    }
}

static void run_case(const char *file, tr_model_spec s) {
    fixture f;
    CHECK(fixture_load(&f, file));
    if (!f.n) return;
    tr_model m;
    const int batch = 2;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), batch), TR_OK);
    for (int i = 0; i < m.n_info; i++) {
        const fix_tensor *t = fixture_get(&f, "w:", m.info[i].name);
        CHECK(t && (int64_t)t->n == m.info[i].numel);
        if (t && (int64_t)t->n == m.info[i].numel)
            memcpy(m.params + m.info[i].offset, t->data, t->n * sizeof(float));
    }
    const fix_tensor *tok = fixture_get(&f, "", "tokens"), *tgt = fixture_get(&f, "", "targets");
    const fix_tensor *logits = fixture_get(&f, "", "logits"), *loss = fixture_get(&f, "", "loss");
    int rows = batch * s.seq;
    CHECK(tok && tgt && logits && loss && (int)tok->n == rows);
    if (!tok || !tgt || !logits || !loss || (int)tok->n != rows) goto out;
    int32_t ids[64], tg[64];
    for (int i = 0; i < rows; i++) {
        ids[i] = (int32_t)tok->data[i];
        tg[i] = (int32_t)tgt->data[i];
    }
    float l = 0;
    CHECK_INT_EQ(tr_model_forward(&m, ids, tg, &l), TR_OK);
    CHECK(rel_err(m.logits, logits->data, (int64_t)rows * s.vocab) <= 1e-4);
    CHECK_CLOSE(l, loss->data[0], 1e-4, 0);
    CHECK_INT_EQ(tr_model_backward(&m, 1.0f), TR_OK);
    check_params(&m, &f, m.grads, "g:", 1e-4);

    /* 3 AdamW steps on the same batch, as the script does (no decay on biases and norms). */
    tr_optimizer_spec os = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
    tr_optimizer o;
    CHECK_INT_EQ(tr_optimizer_create(&o, &os, m.ops, m.info, m.n_info, m.n_params), TR_OK);
    for (int step = 0; step < 3; step++) {
        CHECK_INT_EQ(tr_optimizer_step(&o, m.params, m.grads, 1e-2, 0.1), TR_OK);
        memset(m.grads, 0, (size_t)m.n_params * sizeof(float));
        tr_model_forward(&m, ids, tg, &l);
        tr_model_backward(&m, 1.0f);
    }
    check_params(&m, &f, m.params, "p3:", 1e-4);
    tr_optimizer_free(&o);
out:
    tr_model_free(&m);
    fixture_free(&f);
}

static tr_model_spec llama_fixture_spec(void) {
    tr_model_spec s = {.num_layers = 2,
                       .hidden = 32,
                       .heads = 4,
                       .groups = 2,
                       .head_dim = 8,
                       .ffn = 48,
                       .vocab = 64,
                       .seq = 12,
                       .swiglu = 1,
                       .rope = 1,
                       .eps = 1e-5f,
                       .init_std = 0.02,
                       .embed_init_std = 0.02};
    s.rope_p = (tr_rope_params){.rot_dim = 8,
                                .base = 10000.0,
                                .llama3 = 1,
                                .factor = 8.0,
                                .low_freq_factor = 1.0,
                                .high_freq_factor = 4.0,
                                .original_max_position = 8.0};
    return s;
}

static void test_llama_parity(void) {
    run_case("model_llama.bin", llama_fixture_spec());
}

/* DoRA on every linear layer of the same Llama (tests/reference/make_dora_fixture.py): a frozen
 * base, adapters and magnitudes that train, the weight norm a constant in backward. */
static void test_llama_dora_parity(void) {
    tr_model_spec s = llama_fixture_spec();
    s.lora_rank = 4;
    s.lora_targets = (1u << TR_LORA_TARGETS) - 1;
    s.lora_scale = 2.0f; /* alpha 8 / dim 4 */
    s.lora_dora = 1;
    run_case("model_llama_dora.bin", s);
}

static void test_gpt2_parity(void) {
    tr_model_spec s = {.num_layers = 2,
                       .hidden = 32,
                       .heads = 4,
                       .groups = 4,
                       .head_dim = 8,
                       .ffn = 128,
                       .vocab = 64,
                       .seq = 12,
                       .layernorm = 1,
                       .gelu_tanh = 1,
                       .learned_pos = 1,
                       .bias_linear = 1,
                       .bias_qkv = 1,
                       .tied = 1,
                       .eps = 1e-5f,
                       .init_std = 0.02,
                       .embed_init_std = 0.02};
    run_case("model_gpt2.bin", s);
}

/* The check itself must notice a wrong convention: zero-centred gamma reads the same weights
 * as gamma - 1. */
static void test_parity_detects_mismatch(void) {
    fixture f;
    CHECK(fixture_load(&f, "model_gpt2.bin"));
    if (!f.n) return;
    tr_model_spec s = {.num_layers = 2,
                       .hidden = 32,
                       .heads = 4,
                       .groups = 4,
                       .head_dim = 8,
                       .ffn = 128,
                       .vocab = 64,
                       .seq = 12,
                       .layernorm = 1,
                       .gelu_tanh = 1,
                       .learned_pos = 1,
                       .bias_linear = 1,
                       .bias_qkv = 1,
                       .tied = 1,
                       .zero_centered = 1,
                       .eps = 1e-5f};
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 2), TR_OK);
    for (int i = 0; i < m.n_info; i++) {
        const fix_tensor *t = fixture_get(&f, "w:", m.info[i].name);
        if (t && (int64_t)t->n == m.info[i].numel)
            memcpy(m.params + m.info[i].offset, t->data, t->n * sizeof(float));
    }
    const fix_tensor *tok = fixture_get(&f, "", "tokens"), *tgt = fixture_get(&f, "", "targets");
    const fix_tensor *logits = fixture_get(&f, "", "logits");
    int32_t ids[24], tg[24];
    for (int i = 0; i < 24 && tok && tgt; i++) {
        ids[i] = (int32_t)tok->data[i];
        tg[i] = (int32_t)tgt->data[i];
    }
    float l;
    CHECK_INT_EQ(tr_model_forward(&m, ids, tg, &l), TR_OK);
    CHECK(logits && rel_err(m.logits, logits->data, 24 * 64) > 1e-4);
    tr_model_free(&m);
    fixture_free(&f);
}

TR_TEST_MAIN(TR_TEST(test_llama_parity), TR_TEST(test_llama_dora_parity), TR_TEST(test_gpt2_parity),
             TR_TEST(test_parity_detects_mismatch))
