/* The model run as pipeline stages (tr_model_forward_part / tr_model_backward_part, what the
 * pipeline executor calls): cut into parts that hand activations and gradients over, it computes
 * exactly the whole model's loss and gradients; misuse is refused. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "runtime/model.h"

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

static void make_model(tr_model *m, const tr_model_spec *s) {
    CHECK_INT_EQ(tr_model_create(m, s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 2), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(m, 1234), TR_OK);
    m->training = 1;
    m->dropout_seed = 99;
    m->dropout_round = 3;
}

/* Stages: embedding alone, layers 0-1, layer 2, layer 3 with the loss. */
static void test_parts_equal_whole(void) {
    tr_model_spec s = spec();
    tr_model whole, staged;
    make_model(&whole, &s);
    make_model(&staged, &s);
    int n = 2 * s.seq;
    int32_t ids[16], tg[16];
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)((i * 7 + 3) % s.vocab);
        tg[i] = i % 5 == 2 ? -1 : (int32_t)((i * 5 + 1) % s.vocab);
    }
    float lw = 0, ls = -1;
    CHECK_INT_EQ(tr_model_forward(&whole, ids, tg, &lw), TR_OK);
    CHECK_INT_EQ(tr_model_backward(&whole, 0.5f), TR_OK);

    tr_model_part parts[4] = {
        {0, 0, true, false}, {0, 2, false, false}, {2, 1, false, false}, {3, 1, false, true}};
    size_t bytes = (size_t)n * (size_t)s.hidden * sizeof(float);
    float *x[4], *g[4];
    for (int p = 0; p < 4; p++) {
        x[p] = malloc(bytes);
        g[p] = malloc(bytes);
    }
    /* x[p] is stage p's output; forward of every stage, then backward in reverse. Each backward
     * recomputes its stage's forward first, as the executor does. */
    for (int p = 0; p < 4; p++)
        CHECK_INT_EQ(tr_model_forward_part(&staged, &parts[p], ids, tg, p ? x[p - 1] : NULL,
                                           p < 3 ? x[p] : NULL, &ls),
                     TR_OK);
    CHECK(ls == lw);
    for (int p = 3; p >= 0; p--) {
        float unused = 0;
        CHECK_INT_EQ(tr_model_forward_part(&staged, &parts[p], ids, tg, p ? x[p - 1] : NULL,
                                           p < 3 ? x[p] : NULL, &unused),
                     TR_OK);
        CHECK_INT_EQ(tr_model_backward_part(&staged, &parts[p], 0.5f, p < 3 ? g[p + 1] : NULL,
                                            p ? g[p] : NULL),
                     TR_OK);
    }
    CHECK_INT_EQ(whole.n_params, staged.n_params);
    CHECK(memcmp(whole.grads, staged.grads, (size_t)whole.n_params * sizeof(float)) == 0);
    /* Not vacuous: the gradients are not all zero. */
    int nonzero = 0;
    for (int64_t i = 0; i < whole.n_params; i++) nonzero += whole.grads[i] != 0.0f;
    CHECK(nonzero > 100);
    for (int p = 0; p < 4; p++) {
        free(x[p]);
        free(g[p]);
    }
    tr_model_free(&whole);
    tr_model_free(&staged);
}

static void test_bad_parts_refused(void) {
    tr_model_spec s = spec();
    tr_model m;
    make_model(&m, &s);
    int32_t ids[16] = {0}, tg[16] = {0};
    float buf[16 * 16], loss;
    tr_model_part emb_late = {1, 1, true, false}; /* the embedding feeds layer 0 only */
    CHECK_INT_EQ(tr_model_forward_part(&m, &emb_late, ids, tg, NULL, buf, &loss), TR_ERR_INVALID);
    tr_model_part loss_early = {0, 2, true, true}; /* the loss follows the last layer only */
    CHECK_INT_EQ(tr_model_forward_part(&m, &loss_early, ids, tg, NULL, NULL, &loss),
                 TR_ERR_INVALID);
    tr_model_part middle = {1, 2, false, false};
    CHECK_INT_EQ(tr_model_forward_part(&m, &middle, ids, tg, NULL, buf, &loss), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_forward_part(&m, &middle, ids, tg, buf, NULL, &loss), TR_ERR_INVALID);
    tr_model_part past_end = {3, 2, false, false};
    CHECK_INT_EQ(tr_model_forward_part(&m, &past_end, ids, tg, buf, buf, &loss), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_backward_part(&m, &middle, 1.0f, NULL, buf), TR_ERR_INVALID);
    CHECK_INT_EQ(tr_model_backward_part(&m, &middle, 1.0f, buf, NULL), TR_ERR_INVALID);
    /* The same middle part with its buffers runs. */
    memset(buf, 0, sizeof buf);
    float out[16 * 16];
    CHECK_INT_EQ(tr_model_forward_part(&m, &middle, ids, tg, buf, out, &loss), TR_OK);
    tr_model_free(&m);
}

TR_TEST_MAIN(TR_TEST(test_parts_equal_whole), TR_TEST(test_bad_parts_refused))
