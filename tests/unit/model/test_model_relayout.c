/* The model's hooks into data parallelism: moving the parameters to a gradient layout's offsets
 * keeps the model's function, and the per-parameter events fire once per parameter per pass, a
 * gradient's event only after its last contribution (the tied embedding after the embedding's
 * backward). */
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include "runtime/model/model.h"

static tr_model_spec tied_gpt(void) {
    return (tr_model_spec){.num_layers = 2,
                           .hidden = 16,
                           .heads = 4,
                           .groups = 2,
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
                           .embed_init_std = 0.5};
}

static void batch(int32_t *ids, int32_t *tg, int n, int vocab) {
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)((i * 7 + 3) % vocab);
        tg[i] = (int32_t)((i * 5 + 1) % vocab);
    }
}

typedef struct events {
    int before[64], ready[64];
    int order_word_emb; /* position of the word embedding among grad events */
    int n_ready, word_emb;
    const tr_model *m;
    /* Gradient of the first element of token 3's row at the event: token 3 is an input, so the
     * lookup's backward adds to it after the output layer's. */
    float word_grad_row3;
} events;

static tr_status on_before(void *ctx, int p) {
    ((events *)ctx)->before[p]++;
    return TR_OK;
}

static tr_status on_ready(void *ctx, int p) {
    events *e = ctx;
    e->ready[p]++;
    if (p == e->word_emb) {
        e->order_word_emb = e->n_ready;
        e->word_grad_row3 = e->m->grads[e->m->info[p].offset + 3 * e->m->spec.hidden];
    }
    e->n_ready++;
    return TR_OK;
}

static void test_relayout_keeps_loss_and_gradients(void) {
    tr_model_spec s = tied_gpt();
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 2), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&m, 7), TR_OK);
    int n = 2 * s.seq;
    int32_t ids[16], tg[16];
    batch(ids, tg, n, s.vocab);
    float before = 0.0f, after = 0.0f;
    CHECK_INT_EQ(tr_model_forward(&m, ids, tg, &before), TR_OK);
    CHECK_INT_EQ(tr_model_backward(&m, 1.0f), TR_OK);
    /* Reverse order with gaps, as a DP layout places them. */
    int64_t *off = malloc((size_t)m.n_info * sizeof *off), total = 0;
    float *grad_before = malloc((size_t)m.n_params * sizeof(float));
    memcpy(grad_before, m.grads, (size_t)m.n_params * sizeof(float));
    tr_param_info *old = malloc((size_t)m.n_info * sizeof *old);
    memcpy(old, m.info, (size_t)m.n_info * sizeof *old);
    for (int i = m.n_info - 1; i >= 0; i--) {
        off[i] = total + 3;
        total = off[i] + m.info[i].numel;
    }
    CHECK_INT_EQ(tr_model_relayout(&m, off, total), TR_OK);
    CHECK_INT_EQ(m.info[0].offset, off[0]);
    CHECK(m.p.word_emb == m.params + off[0]);
    CHECK(m.p.out_w == m.p.word_emb);
    CHECK_INT_EQ(tr_model_forward(&m, ids, tg, &after), TR_OK);
    CHECK(before == after);
    CHECK_INT_EQ(tr_model_backward(&m, 1.0f), TR_OK);
    int same = 1;
    for (int i = 0; i < m.n_info; i++)
        same &= memcmp(m.grads + off[i], grad_before + old[i].offset,
                       (size_t)old[i].numel * sizeof(float)) == 0;
    CHECK(same);
    /* An offset running past the buffer is refused and leaves the model as it was. */
    off[0] = total;
    CHECK_INT_EQ(tr_model_relayout(&m, off, total), TR_ERR_INVALID);
    CHECK(m.p.word_emb == m.params + m.info[0].offset);
    free(off);
    free(old);
    free(grad_before);
    tr_model_free(&m);
}

static void test_events_once_per_parameter(void) {
    tr_model_spec s = tied_gpt();
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&m, 3), TR_OK);
    CHECK(m.n_info <= 64);
    events e = {0};
    e.m = &m;
    e.word_emb = 0;
    m.hooks = (tr_model_hooks){.ctx = &e, .before_param = on_before, .grad_ready = on_ready};
    int32_t ids[8], tg[8];
    batch(ids, tg, s.seq, s.vocab);
    float loss;
    CHECK_INT_EQ(tr_model_forward(&m, ids, tg, &loss), TR_OK);
    CHECK_INT_EQ(tr_model_backward(&m, 1.0f), TR_OK);
    int all_once = 1;
    for (int i = 0; i < m.n_info; i++) all_once &= e.before[i] == 1 && e.ready[i] == 1;
    CHECK(all_once);
    /* The tied embedding is reported last, with its whole gradient (output layer + lookup). */
    CHECK_INT_EQ(e.order_word_emb, m.n_info - 1);
    CHECK(e.word_grad_row3 == m.grads[m.info[0].offset + 3 * s.hidden]);
    tr_model_free(&m);
}

static tr_status refuse(void *ctx, int p) {
    (void)ctx;
    (void)p;
    return TR_ERR_COMM;
}

static void test_hook_failure_propagates(void) {
    tr_model_spec s = tied_gpt();
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_OK);
    int32_t ids[8], tg[8];
    batch(ids, tg, s.seq, s.vocab);
    float loss;
    m.hooks = (tr_model_hooks){.before_param = refuse};
    CHECK_INT_EQ(tr_model_forward(&m, ids, tg, &loss), TR_ERR_COMM);
    m.hooks = (tr_model_hooks){.grad_ready = refuse};
    CHECK_INT_EQ(tr_model_forward(&m, ids, tg, &loss), TR_OK);
    CHECK_INT_EQ(tr_model_backward(&m, 1.0f), TR_ERR_COMM);
    tr_model_free(&m);
}

TR_TEST_MAIN(TR_TEST(test_relayout_keeps_loss_and_gradients),
             TR_TEST(test_events_once_per_parameter), TR_TEST(test_hook_failure_propagates))
