/* Multi-latent attention through the whole model, checked by finite differences: for each
 * parameter tensor the loss's directional derivative along a random +-1 direction (central
 * differences) against the analytic gradient on that direction. Variants: compressed and direct
 * queries, with and without the q/kv norms, YaRN with a short original context (so the ramp
 * blends frequencies and mscale is not 1), a value head wider than the query head (the padding
 * goes the other way), attention dropout, packed sequences (per-token rotary positions). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "runtime/model/model.h"
#include "tests/unit/model/tiny_models.h"

static tr_model_spec mla_spec(void) {
    tr_model_spec s = tr_test_llama_spec(8);
    s.groups = s.heads;
    s.rope = 0;
    s.head_dim = 5; /* v_dim */
    s.mla = (tr_mla_spec){.on = 1,
                          .q_lora_rank = 6,
                          .kv_lora_rank = 7,
                          .qk_dim = 4,
                          .rope_dim = 4,
                          .v_dim = 5,
                          .norms = 1,
                          .yarn = 1,
                          .rope_base = 10000.0,
                          .factor = 4.0,
                          .mscale = 0.7,
                          .mscale_all_dim = 0.5,
                          .original_max_position = 4.0,
                          .beta_fast = 32.0,
                          .beta_slow = 1.0};
    return s;
}

static double loss_at(tr_model *m, const int32_t *ids, const int32_t *tg) {
    float l = 0;
    CHECK_INT_EQ(tr_model_forward(m, ids, tg, &l), TR_OK);
    return l;
}

static void perturb_norms(tr_model *m) {
    for (int t = 0; t < m->n_info; t++) {
        const tr_param_info *p = &m->info[t];
        if (!strstr(p->name, "layernorm")) continue;
        for (int64_t e = 0; e < p->numel; e++)
            m->params[p->offset + e] += 0.3f * (float)((e * 7 + t * 3) % 11 - 5) / 5.0f;
    }
    tr_model_params_changed(m);
}

static void check_fd(tr_model_spec s, int batch, bool packed) {
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), batch), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&m, 11), TR_OK);
    perturb_norms(&m);
    int n = batch * s.seq;
    int32_t *ids = malloc((size_t)n * sizeof *ids), *tg = malloc((size_t)n * sizeof *tg);
    int32_t *doc = malloc((size_t)n * sizeof *doc), *pos = malloc((size_t)n * sizeof *pos);
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)((i * 7 + 3) % s.vocab);
        tg[i] = (int32_t)((i * 5 + 1) % s.vocab);
        int t = i % s.seq, start = t < 3 ? 0 : 3; /* two documents per row */
        doc[i] = start;
        pos[i] = t - start;
    }
    if (packed) CHECK_INT_EQ(tr_model_set_sequences(&m, doc, pos), TR_OK);
    m.dropout_seed = 5;
    CHECK(loss_at(&m, ids, tg) > 0.0);
    CHECK_INT_EQ(tr_model_backward(&m, 1.0f), TR_OK);
    float *dir = malloc((size_t)m.n_params * sizeof *dir);
    srand(9);
    int mla_tensors = 0;
    for (int t = 0; t < m.n_info; t++) {
        const tr_param_info *p = &m.info[t];
        float *w = m.params + p->offset;
        const float *g = m.grads + p->offset;
        double analytic = 0.0, h = 2e-3;
        for (int64_t e = 0; e < p->numel; e++) {
            dir[e] = (rand() & 1) ? 1.0f : -1.0f;
            analytic += (double)dir[e] * g[e];
        }
        for (int64_t e = 0; e < p->numel; e++) w[e] += (float)h * dir[e];
        tr_model_params_changed(&m);
        double lp = loss_at(&m, ids, tg);
        for (int64_t e = 0; e < p->numel; e++) w[e] -= 2.0f * (float)h * dir[e];
        tr_model_params_changed(&m);
        double lm = loss_at(&m, ids, tg);
        for (int64_t e = 0; e < p->numel; e++) w[e] += (float)h * dir[e];
        tr_model_params_changed(&m);
        double numeric = (lp - lm) / (2.0 * h), tol = 3e-2 * fabs(numeric) + 2e-4;
        if (!(fabs(numeric - analytic) <= tol))
            fprintf(stderr, "  %s: analytic %.6g numeric %.6g\n", p->name, analytic, numeric);
        CHECK(fabs(numeric - analytic) <= tol);
        CHECK(fabs(analytic) > 1e-6);
        mla_tensors += strstr(p->name, "_proj.weight") || strstr(p->name, "q_layernorm") ||
                       strstr(p->name, "kv_layernorm");
    }
    /* per layer: q down/norm/up, kv down/norm/up and linear_proj, or 2 fewer */
    int per_layer = s.mla.q_lora_rank ? 5 + 2 * s.mla.norms : 4 + s.mla.norms;
    CHECK_INT_EQ(mla_tensors, per_layer * s.num_layers);
    free(dir);
    free(ids);
    free(tg);
    free(doc);
    free(pos);
    tr_model_free(&m);
}

static void test_mla_lora_yarn_fd(void) {
    check_fd(mla_spec(), 2, false);
}

static void test_mla_direct_q_no_norms_fd(void) {
    tr_model_spec s = mla_spec();
    s.mla.q_lora_rank = 0;
    s.mla.norms = 0;
    s.mla.yarn = 0;
    check_fd(s, 1, false);
}

/* v_dim above qk_dim + rope_dim: q and k are padded instead of v. */
static void test_mla_wide_values_dropout_fd(void) {
    tr_model_spec s = mla_spec();
    s.mla.v_dim = s.head_dim = 10;
    s.attention_dropout = 0.2f;
    s.hidden_dropout = 0.1f;
    check_fd(s, 2, false);
}

static void test_mla_packed_fd(void) {
    check_fd(mla_spec(), 2, true);
}

/* The tensors: Megatron's names and shapes; the up projections split their rows over TP, the
 * down projections and their norms are whole on every rank. */
static void test_mla_layout(void) {
    tr_model_spec s = mla_spec();
    s.vocab = 32;
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){1, 2}, tr_ops_cpu(), 1), TR_OK);
    struct {
        const char *name;
        int rows, cols, split;
    } want[] = {{"decoder.layers.1.self_attention.linear_q_down_proj.weight", 6, 16, -1},
                {"decoder.layers.1.self_attention.q_layernorm.weight", 1, 6, -1},
                {"decoder.layers.1.self_attention.linear_q_up_proj.weight", 2 * 8, 6, 0},
                {"decoder.layers.1.self_attention.linear_kv_down_proj.weight", 7 + 4, 16, -1},
                {"decoder.layers.1.self_attention.kv_layernorm.weight", 1, 7, -1},
                {"decoder.layers.1.self_attention.linear_kv_up_proj.weight", 2 * 9, 7, 0},
                {"decoder.layers.1.self_attention.linear_proj.weight", 16, 2 * 5, 1}};
    for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
        const tr_param_info *p = tr_model_find_param(&m, want[k].name);
        CHECK(p != NULL);
        if (!p) continue;
        CHECK_INT_EQ(p->rows, want[k].rows);
        CHECK_INT_EQ(p->cols, want[k].cols);
        CHECK_INT_EQ(p->split_dim, want[k].split);
    }
    CHECK(tr_model_find_param(&m, "decoder.layers.0.self_attention.linear_qkv.weight") == NULL);
    tr_model_free(&m);
    /* What the runtime refuses (runtime.mla_*) does not build. */
    s.lora_rank = 4;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 2}, tr_ops_cpu(), 1), TR_ERR_INVALID);
}

/* YaRN as DeepSeek-V3 sets it (factor 40, mscale = mscale_all_dim = 1, 4096 original
 * positions, rope dim 64): the softmax scale is (0.1 ln 40 + 1)^2 / sqrt(192), the tables'
 * factor 1, the fastest pairs keep their frequency and the slowest are divided by 40. */
static void test_yarn_values(void) {
    tr_mla_spec s = {.on = 1,
                     .qk_dim = 128,
                     .rope_dim = 64,
                     .v_dim = 128,
                     .yarn = 1,
                     .rope_base = 10000.0,
                     .factor = 40.0,
                     .mscale = 1.0,
                     .mscale_all_dim = 1.0,
                     .original_max_position = 4096.0,
                     .beta_fast = 32.0,
                     .beta_slow = 1.0};
    double m = 0.1 * log(40.0) + 1.0;
    CHECK(fabs(tr_mla_softmax_scale(&s) - m * m / sqrt(192.0)) < 1e-6);
    CHECK(fabs(tr_mla_rope_mscale(&s) - 1.0) < 1e-12);
    CHECK(fabs(tr_mla_inv_freq(&s, 0) - 1.0) < 1e-12);
    CHECK(fabs(tr_mla_inv_freq(&s, 31) - pow(10000.0, -62.0 / 64.0) / 40.0) < 1e-15);
    CHECK_INT_EQ(tr_mla_attn_dim(&s), 192);
}

TR_TEST_MAIN(TR_TEST(test_mla_lora_yarn_fd), TR_TEST(test_mla_direct_q_no_norms_fd),
             TR_TEST(test_mla_wide_values_dropout_fd), TR_TEST(test_mla_packed_fd),
             TR_TEST(test_mla_layout), TR_TEST(test_yarn_values))
