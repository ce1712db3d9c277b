/* LoRA in the model (runtime/peft/lora.h):
 *  - at initialisation (B = 0) the adapter model's loss is bitwise the base model's;
 *  - central differences confirm every adapter's gradient (along its signs), and frozen tensors
 *    get none;
 *  - AdamW steps with weight decay change the adapters only: the base weights stay bitwise;
 *  - the merged weights W + (alpha/r) B A give the adapter model's forward (relative 1e-5);
 *  - adapter dropout: one mask per microbatch, the same in backward, none in evaluation;
 *  - target selection and the runtime's refusals;
 *  - DoRA: starts as the base model, trains adapters and magnitudes only, merges exactly;
 *  - an MoE layer's expert adapters train with the base frozen and merge likewise. */
#include <stdlib.h>

#include "tests/unit/harness.h"
#include "runtime/peft/lora.h"
#include "runtime/optimizer/optimizer.h"

enum { SEQ = 8, BATCH = 2, N = SEQ * BATCH };

static tr_model_spec base_spec(void) {
    tr_model_spec s = {.num_layers = 2,
                       .hidden = 16,
                       .heads = 4,
                       .groups = 2,
                       .head_dim = 4,
                       .ffn = 20,
                       .vocab = 31,
                       .seq = SEQ,
                       .swiglu = 1,
                       .rope = 1,
                       .tied = 1,
                       .eps = 1e-6f,
                       .init_std = 0.3,
                       .embed_init_std = 0.5};
    s.rope_p = (tr_rope_params){.rot_dim = 4, .base = 10000.0};
    return s;
}

static tr_model_spec lora_spec(unsigned targets) {
    tr_model_spec s = base_spec();
    s.lora_rank = 3;
    s.lora_targets = targets;
    s.lora_scale = 2.0f; /* alpha 6 / dim 3 */
    s.lora_a_init = TR_INIT_XAVIER;
    s.lora_b_init = TR_INIT_ZERO;
    return s;
}

static const unsigned all_targets = (1u << TR_LORA_TARGETS) - 1;

static void batch(int32_t *ids, int32_t *tg) {
    for (int i = 0; i < N; i++) {
        ids[i] = (int32_t)((i * 7 + 3) % 31);
        tg[i] = i % 5 == 2 ? -1 : (int32_t)((i * 5 + 1) % 31);
    }
}

static float loss_of(tr_model *m, const int32_t *ids, const int32_t *tg) {
    float l = 0.0f;
    CHECK_INT_EQ(tr_model_forward(m, ids, tg, &l), TR_OK);
    return l;
}

static void make(tr_model *m, tr_model_spec s) {
    CHECK_INT_EQ(tr_model_create(m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), BATCH), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(m, 21), TR_OK);
}

static bool is_adapter(const tr_param_info *p) {
    return tr_lora_is_adapter(p->name);
}

/* Gives every B a small random value, so A gets gradients too and the merge is not trivial. */
static void perturb_b(tr_model *m) {
    srand(9);
    for (int i = 0; i < m->n_info; i++)
        if (strstr(m->info[i].name, "linear_out"))
            for (int64_t e = 0; e < m->info[i].numel; e++)
                m->params[m->info[i].offset + e] = 0.1f * ((float)rand() / (float)RAND_MAX - 0.5f);
}

static void test_layout_and_init(void) {
    tr_model m;
    make(&m, lora_spec(all_targets));
    int adapters = 0, frozen = 0;
    for (int i = 0; i < m.n_info; i++) {
        const tr_param_info *p = &m.info[i];
        CHECK(p->frozen == !is_adapter(p));
        adapters += is_adapter(p);
        frozen += p->frozen;
        if (strstr(p->name, "linear_out")) /* B starts at zero */
            for (int64_t e = 0; e < p->numel; e++) CHECK(m.params[p->offset + e] == 0.0f);
    }
    CHECK_INT_EQ(adapters, 2 * 4 * 2); /* A and B, four layers' linears, two layers */
    CHECK(frozen > 0);
    const tr_param_info *a =
        tr_model_find_param(&m, "decoder.layers.1.mlp.linear_fc1.adapter.linear_in.weight");
    const tr_param_info *b =
        tr_model_find_param(&m, "decoder.layers.1.mlp.linear_fc1.adapter.linear_out.weight");
    CHECK(a && b);
    if (a && b) {
        CHECK(a->rows == 3 && a->cols == 16);
        CHECK(b->rows == 40 && b->cols == 3); /* [gate; up] of ffn 20 */
        /* xavier normal: std sqrt(2 / (16 + 3)) = 0.32 */
        double sq = 0.0;
        for (int64_t e = 0; e < a->numel; e++)
            sq += (double)m.params[a->offset + e] * m.params[a->offset + e];
        double std = sqrt(sq / (double)a->numel);
        CHECK(std > 0.16 && std < 0.5);
    }
    tr_model_free(&m);
    /* Only the targeted layers get adapters. */
    make(&m, lora_spec(1u << TR_LORA_PROJ));
    CHECK(tr_model_find_param(
        &m, "decoder.layers.0.self_attention.linear_proj.adapter.linear_in.weight"));
    CHECK(!tr_model_find_param(
        &m, "decoder.layers.0.self_attention.linear_qkv.adapter.linear_in.weight"));
    tr_model_free(&m);
}

static void test_zero_b_is_base_model(void) {
    tr_model base, lora;
    make(&base, base_spec());
    make(&lora, lora_spec(all_targets));
    int32_t ids[N], tg[N];
    batch(ids, tg);
    float lb = loss_of(&base, ids, tg), ll = loss_of(&lora, ids, tg);
    CHECK(memcmp(&lb, &ll, sizeof lb) == 0);
    /* and a non-zero B changes it (the adapter is in the forward) */
    perturb_b(&lora);
    CHECK(loss_of(&lora, ids, tg) != lb);
    tr_model_free(&base);
    tr_model_free(&lora);
}

static void check_adapter_gradients(tr_model_spec s) {
    tr_model m;
    make(&m, s);
    m.dropout_seed = 99;
    m.dropout_round = 3;
    perturb_b(&m);
    int32_t ids[N], tg[N];
    batch(ids, tg);
    memset(m.grads, 0, (size_t)m.n_params * sizeof(float));
    loss_of(&m, ids, tg);
    CHECK_INT_EQ(tr_model_backward(&m, 1.0f), TR_OK);
    float *dir = malloc((size_t)m.n_params * sizeof *dir);
    srand(3);
    int checked = 0;
    for (int t = 0; t < m.n_info; t++) {
        const tr_param_info *p = &m.info[t];
        const float *g = m.grads + p->offset;
        if (p->frozen) {
            for (int64_t e = 0; e < p->numel; e++) CHECK(g[e] == 0.0f);
            continue;
        }
        float *w = m.params + p->offset;
        double analytic = 0.0;
        for (int64_t e = 0; e < p->numel; e++) {
            /* Along the gradient's own signs: no cancellation between elements, so the
             * difference quotient is well above fp32 noise; a wrong magnitude or sign shows. */
            dir[e] = g[e] > 0.0f ? 1.0f : g[e] < 0.0f ? -1.0f : ((rand() & 1) ? 1.0f : -1.0f);
            analytic += (double)dir[e] * g[e];
        }
        double h = 1e-3;
        for (int64_t e = 0; e < p->numel; e++) w[e] += (float)h * dir[e];
        double lp = loss_of(&m, ids, tg);
        for (int64_t e = 0; e < p->numel; e++) w[e] -= 2.0f * (float)h * dir[e];
        double lm = loss_of(&m, ids, tg);
        for (int64_t e = 0; e < p->numel; e++) w[e] += (float)h * dir[e];
        double numeric = (lp - lm) / (2.0 * h);
        double tol = 3e-2 * fabs(numeric) + 2e-4;
        if (!(fabs(numeric - analytic) <= tol))
            fprintf(stderr, "  %s: analytic %.6g numeric %.6g\n", p->name, analytic, numeric);
        CHECK(fabs(numeric - analytic) <= tol);
        CHECK(fabs(analytic) > 1e-6);
        checked++;
    }
    CHECK_INT_EQ(checked, 16);
    free(dir);
    tr_model_free(&m);
}

static void test_adapter_gradients(void) {
    check_adapter_gradients(lora_spec(all_targets));
}

/* Dropout on the adapters' input: the same mask in forward and backward (central differences
 * hold with it), a mask per microbatch, none in evaluation. */
static void test_adapter_dropout(void) {
    tr_model_spec s = lora_spec(all_targets);
    s.lora_dropout = 0.25f;
    check_adapter_gradients(s);
    tr_model drop, plain;
    make(&drop, s);
    make(&plain, lora_spec(all_targets));
    perturb_b(&drop);
    perturb_b(&plain);
    drop.dropout_seed = 99;
    int32_t ids[N], tg[N];
    batch(ids, tg);
    float base = loss_of(&plain, ids, tg);
    drop.dropout_round = 1;
    float l1 = loss_of(&drop, ids, tg);
    drop.dropout_round = 2;
    float l2 = loss_of(&drop, ids, tg);
    CHECK(l1 != base && l2 != base && l1 != l2);
    drop.training = 0;
    float eval = loss_of(&drop, ids, tg);
    CHECK(memcmp(&eval, &base, sizeof eval) == 0);
    tr_model_free(&drop);
    tr_model_free(&plain);
}

/* A few AdamW steps with weight decay; then the merged model against the adapter model. */
static void train_and_merge_into(tr_model_spec spec, tr_model_spec base) {
    tr_model m, merged;
    make(&m, spec);
    float *before = malloc((size_t)m.n_params * sizeof(float));
    memcpy(before, m.params, (size_t)m.n_params * sizeof(float));
    tr_optimizer opt;
    tr_optimizer_spec os = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
    CHECK_INT_EQ(tr_optimizer_create(&opt, &os, m.ops, m.info, m.n_info, m.n_params), TR_OK);
    int32_t ids[N], tg[N];
    batch(ids, tg);
    float first = 0.0f, last = 0.0f;
    for (int step = 0; step < 5; step++) {
        memset(m.grads, 0, (size_t)m.n_params * sizeof(float));
        last = loss_of(&m, ids, tg);
        if (step == 0) first = last;
        CHECK_INT_EQ(tr_model_backward(&m, 1.0f), TR_OK);
        CHECK_INT_EQ(tr_optimizer_step(&opt, m.params, m.grads, 1e-2, 0.1), TR_OK);
    }
    CHECK(last < first);
    for (int i = 0; i < m.n_info; i++) {
        const tr_param_info *p = &m.info[i];
        bool same =
            memcmp(before + p->offset, m.params + p->offset, (size_t)p->numel * sizeof(float)) == 0;
        /* base bitwise unchanged; every adapter moved (B away from zero, A by its gradient) */
        CHECK(same == p->frozen);
    }
    make(&merged, base);
    CHECK_INT_EQ(tr_lora_merge(&m, &merged), TR_OK);
    float la = loss_of(&m, ids, tg), lm = loss_of(&merged, ids, tg);
    CHECK_CLOSE(la, lm, 1e-5, 0.0);
    double worst = 0.0, scale = 0.0;
    for (int i = 0; i < N; i++)
        if (tg[i] >= 0) {
            worst = fmax(worst, fabs((double)m.losses[i] - merged.losses[i]));
            scale = fmax(scale, fabs((double)m.losses[i]));
        }
    CHECK(worst <= 1e-5 * scale);
    /* The merge matters: the base weights alone give another loss. */
    tr_model plain;
    make(&plain, base);
    CHECK(fabs(loss_of(&plain, ids, tg) - la) > 1e-4);
    tr_model_free(&plain);
    tr_model_free(&merged);
    tr_optimizer_free(&opt);
    free(before);
    tr_model_free(&m);
}

static void train_and_merge(tr_model_spec spec) {
    train_and_merge_into(spec, base_spec());
}

static void test_training_and_merge(void) {
    train_and_merge(lora_spec(all_targets));
}

/* An MoE layer (layer 1: 4 experts top-2 and a gated shared expert) whose experts' fc1 / fc2
 * carry adapters (runtime/moe/lora.c): the router and the experts stay frozen, every adapter
 * trains, and the merge folds each expert's adapter into its weight. */
static tr_model_spec moe_base_spec(void) {
    tr_model_spec s = base_spec();
    s.moe = (tr_moe_spec){.experts = 4,
                          .topk = 2,
                          .ffn = 12,
                          .shared_ffn = 8,
                          .shared_gate = true,
                          .topk_scale = 1.0f,
                          .ep_size = 1};
    s.moe.layers[0] = 2u;
    return s;
}

static void test_moe_training_and_merge(void) {
    tr_model_spec s = moe_base_spec();
    tr_model_spec l = lora_spec(all_targets);
    l.moe = s.moe;
    l.moe.lora_rank = l.lora_rank;
    l.moe.lora_fc1 = l.moe.lora_fc2 = true;
    l.moe.lora_scale = l.lora_scale;
    tr_model m;
    make(&m, l);
    const char *names[] = {
        "decoder.layers.1.mlp.experts.local_experts.3.linear_fc2.adapter.linear_out.weight",
        "decoder.layers.1.mlp.shared_experts.linear_fc1.adapter.linear_in.weight",
        "decoder.layers.0.mlp.linear_fc1.adapter.linear_in.weight"};
    for (int i = 0; i < 3; i++) {
        const tr_param_info *p = tr_model_find_param(&m, names[i]);
        CHECK(p && !p->frozen);
    }
    CHECK(tr_model_find_param(&m, "decoder.layers.1.mlp.router.weight")->frozen);
    tr_model_free(&m);
    train_and_merge_into(l, s);
}

static tr_model_spec dora_spec(void) {
    tr_model_spec s = lora_spec(all_targets);
    s.lora_dora = 1;
    return s;
}

/* DoRA (runtime/model/adapters/dora.h): magnitudes start as the row norms of W, so the model starts
 * as the base model (to rounding: m / ||V|| is 1 within an ulp); a magnitude is a trainable,
 * undecayed vector that follows its layer's output; training moves the adapters and
 * magnitudes only, and the merge (rows of V scaled by m / ||V||) computes the same forward. */
static void test_dora(void) {
    tr_model base, m;
    make(&base, base_spec());
    make(&m, dora_spec());
    const tr_param_info *mag = tr_model_find_param(&m, "decoder.layers.1.mlp.linear_fc1.adapter."
                                                       "weight_magnitude");
    CHECK(mag && mag->numel == 2 * 20 && mag->no_decay && !mag->frozen);
    if (mag) {
        const tr_param_info *w = tr_model_find_param(&m, "decoder.layers.1.mlp.linear_fc1.weight");
        double sq = 0.0;
        for (int c = 0; c < w->cols; c++) {
            double x = m.params[w->offset + 7 * w->cols + c];
            sq += x * x;
        }
        CHECK_CLOSE(m.params[mag->offset + 7], sqrt(sq), 1e-6, 0.0);
    }
    int32_t ids[N], tg[N];
    batch(ids, tg);
    CHECK_CLOSE(loss_of(&m, ids, tg), loss_of(&base, ids, tg), 1e-6, 0.0);
    tr_model_free(&base);
    tr_model_free(&m);
    train_and_merge(dora_spec());
}

TR_TEST_MAIN(TR_TEST(test_layout_and_init), TR_TEST(test_zero_b_is_base_model),
             TR_TEST(test_adapter_gradients), TR_TEST(test_adapter_dropout),
             TR_TEST(test_training_and_merge), TR_TEST(test_moe_training_and_merge),
             TR_TEST(test_dora))
