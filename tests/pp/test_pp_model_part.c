/* The model built as pipeline stages (tr_model_create_parts, tr_model_forward_part /
 * tr_model_backward_part, what the pipeline executor calls): stages that hand activations and
 * gradients over, each holding only its own tensors and activation sets, compute the whole
 * model's loss and gradients; misuse is refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "runtime/model/model.h"

static tr_model_spec spec(void) {
    return (tr_model_spec){.num_layers = 4,
                           .hidden = 16,
                           .heads = 4,
                           .groups = 4,
                           .head_dim = 4,
                           .ffn = 24,
                           .vocab = 29,
                           .seq = 8,
                           .layernorm = 1,
                           .learned_pos = 1,
                           .bias_linear = 1,
                           .bias_qkv = 1,
                           .tied = 1,
                           .eps = 1e-5f,
                           .init_std = 0.3,
                           .embed_init_std = 0.5,
                           .hidden_dropout = 0.1f};
}

static void init_model(tr_model *m) {
    CHECK_INT_EQ(tr_model_init_weights(m, 1234), TR_OK);
    m->training = 1;
    m->dropout_seed = 99;
}

static const tr_param_info *find(const tr_model *m, const char *name, bool tied_copy) {
    for (int i = 0; i < m->n_info; i++)
        if (strcmp(m->info[i].name, name) == 0 && m->info[i].tied_copy == tied_copy)
            return &m->info[i];
    return NULL;
}

/* Four stage models, as four pipeline ranks hold them: the embedding alone, layers 0-1, layer 2,
 * layer 3 with the loss. Two microbatches are forwarded through every stage before either is
 * backwarded (each stage keeps two activation sets), as a pipeline warmup does; the whole model
 * runs them one after the other. Same loss, same gradients: bitwise, except the tied embedding,
 * whose two contributions the stages sum in another order. */
static void test_stages_equal_whole(void) {
    tr_model_spec s = spec();
    enum { STAGES = 4, MB = 2 };
    tr_model whole, st[STAGES];
    CHECK_INT_EQ(tr_model_create(&whole, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 2), TR_OK);
    init_model(&whole);
    tr_model_part parts[STAGES] = {{0, 0, true, false, MB},
                                   {0, 2, false, false, MB},
                                   {2, 1, false, false, MB},
                                   {3, 1, false, true, MB}};
    for (int p = 0; p < STAGES; p++) {
        CHECK_INT_EQ(
            tr_model_create_parts(&st[p], &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 2, &parts[p], 1),
            TR_OK);
        init_model(&st[p]);
    }
    int n = 2 * s.seq;
    int32_t ids[MB][16], tg[MB][16];
    for (int mb = 0; mb < MB; mb++)
        for (int i = 0; i < n; i++) {
            ids[mb][i] = (int32_t)((i * 7 + 3 + mb) % s.vocab);
            tg[mb][i] = i % 5 == 2 ? -1 : (int32_t)((i * 5 + 1 + 2 * mb) % s.vocab);
        }
    float lw[MB], ls[MB];
    for (int mb = 0; mb < MB; mb++) {
        whole.dropout_round = 3 + (uint64_t)mb;
        CHECK_INT_EQ(tr_model_forward(&whole, ids[mb], tg[mb], &lw[mb]), TR_OK);
        CHECK_INT_EQ(tr_model_backward(&whole, 0.5f), TR_OK);
    }

    size_t bytes = (size_t)n * (size_t)s.hidden * sizeof(float);
    float *x[MB][STAGES], *g[MB][STAGES];
    for (int mb = 0; mb < MB; mb++)
        for (int p = 0; p < STAGES; p++) {
            x[mb][p] = malloc(bytes);
            g[mb][p] = malloc(bytes);
        }
    for (int mb = 0; mb < MB; mb++)
        for (int p = 0; p < STAGES; p++) {
            st[p].dropout_round = 3 + (uint64_t)mb;
            CHECK_INT_EQ(tr_model_forward_part(&st[p], 0, mb, ids[mb], tg[mb],
                                               p ? x[mb][p - 1] : NULL, p < 3 ? x[mb][p] : NULL,
                                               &ls[mb]),
                         TR_OK);
        }
    for (int mb = 0; mb < MB; mb++) CHECK(ls[mb] == lw[mb]);
    /* The slot, not whatever ran last, supplies the dropout masks and the activations. */
    for (int p = 0; p < STAGES; p++) st[p].dropout_round = 77;
    for (int mb = 0; mb < MB; mb++)
        for (int p = STAGES - 1; p >= 0; p--)
            CHECK_INT_EQ(tr_model_backward_part(&st[p], 0, mb, 0.5f, p < 3 ? g[mb][p + 1] : NULL,
                                                p ? g[mb][p] : NULL),
                         TR_OK);

    /* Every tensor of the whole model lives on exactly one stage (the tied copy besides),
     * with the same values and gradients. */
    int64_t nonzero = 0;
    for (int i = 0; i < whole.n_info; i++) {
        const tr_param_info *w = &whole.info[i];
        const tr_param_info *on = NULL;
        int holder = -1, holders = 0;
        for (int p = 0; p < STAGES; p++) {
            const tr_param_info *q = find(&st[p], w->name, false);
            if (q) {
                on = q;
                holder = p;
                holders++;
            }
        }
        CHECK_INT_EQ(holders, 1);
        if (!on) continue;
        const float *wp = whole.params + w->offset, *wg = whole.grads + w->offset;
        CHECK(memcmp(wp, st[holder].params + on->offset, (size_t)w->numel * sizeof(float)) == 0);
        const float *sg = st[holder].grads + on->offset;
        if (strcmp(w->name, "embedding.word_embeddings.weight") != 0) {
            CHECK(memcmp(wg, sg, (size_t)w->numel * sizeof(float)) == 0);
        } else {
            const tr_param_info *copy = find(&st[3], w->name, true);
            CHECK(copy != NULL);
            if (!copy) continue;
            CHECK(memcmp(wp, st[3].params + copy->offset, (size_t)w->numel * sizeof(float)) == 0);
            double worst = 0.0, scale = 0.0;
            for (int64_t e = 0; e < w->numel; e++) {
                double sum = (double)sg[e] + (double)st[3].grads[copy->offset + e];
                if (fabs(sum - wg[e]) > worst) worst = fabs(sum - wg[e]);
                if (fabs(wg[e]) > scale) scale = fabs(wg[e]);
            }
            CHECK(worst <= 1e-5 * scale);
        }
        for (int64_t e = 0; e < w->numel; e++) nonzero += wg[e] != 0.0f;
    }
    CHECK(nonzero > 100); /* not vacuous */
    /* Nothing else: a stage's tensors are its own layers (global numbers), and only the last
     * stage of a tied model has a copy. */
    CHECK_INT_EQ(st[2].n_info, 12);
    for (int i = 0; i < st[2].n_info; i++)
        CHECK(strncmp(st[2].info[i].name, "decoder.layers.2.", 17) == 0);
    for (int p = 0; p < 3; p++)
        for (int i = 0; i < st[p].n_info; i++) CHECK(!st[p].info[i].tied_copy);
    CHECK(st[3].has_tied_copy && !st[0].has_tied_copy);
    for (int l = 0; l < s.num_layers; l++) {
        CHECK_INT_EQ(tr_model_layer_slots(&st[1], l), l < 2 ? MB : 0);
        CHECK_INT_EQ(tr_model_layer_slots(&whole, l), 1);
    }
    for (int mb = 0; mb < MB; mb++)
        for (int p = 0; p < STAGES; p++) {
            free(x[mb][p]);
            free(g[mb][p]);
        }
    for (int p = 0; p < STAGES; p++) tr_model_free(&st[p]);
    tr_model_free(&whole);
}

static void test_bad_parts_refused(void) {
    tr_model_spec s = spec();
    tr_model m;
    tr_tp_shard one = {0, 1};
    tr_model_part emb_late = {1, 1, true, false, 1};  /* the embedding feeds layer 0 only */
    tr_model_part loss_early = {0, 2, true, true, 1}; /* the loss follows the last layer only */
    tr_model_part past_end = {3, 2, false, false, 1};
    tr_model_part overlap[2] = {{0, 2, false, false, 1}, {1, 2, false, false, 1}};
    tr_model_part two_emb[2] = {{0, 0, true, false, 1}, {0, 1, true, false, 1}};
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, one, tr_ops_cpu(), 2, &emb_late, 1), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, one, tr_ops_cpu(), 2, &loss_early, 1),
                 TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, one, tr_ops_cpu(), 2, &past_end, 1), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, one, tr_ops_cpu(), 2, overlap, 2), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, one, tr_ops_cpu(), 2, two_emb, 2), TR_ERR_INVALID);

    tr_model_part middle = {1, 2, false, false, 2};
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, one, tr_ops_cpu(), 2, &middle, 1), TR_OK);
    init_model(&m);
    int32_t ids[16] = {0}, tg[16] = {0};
    float buf[16 * 16], out[16 * 16], loss;
    memset(buf, 0, sizeof buf);
    /* A stage is not a whole model; parts and slots must exist; a middle stage needs its input
     * and output buffers. */
    CHECK_INT_EQ(tr_model_forward(&m, ids, tg, &loss), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_backward(&m, 1.0f), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_forward_part(&m, 1, 0, ids, tg, buf, out, &loss), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_forward_part(&m, 0, 2, ids, tg, buf, out, &loss), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_forward_part(&m, 0, 0, ids, tg, NULL, out, &loss), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_forward_part(&m, 0, 0, ids, tg, buf, NULL, &loss), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_backward_part(&m, 0, 0, 1.0f, NULL, buf), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_backward_part(&m, 0, 0, 1.0f, buf, NULL), TR_ERR_INVALID);
    /* With its buffers it runs, and holds only layers 1 and 2. */
    CHECK_INT_EQ(tr_model_forward_part(&m, 0, 1, ids, tg, buf, out, &loss), TR_OK);
    CHECK_INT_EQ(tr_model_backward_part(&m, 0, 1, 1.0f, out, buf), TR_OK);
    CHECK(tr_model_find_param(&m, "decoder.layers.0.input_layernorm.weight") == NULL);
    CHECK(tr_model_find_param(&m, "decoder.layers.2.input_layernorm.weight") != NULL);
    CHECK(tr_model_find_param(&m, "embedding.word_embeddings.weight") == NULL);
    tr_model_free(&m);
}

TR_TEST_MAIN(TR_TEST(test_stages_equal_whole), TR_TEST(test_bad_parts_refused))
