/* Finite-difference check of the whole model: for every parameter tensor, the directional
 * derivative of the loss along a random +-1 direction on that tensor (central differences)
 * must match the analytic gradient projected on the same direction. One direction per tensor
 * catches a wrong or missing gradient in any single tensor, with far less fp32 noise than
 * element-wise differences. Dropout (hidden and attention) is on, its masks fixed by the seed and
 * round, so the backward must regenerate each layer's forward mask. */
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "runtime/model/model.h"
#include "tests/unit/model/tiny_models.h"

static tr_model_spec gpt_spec(void) {
    tr_model_spec s = tr_test_gpt_spec(8);
    s.hidden_dropout = 0.1f;
    s.attention_dropout = 0.1f;
    return s;
}

/* Llama 3's frequency scaling on RoPE, with a short original context so it bends. */
static tr_model_spec llama_spec(void) {
    tr_model_spec s = tr_test_llama_spec(8);
    s.rope_p = (tr_rope_params){.rot_dim = 6,
                                .base = 10000.0,
                                .llama3 = 1,
                                .factor = 8.0,
                                .low_freq_factor = 1.0,
                                .high_freq_factor = 4.0,
                                .original_max_position = 4.0};
    return s;
}

static void make_batch(int32_t *ids, int32_t *tg, int n, int vocab, int ignore_some) {
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)((i * 7 + 3) % vocab);
        tg[i] = (int32_t)((i * 5 + 1) % vocab);
        if (ignore_some && i % 5 == 2) tg[i] = -1;
    }
}

static double loss_at(tr_model *m, const int32_t *ids, const int32_t *tg) {
    float l = 0;
    CHECK_INT_EQ(tr_model_forward(m, ids, tg, &l), TR_OK);
    return l;
}

/* Norm weights away from their init (ones, or zeros when zero-centred), so a backward that
 * dropped gamma from the input gradient would show. */
static void perturb_norms(tr_model *m) {
    for (int t = 0; t < m->n_info; t++) {
        const tr_param_info *p = &m->info[t];
        if (!strstr(p->name, "layernorm")) continue;
        for (int64_t e = 0; e < p->numel; e++)
            m->params[p->offset + e] += 0.3f * (float)((e * 7 + t * 3) % 11 - 5) / 5.0f;
    }
    tr_model_params_changed(m);
}

static void check_model(tr_model_spec s, int batch, int ignore_some, double loss_scale) {
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), batch), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&m, 7), TR_OK);
    if (s.qk_norm) perturb_norms(&m);
    int n = batch * s.seq;
    int32_t *ids = malloc((size_t)n * sizeof *ids), *tg = malloc((size_t)n * sizeof *tg);
    make_batch(ids, tg, n, s.vocab, ignore_some);
    m.dropout_seed = 99;
    double l0 = loss_at(&m, ids, tg);
    CHECK(l0 > 0.0);
    CHECK_INT_EQ(tr_model_backward(&m, (float)loss_scale), TR_OK);
    float *dir = malloc((size_t)m.n_params * sizeof *dir);
    srand(3);
    int checked = 0;
    for (int t = 0; t < m.n_info; t++) {
        const tr_param_info *p = &m.info[t];
        float *w = m.params + p->offset;
        const float *g = m.grads + p->offset;
        double analytic = 0.0;
        for (int64_t e = 0; e < p->numel; e++) {
            dir[e] = (rand() & 1) ? 1.0f : -1.0f;
            analytic += (double)dir[e] * g[e];
        }
        double h = 2e-3;
        for (int64_t e = 0; e < p->numel; e++) w[e] += (float)h * dir[e];
        double lp = loss_at(&m, ids, tg);
        for (int64_t e = 0; e < p->numel; e++) w[e] -= 2.0f * (float)h * dir[e];
        double lm = loss_at(&m, ids, tg);
        for (int64_t e = 0; e < p->numel; e++) w[e] += (float)h * dir[e];
        double numeric = loss_scale * (lp - lm) / (2.0 * h);
        double tol = 3e-2 * fabs(numeric) + 2e-4 * loss_scale;
        if (!(fabs(numeric - analytic) <= tol))
            fprintf(stderr, "  %s: analytic %.6g numeric %.6g\n", p->name, analytic, numeric);
        CHECK(fabs(numeric - analytic) <= tol);
        CHECK(fabs(analytic) > 1e-6); /* every tensor must actually receive gradient */
        checked++;
    }
    CHECK_INT_EQ(checked, m.n_info);
    free(dir);
    free(ids);
    free(tg);
    tr_model_free(&m);
}

static void test_gpt_fd(void) {
    check_model(gpt_spec(), 2, 1, 1.0);
}
static void test_llama_fd(void) {
    check_model(llama_spec(), 2, 0, 0.5);
    tr_model_spec s = llama_spec(); /* GQA with attention dropout */
    s.attention_dropout = 0.3f;
    check_model(s, 2, 0, 0.5);
}

static void test_llama_untied_partial_rope(void) {
    tr_model_spec s = llama_spec();
    s.groups = 1;
    s.rope_p.rot_dim = 4; /* rotary_percent < 1: the last two channels pass through */
    s.rope_p.llama3 = 0;
    s.bias_qkv = 1; /* add_qkv_bias without add_bias_linear */
    s.zero_centered = 1;
    check_model(s, 1, 1, 1.0);
}

/* qk_layernorm (Qwen3): RMSNorm over head_dim on q and k, before RoPE; every q/k norm weight
 * gets its gradient and the QKV weight's gradient goes through the norms' input gradient. */
static void test_llama_qk_norm_fd(void) {
    tr_model_spec s = llama_spec();
    s.qk_norm = 1;
    check_model(s, 2, 1, 1.0);
}

/* The LayerNorm form (a bias per norm) with zero-centred gamma; RoPE turns the key norm's bias
 * into a per-position term, so it has a gradient too. */
static void test_layernorm_qk_norm_fd(void) {
    tr_model_spec s = llama_spec();
    s.qk_norm = 1;
    s.layernorm = 1;
    s.zero_centered = 1;
    check_model(s, 1, 0, 1.0);
}

/* The q/k norm tensors: Megatron's names, [head_dim], no weight decay, initialised to one (zero
 * when zero-centred), the same on every TP rank with a gradient that is summed over TP. */
static void test_qk_norm_params(void) {
    tr_model_spec s = llama_spec();
    s.qk_norm = 1;
    s.vocab = 32; /* splits over TP 2 */
    for (int tp = 1; tp <= 2; tp++) {
        tr_model m;
        CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, tp}, tr_ops_cpu(), 1), TR_OK);
        tr_model_init_weights(&m, 1);
        const char *names[] = {"decoder.layers.1.self_attention.q_layernorm.weight",
                               "decoder.layers.1.self_attention.k_layernorm.weight"};
        for (int k = 0; k < 2; k++) {
            const tr_param_info *p = tr_model_find_param(&m, names[k]);
            CHECK(p != NULL);
            if (!p) continue;
            CHECK_INT_EQ(p->numel, 6);
            CHECK_INT_EQ(p->split_dim, -1);
            CHECK(p->no_decay && p->sp_partial == (tp > 1));
            CHECK(m.params[p->offset] == 1.0f && m.params[p->offset + 5] == 1.0f);
        }
        CHECK(tr_model_find_param(&m, "decoder.layers.0.self_attention.q_layernorm.bias") == NULL);
        tr_model_free(&m);
    }
    /* optimizer.apply_wd_to_qk_layernorm: weight decay on them, as on the linear weights. */
    s.qk_norm_wd = 1;
    tr_model wd;
    CHECK_INT_EQ(tr_model_create(&wd, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_OK);
    const tr_param_info *q =
        tr_model_find_param(&wd, "decoder.layers.0.self_attention.q_layernorm.weight");
    const tr_param_info *ln = tr_model_find_param(&wd, "decoder.layers.0.input_layernorm.weight");
    CHECK(q && ln);
    if (q && ln) CHECK(!q->no_decay && ln->no_decay);
    tr_model_free(&wd);
    s.qk_norm_wd = 0;
    s.layernorm = 1;
    s.zero_centered = 1;
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_OK);
    tr_model_init_weights(&m, 1);
    const tr_param_info *w =
        tr_model_find_param(&m, "decoder.layers.0.self_attention.k_layernorm.weight");
    const tr_param_info *b =
        tr_model_find_param(&m, "decoder.layers.0.self_attention.k_layernorm.bias");
    CHECK(w && b);
    if (w && b) CHECK(m.params[w->offset] == 0.0f && m.params[b->offset] == 0.0f && b->no_decay);
    tr_model_free(&m);
}

/* Gradient accumulation: two microbatches at scale 1/2 equal one batch of both at scale 1. */
static void test_accumulation_matches_big_batch(void) {
    tr_model_spec s = llama_spec();
    tr_model one, two;
    CHECK_INT_EQ(tr_model_create(&one, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_OK);
    CHECK_INT_EQ(tr_model_create(&two, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 2), TR_OK);
    tr_model_init_weights(&one, 5);
    tr_model_init_weights(&two, 5);
    int n = 2 * s.seq;
    int32_t ids[16], tg[16];
    make_batch(ids, tg, n, s.vocab, 0);
    float l;
    for (int mb = 0; mb < 2; mb++) {
        tr_model_forward(&one, ids + mb * s.seq, tg + mb * s.seq, &l);
        tr_model_backward(&one, 0.5f);
    }
    tr_model_forward(&two, ids, tg, &l);
    tr_model_backward(&two, 1.0f);
    double worst = 0.0, scale = 0.0;
    for (int64_t i = 0; i < one.n_params; i++) {
        worst = fmax(worst, fabs(one.grads[i] - two.grads[i]));
        scale = fmax(scale, fabs(two.grads[i]));
    }
    CHECK(scale > 0.0);
    CHECK(worst <= 1e-5 * scale);
    tr_model_free(&one);
    tr_model_free(&two);
}

/* Attention dropout only in training: evaluation gives bitwise the loss without it; in training
 * the mask follows the round (the same round, the same loss bitwise; another, another loss). */
static void test_attention_dropout_training_only(void) {
    tr_model_spec s = tr_test_gpt_spec(8), s0 = s;
    s.attention_dropout = 0.5f;
    tr_model m, m0;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 2), TR_OK);
    CHECK_INT_EQ(tr_model_create(&m0, &s0, (tr_tp_shard){0, 1}, tr_ops_cpu(), 2), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&m, 7), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&m0, 7), TR_OK);
    int32_t ids[16], tg[16];
    make_batch(ids, tg, 2 * s.seq, s.vocab, 0);
    m.dropout_seed = m0.dropout_seed = 99;
    float plain = (float)loss_at(&m0, ids, tg);
    m.training = 0;
    float eval = (float)loss_at(&m, ids, tg);
    CHECK(memcmp(&eval, &plain, sizeof eval) == 0);
    m.training = 1;
    m.dropout_round = 4;
    float a = (float)loss_at(&m, ids, tg), b = (float)loss_at(&m, ids, tg);
    m.dropout_round = 5;
    float c = (float)loss_at(&m, ids, tg);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    CHECK(a != plain);
    CHECK(a != c);
    tr_model_free(&m);
    tr_model_free(&m0);
}

static void test_bad_input_rejected(void) {
    tr_model_spec s = gpt_spec();
    tr_model m;
    s.groups = 3; /* heads % groups != 0 */
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_ERR_INVALID);
    s = gpt_spec();
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_OK);
    int32_t ids[8] = {0, 1, 2, 3, 4, 5, 6, 29}, tg[8] = {0};
    float l;
    CHECK_INT_EQ(tr_model_forward(&m, ids, tg, &l), TR_ERR_INVALID); /* id 29 >= vocab */
    tr_model_free(&m);
}

/* Megatron's init: norm weights 1, biases 0, projections scaled by 1/sqrt(2L). */
static void test_init_statistics(void) {
    tr_model_spec s = gpt_spec();
    s.hidden = 64;
    s.ffn = 256;
    s.init_std = 0.02;
    s.embed_init_std = 0.02;
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_OK);
    tr_model_init_weights(&m, 1);
    const tr_param_info *fc1 = tr_model_find_param(&m, "decoder.layers.0.mlp.linear_fc1.weight");
    const tr_param_info *fc2 = tr_model_find_param(&m, "decoder.layers.1.mlp.linear_fc2.weight");
    const tr_param_info *ln = tr_model_find_param(&m, "decoder.layers.1.input_layernorm.weight");
    const tr_param_info *b = tr_model_find_param(&m, "decoder.layers.0.mlp.linear_fc1.bias");
    CHECK(fc1 && fc2 && ln && b);
    if (!fc1 || !fc2 || !ln || !b) return;
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < fc1->numel; i++)
        s1 += (double)m.params[fc1->offset + i] * m.params[fc1->offset + i];
    for (int64_t i = 0; i < fc2->numel; i++)
        s2 += (double)m.params[fc2->offset + i] * m.params[fc2->offset + i];
    CHECK_CLOSE(sqrt(s1 / fc1->numel), 0.02, 0.05, 0);
    CHECK_CLOSE(sqrt(s2 / fc2->numel), 0.02 / sqrt(4.0), 0.05, 0);
    CHECK(m.params[ln->offset] == 1.0f && m.params[b->offset] == 0.0f);
    CHECK(ln->no_decay && b->no_decay && !fc1->no_decay);
    tr_model_free(&m);
}

/* kv_channels * heads may differ from hidden: QKV reads hidden, proj reads heads * head_dim. */
static void test_layout_shapes(void) {
    tr_model_spec s = llama_spec(); /* hidden 16, 4 heads of 6, 2 groups, ffn 20, untied */
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_OK);
    const tr_param_info *qkv =
        tr_model_find_param(&m, "decoder.layers.1.self_attention.linear_qkv.weight");
    const tr_param_info *proj =
        tr_model_find_param(&m, "decoder.layers.1.self_attention.linear_proj.weight");
    const tr_param_info *fc1 = tr_model_find_param(&m, "decoder.layers.0.mlp.linear_fc1.weight");
    const tr_param_info *out = tr_model_find_param(&m, "output_layer.weight");
    CHECK(qkv && proj && fc1 && out);
    if (!qkv || !proj || !fc1 || !out) return;
    CHECK_INT_EQ(qkv->rows, (4 + 2 * 2) * 6);
    CHECK_INT_EQ(qkv->cols, 16);
    CHECK_INT_EQ(proj->rows, 16);
    CHECK_INT_EQ(proj->cols, 24);
    CHECK_INT_EQ(fc1->rows, 2 * 20); /* [gate; up] */
    CHECK_INT_EQ(out->rows, 31);
    CHECK(tr_model_find_param(&m, "decoder.layers.0.input_layernorm.bias") == NULL); /* RMSNorm */
    /* ranges are disjoint and inside the flat buffer */
    for (int i = 1; i < m.n_info; i++)
        CHECK(m.info[i].offset >= m.info[i - 1].offset + m.info[i - 1].numel);
    CHECK(m.info[m.n_info - 1].offset + m.info[m.n_info - 1].numel <= m.n_params);
    tr_model_free(&m);
}

TR_TEST_MAIN(TR_TEST(test_layout_shapes), TR_TEST(test_gpt_fd), TR_TEST(test_llama_fd),
             TR_TEST(test_llama_untied_partial_rope), TR_TEST(test_accumulation_matches_big_batch),
             TR_TEST(test_attention_dropout_training_only), TR_TEST(test_bad_input_rejected),
             TR_TEST(test_init_statistics), TR_TEST(test_llama_qk_norm_fd),
             TR_TEST(test_layernorm_qk_norm_fd), TR_TEST(test_qk_norm_params))
