/* Multi-token prediction through the whole model. Finite differences: the objective the
 * backward differentiates is the main loss plus mtp_scale times each depth's loss (read back
 * with tr_model_mtp_losses); for each parameter tensor its directional derivative along a
 * random +-1 direction (central differences) must match the analytic gradient on it, for a
 * Llama with two depths (and dropout, ignored targets, a loss scale), an MLA model with one, and
 * an MLA model over DeepSeek-like MoE layers whose depth is an MoE layer too (Megatron builds it
 * from the last decoder layer's spec): the objective then adds each MoE layer's balancing losses
 * (the depth's included), times their coefficients.
 * Semantics: depth d predicts the target d positions later (the first d targets of a row never
 * reach it, the last d positions are not trained), the reported loss is the main model's, and
 * the tensors carry Megatron's names. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "runtime/model/model.h"
#include "tests/unit/model/tiny_models.h"

static tr_model_spec mtp_spec(int depths) {
    tr_model_spec s = tr_test_llama_spec(8);
    s.mtp_layers = depths;
    s.mtp_scale = 0.7f / (float)depths;
    return s;
}

static tr_model_spec mla_mtp_spec(void) {
    tr_model_spec s = mtp_spec(1);
    s.groups = s.heads;
    s.rope = 0;
    s.head_dim = 5;
    s.tied = 1;
    s.mla = (tr_mla_spec){.on = 1,
                          .q_lora_rank = 6,
                          .kv_lora_rank = 7,
                          .qk_dim = 4,
                          .rope_dim = 4,
                          .v_dim = 5,
                          .norms = 1,
                          .rope_base = 10000.0};
    return s;
}

/* DeepSeek's routing (runtime/moe/): a dense first layer, sigmoid scores with expert bias,
 * group-limited top-k, scaled probabilities, a shared expert, the sequence aux loss and z-loss. */
static tr_model_spec mla_moe_mtp_spec(void) {
    tr_model_spec s = mla_mtp_spec();
    s.moe = (tr_moe_spec){.experts = 4,
                          .topk = 2,
                          .ffn = 6,
                          .shared_ffn = 8,
                          .score = TR_MOE_SIGMOID,
                          .groups = 2,
                          .group_topk = 1,
                          .topk_scale = 2.5f,
                          .expert_bias = true,
                          .bias_rate = 1e-3f,
                          .balance = TR_MOE_LB_SEQ_AUX,
                          .aux_coeff = 0.05f,
                          .z_coeff = 0.01f};
    s.moe.layers[0] = 1u << 1; /* layer 1 and, after it, the depth's */
    return s;
}

/* main loss + mtp_scale * sum of the depths' losses (+ the MoE layers' balancing losses); *main
 * the main one. */
static double objective(tr_model *m, const int32_t *ids, const int32_t *tg, double *main,
                        float *depth) {
    float l = 0;
    CHECK_INT_EQ(tr_model_forward(m, ids, tg, &l), TR_OK);
    CHECK_INT_EQ(tr_model_mtp_losses(m, depth), TR_OK);
    double lb = 0.0, z = 0.0;
    int n_moe = 0;
    tr_model_moe_stats(m, &lb, &z, &n_moe);
    double total = l + m->spec.moe.aux_coeff * lb + m->spec.moe.z_coeff * z;
    for (int d = 0; d < m->spec.mtp_layers; d++) total += (double)m->spec.mtp_scale * depth[d];
    if (main) *main = l;
    return total;
}

static void batch(int32_t *ids, int32_t *tg, int n, int vocab) {
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)((i * 7 + 3) % vocab);
        tg[i] = (int32_t)((i * 5 + 1) % vocab);
        if (i % 5 == 2) tg[i] = -1;
    }
}

static void check_fd(tr_model_spec s, int nb, float loss_scale) {
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), nb), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&m, 13), TR_OK);
    for (int t = 0; t < m.n_info; t++) /* norms away from one */
        if (strstr(m.info[t].name, "norm"))
            for (int64_t e = 0; e < m.info[t].numel; e++)
                m.params[m.info[t].offset + e] += 0.3f * (float)((e * 7 + t) % 11 - 5) / 5.0f;
    tr_model_params_changed(&m);
    int n = nb * s.seq;
    int32_t *ids = malloc((size_t)n * sizeof *ids), *tg = malloc((size_t)n * sizeof *tg);
    batch(ids, tg, n, s.vocab);
    m.dropout_seed = 3;
    float depth[4];
    objective(&m, ids, tg, NULL, depth);
    CHECK_INT_EQ(tr_model_backward(&m, loss_scale), TR_OK);
    float *dir = malloc((size_t)m.n_params * sizeof *dir);
    srand(5);
    int mtp_tensors = 0;
    for (int t = 0; t < m.n_info; t++) {
        const tr_param_info *p = &m.info[t];
        if (p->frozen) continue; /* the expert bias: a buffer the token counts update */
        float *w = m.params + p->offset;
        const float *g = m.grads + p->offset;
        double analytic = 0.0, h = 2e-3;
        for (int64_t e = 0; e < p->numel; e++) {
            dir[e] = (rand() & 1) ? 1.0f : -1.0f;
            analytic += (double)dir[e] * g[e];
        }
        for (int64_t e = 0; e < p->numel; e++) w[e] += (float)h * dir[e];
        tr_model_params_changed(&m);
        double lp = objective(&m, ids, tg, NULL, depth);
        for (int64_t e = 0; e < p->numel; e++) w[e] -= 2.0f * (float)h * dir[e];
        tr_model_params_changed(&m);
        double lm = objective(&m, ids, tg, NULL, depth);
        for (int64_t e = 0; e < p->numel; e++) w[e] += (float)h * dir[e];
        tr_model_params_changed(&m);
        double numeric = loss_scale * (lp - lm) / (2.0 * h);
        double tol = 3e-2 * fabs(numeric) + 2e-4 * loss_scale;
        if (!(fabs(numeric - analytic) <= tol))
            fprintf(stderr, "  %s: analytic %.6g numeric %.6g\n", p->name, analytic, numeric);
        CHECK(fabs(numeric - analytic) <= tol);
        CHECK(fabs(analytic) > 1e-7);
        mtp_tensors += strncmp(p->name, "mtp.layers.", 11) == 0;
    }
    CHECK(mtp_tensors >= 4 * s.mtp_layers);
    free(dir);
    free(ids);
    free(tg);
    tr_model_free(&m);
}

static void test_llama_two_depths_fd(void) {
    tr_model_spec s = mtp_spec(2);
    s.hidden_dropout = 0.1f;
    s.attention_dropout = 0.1f;
    check_fd(s, 2, 0.5f);
}

static void test_mla_one_depth_fd(void) {
    check_fd(mla_mtp_spec(), 1, 1.0f);
}

static void test_mla_moe_one_depth_fd(void) {
    tr_model_spec s = mla_moe_mtp_spec();
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 2), TR_OK);
    const char *moe[] = {
        "mtp.layers.0.mtp_model_layer.mlp.router.weight",
        "mtp.layers.0.mtp_model_layer.mlp.router.expert_bias",
        "mtp.layers.0.mtp_model_layer.mlp.experts.local_experts.3.linear_fc2.weight",
        "mtp.layers.0.mtp_model_layer.mlp.shared_experts.linear_fc1.weight",
        "decoder.layers.1.mlp.router.weight",
        "decoder.layers.0.mlp.linear_fc1.weight"};
    for (size_t k = 0; k < sizeof moe / sizeof *moe; k++)
        CHECK(tr_model_find_param(&m, moe[k]) != NULL);
    CHECK(tr_model_find_param(&m, "mtp.layers.0.mtp_model_layer.mlp.linear_fc1.weight") == NULL);
    CHECK(m.moe && m.moe[s.num_layers] != NULL);
    tr_model_free(&m);
    check_fd(s, 2, 0.5f);
}

/* Depth 1 reads target t + 1 at position t: the first target of each row never reaches it, the
 * second does; the main loss is the one without MTP. */
static void test_semantics(void) {
    tr_model_spec s = mtp_spec(1), plain = s;
    plain.mtp_layers = 0;
    tr_model m, p;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 2), TR_OK);
    CHECK_INT_EQ(tr_model_create(&p, &plain, (tr_tp_shard){0, 1}, tr_ops_cpu(), 2), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&m, 1), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&p, 1), TR_OK);
    for (int i = 0; i < p.n_info; i++) { /* the main model's tensors are shared by name */
        const tr_param_info *q = tr_model_find_param(&m, p.info[i].name);
        CHECK(q != NULL);
        if (q) memcpy(p.params + p.info[i].offset, m.params + q->offset, q->numel * sizeof(float));
    }
    tr_model_params_changed(&p);
    int n = 2 * s.seq;
    int32_t ids[16], tg[16];
    batch(ids, tg, n, s.vocab);
    double main;
    float d0[1], d1[1], d2[1];
    objective(&m, ids, tg, &main, d0);
    float lp = 0;
    CHECK_INT_EQ(tr_model_forward(&p, ids, tg, &lp), TR_OK);
    CHECK(main == (double)lp); /* the reported loss is the main model's, bit for bit */
    tg[0] = (tg[0] + 1) % s.vocab, tg[s.seq] = (tg[s.seq] + 3) % s.vocab;
    objective(&m, ids, tg, NULL, d1);
    CHECK(d1[0] == d0[0]);
    tg[1] = (tg[1] + 1) % s.vocab;
    objective(&m, ids, tg, NULL, d2);
    CHECK(d2[0] != d0[0]);
    const char *names[] = {"mtp.layers.0.enorm.weight",
                           "mtp.layers.0.hnorm.weight",
                           "mtp.layers.0.eh_proj.weight",
                           "mtp.layers.0.mtp_model_layer.self_attention.linear_qkv.weight",
                           "mtp.layers.0.mtp_model_layer.mlp.linear_fc2.weight",
                           "mtp.layers.0.final_layernorm.weight"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        CHECK(tr_model_find_param(&m, names[k]) != NULL);
    const tr_param_info *eh = tr_model_find_param(&m, "mtp.layers.0.eh_proj.weight");
    if (eh) CHECK(eh->rows == s.hidden && eh->cols == 2 * s.hidden);
    tr_model_free(&m);
    tr_model_free(&p);
    int32_t src[6] = {1, 2, 3, 4, 5, 6}, dst[6];
    CHECK_INT_EQ(tr_mtp_shift(src, dst, 2, 3, 1, -1), 4);
    CHECK(dst[0] == 2 && dst[1] == 3 && dst[2] == -1 && dst[3] == 5 && dst[5] == -1);
}

/* Under PP the depths live on the loss stage, which reads its copy of the word embedding: the
 * tied output layer's weight, or (untied) a copy of its own next to the output layer. */
static void test_pipeline_stages(void) {
    tr_model_spec s = mtp_spec(2);
    s.tied = 1;
    tr_model m;
    tr_model_part first = {0, 1, true, false, 1}, last = {1, 1, false, true, 1};
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1, &first, 1),
                 TR_OK);
    CHECK(tr_model_find_param(&m, "mtp.layers.0.eh_proj.weight") == NULL);
    tr_model_free(&m);
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1, &last, 1),
                 TR_OK);
    CHECK(tr_model_find_param(&m, "mtp.layers.1.eh_proj.weight") != NULL);
    CHECK(m.has_tied_copy && m.p.mtp_emb != NULL);
    tr_model_free(&m);
    s.tied = 0;
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1, &last, 1),
                 TR_OK);
    const tr_param_info *copy = tr_model_find_param(&m, "embedding.word_embeddings.weight");
    const tr_param_info *out = tr_model_find_param(&m, "output_layer.weight");
    CHECK(copy && copy->tied_copy && out && !out->tied_copy && m.has_tied_copy);
    CHECK(copy && out && m.p.mtp_emb == m.params + copy->offset &&
          m.p.out_w == m.params + out->offset && m.p.word_emb == NULL);
    tr_model_free(&m);
    /* the first stage's embedding is the one the lookup there reads, no copy */
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1, &first, 1),
                 TR_OK);
    copy = tr_model_find_param(&m, "embedding.word_embeddings.weight");
    CHECK(copy && !copy->tied_copy && !m.has_tied_copy);
    tr_model_free(&m);
}

typedef struct events {
    int before[64], ready[64], copy;
    const tr_model *m;
    float copy_grad; /* the copy's gradient (sum of its squares) when it was reported ready */
} events;

static tr_status on_before(void *ctx, int p) {
    ((events *)ctx)->before[p]++;
    return TR_OK;
}

static float sum_sq(const float *x, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return (float)s;
}

static tr_status on_ready(void *ctx, int p) {
    events *e = ctx;
    e->ready[p]++;
    if (p == e->copy)
        e->copy_grad = sum_sq(e->m->grads + e->m->info[p].offset, e->m->info[p].numel);
    return TR_OK;
}

/* Untied under PP, the loss stage's copy of the word embedding is nobody's output layer: the
 * data-parallel hooks still hear of it once a pass, before the depths read it and after their
 * last contribution to its gradient (the overlapped parameter gather and gradient reduction
 * hang on these). */
static void test_untied_copy_events(void) {
    tr_model_spec s = mtp_spec(2);
    s.tied = 0;
    tr_model m;
    tr_model_part last = {1, 1, false, true, 1};
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1, &last, 1),
                 TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&m, 5), TR_OK);
    CHECK(m.n_info <= 64);
    const tr_param_info *copy = tr_model_find_param(&m, "embedding.word_embeddings.weight");
    CHECK(copy != NULL);
    if (!copy || m.n_info > 64) {
        tr_model_free(&m);
        return;
    }
    events e = {.copy = (int)(copy - m.info), .m = &m};
    m.hooks = (tr_model_hooks){.ctx = &e, .before_param = on_before, .grad_ready = on_ready};
    int n = s.seq;
    int32_t ids[64], tg[64];
    batch(ids, tg, n, s.vocab);
    float *x = malloc((size_t)n * s.hidden * sizeof(float));
    float *dx = malloc((size_t)n * s.hidden * sizeof(float));
    for (int i = 0; i < n * s.hidden; i++) x[i] = 0.1f * (float)((i * 13) % 7 - 3);
    CHECK_INT_EQ(tr_model_forward_part(&m, 0, 0, ids, tg, x, NULL, NULL), TR_OK);
    CHECK_INT_EQ(tr_model_backward_part(&m, 0, 0, 1.0f, NULL, dx), TR_OK);
    int all_once = 1;
    for (int i = 0; i < m.n_info; i++) all_once &= e.before[i] == 1 && e.ready[i] == 1;
    CHECK(all_once);
    float final = sum_sq(m.grads + copy->offset, copy->numel);
    CHECK(final > 0.0f && e.copy_grad == final);
    free(x);
    free(dx);
    tr_model_free(&m);
}

TR_TEST_MAIN(TR_TEST(test_pipeline_stages), TR_TEST(test_untied_copy_events),
             TR_TEST(test_llama_two_depths_fd), TR_TEST(test_mla_one_depth_fd),
             TR_TEST(test_mla_moe_one_depth_fd), TR_TEST(test_semantics))
