/* Packed fine-tuning sequences in the model (tr_model_set_sequences) and the SFT dataset's view
 * of them (tr_sft_sample_to_sequence):
 *  - a pack of k documents gives each document the losses and, summed, the gradients of the k
 *    documents run one by one unpacked (positions from 0, plain causal attention), for RoPE and
 *    for learned positions; the same pack without its document mask does not (the check can
 *    fail);
 *  - tokens without a target contribute nothing: inputs after the last trained token leave the
 *    gradients bitwise unchanged, a changed target does not;
 *  - the dataset's sequences mask exactly the tokens whose loss mask is 0 and restart positions
 *    at every document. */
#include <stdlib.h>

#include "tests/unit/harness.h"
#include "runtime/data/tokenizer/tokenizer.h"
#include "runtime/data/dataset_sft.h"
#include "runtime/model/model.h"
#include "tests/unit/model/tiny_models.h"

enum { SEQ = 32, NDOC = 3 };
static const int doc_len[NDOC] = {9, 12, 7}; /* 28 tokens, then 4 of padding */
static const int prompt_len = 3;             /* untrained tokens at the start of each document */

static tr_model_spec gpt_spec(void) {
    return tr_test_gpt_spec(SEQ);
}

static tr_model_spec llama_spec(void) {
    return tr_test_llama_spec(SEQ);
}

/* The pack: documents back to back, each token's target its successor inside the document (the
 * last one a fixed end id), prompts untrained; the tail is a padding document. */
typedef struct pack {
    int32_t ids[SEQ], tgt[SEQ], doc[SEQ], pos[SEQ];
    int start[NDOC + 1];
} pack;

static void make_pack(pack *p, int vocab) {
    int t = 0;
    for (int k = 0; k < NDOC; k++) {
        p->start[k] = t;
        for (int j = 0; j < doc_len[k]; j++, t++) {
            p->ids[t] = (int32_t)(1 + (t * 7 + k * 5 + j * j) % (vocab - 1));
            p->doc[t] = p->start[k];
            p->pos[t] = j;
        }
        for (int j = 0; j < doc_len[k]; j++) {
            int at = p->start[k] + j;
            p->tgt[at] = j < prompt_len ? -1 : j + 1 < doc_len[k] ? p->ids[at + 1] : 0;
        }
    }
    p->start[NDOC] = t;
    for (int u = t; u < SEQ; u++) {
        p->ids[u] = 0;
        p->tgt[u] = -1;
        p->doc[u] = t;
        p->pos[u] = u - t;
    }
}

static int trained(const int32_t *tgt, int from, int to) {
    int n = 0;
    for (int t = from; t < to; t++) n += tgt[t] >= 0;
    return n;
}

/* Largest per-tensor ||a - b||_inf / ||a||_inf. */
static double grad_rel_err(const tr_model *m, const float *a, const float *b) {
    double worst = 0.0;
    for (int i = 0; i < m->n_info; i++) {
        double d = 0.0, s = 0.0;
        for (int64_t e = 0; e < m->info[i].numel; e++) {
            int64_t at = m->info[i].offset + e;
            d = fmax(d, fabs((double)a[at] - b[at]));
            s = fmax(s, fabs((double)a[at]));
        }
        if (s > 0.0)
            worst = fmax(worst, d / s);
        else if (d > 0.0)
            worst = INFINITY;
    }
    return worst;
}

/* Runs the pack (with or without its document mask), then each document alone, and returns the
 * largest relative error of the per-document losses (*loss_err) and of the gradients. */
static double compare(tr_model_spec s, bool doc_mask, double *loss_err) {
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&m, 11), TR_OK);
    pack p;
    make_pack(&p, s.vocab);
    int n_all = trained(p.tgt, 0, SEQ);
    float loss;
    CHECK_INT_EQ(tr_model_set_sequences(&m, doc_mask ? p.doc : NULL, p.pos), TR_OK);
    CHECK_INT_EQ(tr_model_forward(&m, p.ids, p.tgt, &loss), TR_OK);
    double packed_loss[NDOC];
    for (int k = 0; k < NDOC; k++) {
        double sum = 0.0;
        for (int t = p.start[k]; t < p.start[k + 1]; t++)
            if (p.tgt[t] >= 0) sum += m.losses[t];
        packed_loss[k] = sum / trained(p.tgt, p.start[k], p.start[k + 1]);
    }
    CHECK_INT_EQ(tr_model_backward(&m, 1.0f), TR_OK);
    float *packed_grad = malloc((size_t)m.n_params * sizeof(float));
    memcpy(packed_grad, m.grads, (size_t)m.n_params * sizeof(float));

    /* One by one: the pretraining path (no sequences set), padding untrained; each document's
     * share of the pack's mean is n_k / n_all. */
    CHECK_INT_EQ(tr_model_set_sequences(&m, NULL, NULL), TR_OK);
    memset(m.grads, 0, (size_t)m.n_params * sizeof(float));
    *loss_err = 0.0;
    for (int k = 0; k < NDOC; k++) {
        int32_t ids[SEQ] = {0}, tgt[SEQ];
        for (int t = 0; t < SEQ; t++) tgt[t] = -1;
        int len = p.start[k + 1] - p.start[k];
        memcpy(ids, p.ids + p.start[k], (size_t)len * sizeof *ids);
        memcpy(tgt, p.tgt + p.start[k], (size_t)len * sizeof *tgt);
        CHECK_INT_EQ(tr_model_forward(&m, ids, tgt, &loss), TR_OK);
        *loss_err = fmax(*loss_err, fabs(loss - packed_loss[k]) / fabs(packed_loss[k]));
        CHECK_INT_EQ(tr_model_backward(&m, (float)trained(tgt, 0, SEQ) / (float)n_all), TR_OK);
    }
    double err = grad_rel_err(&m, packed_grad, m.grads);
    free(packed_grad);
    tr_model_free(&m);
    return err;
}

static void check_pack_equivalence(tr_model_spec s) {
    double loss_err = 0.0, grad_err = compare(s, true, &loss_err);
    CHECK(loss_err <= 1e-5);
    CHECK(grad_err <= 1e-5);
    fprintf(stderr, "  packed vs one by one: loss %.2g, gradients %.2g\n", loss_err, grad_err);
    /* Without the document mask the later documents see the earlier ones. */
    grad_err = compare(s, false, &loss_err);
    CHECK(loss_err > 1e-3);
    CHECK(grad_err > 1e-3);
}

static void test_llama_pack_equals_documents(void) {
    check_pack_equivalence(llama_spec());
}

static void test_gpt_pack_equals_documents(void) {
    check_pack_equivalence(gpt_spec());
}

static float *grads_of(tr_model *m, const pack *p) {
    float loss;
    memset(m->grads, 0, (size_t)m->n_params * sizeof(float));
    CHECK_INT_EQ(tr_model_set_sequences(m, p->doc, p->pos), TR_OK);
    CHECK_INT_EQ(tr_model_forward(m, p->ids, p->tgt, &loss), TR_OK);
    CHECK_INT_EQ(tr_model_backward(m, 1.0f), TR_OK);
    float *g = malloc((size_t)m->n_params * sizeof(float));
    memcpy(g, m->grads, (size_t)m->n_params * sizeof(float));
    return g;
}

static void test_untrained_tokens_give_no_gradient(void) {
    tr_model_spec s = llama_spec();
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&m, 5), TR_OK);
    pack p;
    make_pack(&p, s.vocab);
    /* The last document trains nothing: its tokens (and the padding) only ever feed untrained
     * positions, since attention stays inside a document. */
    int last = p.start[NDOC - 1];
    for (int t = last; t < SEQ; t++) p.tgt[t] = -1;
    float *base = grads_of(&m, &p);
    pack q = p;
    for (int t = last; t < SEQ; t++) q.ids[t] = (int32_t)((q.ids[t] + 3) % s.vocab);
    float *same = grads_of(&m, &q);
    CHECK(memcmp(base, same, (size_t)m.n_params * sizeof(float)) == 0);
    /* Control: a changed target of a trained token changes the gradients. */
    q = p;
    int t0 = p.start[0] + prompt_len;
    q.tgt[t0] = (q.tgt[t0] + 1) % s.vocab;
    float *other = grads_of(&m, &q);
    CHECK(grad_rel_err(&m, base, other) > 1e-3);
    free(base);
    free(same);
    free(other);
    tr_model_free(&m);
}

static void test_bad_layout_rejected(void) {
    tr_model_spec s = llama_spec();
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1), TR_OK);
    pack p;
    make_pack(&p, s.vocab);
    p.pos[5] = SEQ; /* past the position table */
    CHECK_INT_EQ(tr_model_set_sequences(&m, p.doc, p.pos), TR_ERR_INVALID);
    make_pack(&p, s.vocab);
    p.doc[4] = 5; /* a document starting after its token */
    CHECK_INT_EQ(tr_model_set_sequences(&m, p.doc, p.pos), TR_ERR_INVALID);
    make_pack(&p, s.vocab);
    /* in range but inside another document: the attention trusts the model's doc_start */
    p.doc[p.start[1] + 1] = 1;
    CHECK_INT_EQ(tr_model_set_sequences(&m, p.doc, p.pos), TR_ERR_INVALID);
    tr_model_free(&m);
}

/* The shipped tiny set, packed into 64-token sequences as llama_tiny_sft does. */
static void test_dataset_sequences(void) {
    tr_tokenizer *tok = NULL;
    CHECK_INT_EQ(tr_tokenizer_byte_level(&tok), TR_OK);
    tr_diags d = {0};
    tr_sft_options so = {.prompt_column = "input",
                         .completion_column = "output",
                         .separator = " ",
                         .loss_mode = -1,
                         .max_records = -1};
    tr_sft_examples ex = {0};
    CHECK_INT_EQ(tr_sft_load_split(TRESTLE_SOURCE_DIR "/data/sft_tiny", 0, &so, tok, &ex, &d),
                 TR_OK);
    tr_sft_pack_options po = {.seq_length = 64, .pad_seq_to_mult = 1, .pad_id = 0};
    tr_sft_samples packs = {0};
    CHECK_INT_EQ(tr_sft_pack(&ex, &po, &packs, &d), TR_OK);
    CHECK(packs.n > 0 && packs.n < ex.n); /* several examples per pack */
    int32_t ids[64], tgt[64], doc[64], pos[64];
    tr_token_sequence seq = {ids, tgt, doc, pos};
    int64_t examples = 0, targets = 0;
    for (int64_t i = 0; i < packs.n; i++) {
        const tr_sft_sample *s = &packs.v[i];
        CHECK_INT_EQ(tr_sft_sample_to_sequence(s, 64, 0, &seq), TR_OK);
        examples += s->n_examples;
        CHECK_INT_EQ(doc[0], 0);
        for (int t = 0; t < 64; t++) {
            bool real = t < s->n;
            CHECK(doc[t] <= t && pos[t] == t - doc[t]);
            CHECK(t == 0 || doc[t] == t || doc[t] == doc[t - 1]);
            CHECK((tgt[t] >= 0) == (real && s->loss_mask[t] > 0.0f));
            if (tgt[t] >= 0) {
                targets++;
                CHECK_INT_EQ(tgt[t], s->labels[t]);
                /* a trained label is the next token of the same document (or its end id) */
                if (t + 1 < s->n && doc[t + 1] == doc[t]) CHECK_INT_EQ(tgt[t], ids[t + 1]);
            }
        }
    }
    CHECK_INT_EQ(examples, ex.n);
    CHECK(targets > 0);
    tr_sft_samples_free(&packs);
    tr_sft_examples_free(&ex);
    tr_diags_free(&d);
    tr_tokenizer_free(tok);
}

TR_TEST_MAIN(TR_TEST(test_llama_pack_equals_documents), TR_TEST(test_gpt_pack_equals_documents),
             TR_TEST(test_untrained_tokens_give_no_gradient), TR_TEST(test_bad_layout_rejected),
             TR_TEST(test_dataset_sequences))
