/* Offline packing invariants: no token lost or duplicated, no example split across packs,
 * boundaries (cu_seqlens) where the examples are, position ids restarting per example, padding
 * rules (pad_seq_to_mult, pad_to_max_length, pad_cu_seqlens), truncation of over-long examples. */
#include <stdlib.h>
#include <string.h>

#include "runtime/data/sft/pack.h"
#include "tests/unit/harness.h"

/* Example i has ids i*1000 + 0..len-1 so every token names its example and position; targets
 * alternate so the loss mask can be checked. */
static void make_examples(tr_sft_examples *ex, const int64_t *lens, int64_t n) {
    ex->v = calloc((size_t)n, sizeof *ex->v);
    ex->n = ex->cap = n;
    for (int64_t i = 0; i < n; i++) {
        ex->v[i].n = lens[i];
        ex->v[i].ids = malloc((size_t)(lens[i] ? lens[i] : 1) * sizeof(int64_t));
        ex->v[i].target = malloc((size_t)(lens[i] ? lens[i] : 1));
        for (int64_t k = 0; k < lens[i]; k++) {
            ex->v[i].ids[k] = i * 1000 + k;
            ex->v[i].target[k] = (uint8_t)(k % 2);
        }
    }
}

static void check_packs(const tr_sft_examples *ex, const tr_sft_samples *s,
                        const tr_sft_pack_options *o) {
    int64_t *seen = calloc((size_t)ex->n, sizeof *seen);
    for (int64_t p = 0; p < s->n; p++) {
        const tr_sft_sample *x = &s->v[p];
        CHECK(x->n <= o->seq_length);
        if (o->pad_to_max_length) CHECK_INT_EQ(x->n, o->seq_length);
        CHECK_INT_EQ(x->cu_seqlens[0], 0);
        CHECK_INT_EQ(x->cu_seqlens[x->n_seqs], x->n);
        for (int64_t k = 0; k < x->n_seqs; k++) CHECK(x->cu_seqlens[k] <= x->cu_seqlens[k + 1]);
        for (int64_t k = 0; k < x->n_examples; k++) {
            int64_t e = x->examples[k], b = x->cu_seqlens[k], end = x->cu_seqlens[k + 1];
            int64_t real = x->cu_seqlens_unpadded[k + 1] - b;
            int64_t want = ex->v[e].n - 1 < o->seq_length ? ex->v[e].n - 1 : o->seq_length;
            seen[e]++;
            CHECK_INT_EQ(real, want);                        /* truncated only past seq_length */
            CHECK_INT_EQ((end - b) % o->pad_seq_to_mult, 0); /* padded to the multiple */
            CHECK(end - b - real < o->pad_seq_to_mult);
            for (int64_t t = b; t < end; t++) {
                int64_t i = t - b;
                CHECK_INT_EQ(x->position_ids[t], i);
                if (i < real) {
                    CHECK_INT_EQ(x->tokens[t], e * 1000 + i);
                    CHECK_INT_EQ(x->labels[t], e * 1000 + i + 1);
                    CHECK_INT_EQ((int)x->loss_mask[t], (int)((i + 1) % 2));
                } else {
                    CHECK_INT_EQ(x->tokens[t], o->pad_id);
                    CHECK(x->loss_mask[t] == 0.0f);
                }
            }
        }
        for (int64_t t = x->cu_seqlens[x->n_examples]; t < x->n; t++) CHECK(x->loss_mask[t] == 0);
    }
    for (int64_t e = 0; e < ex->n; e++) CHECK_INT_EQ(seen[e], ex->v[e].n >= 2 ? 1 : 0);
    free(seen);
}

static void test_packing_invariants(void) {
    int64_t lens[40];
    unsigned r = 12345;
    for (int i = 0; i < 40; i++) {
        r = r * 1103515245u + 12345u;
        lens[i] = 1 + (int64_t)((r >> 16) % 70); /* some longer than seq_length, one of length 1 */
    }
    lens[3] = 1;
    tr_sft_examples ex;
    make_examples(&ex, lens, 40);
    tr_diags d;
    tr_diags_init(&d);
    tr_sft_pack_options variants[] = {
        {48, 1, false, false, 7},
        {48, 8, false, false, 7},
        {48, 4, true, false, 7},
        {48, 4, true, true, 7},
    };
    for (int v = 0; v < 4; v++) {
        tr_sft_samples s;
        CHECK_INT_EQ(tr_sft_pack(&ex, &variants[v], &s, &d), TR_OK);
        check_packs(&ex, &s, &variants[v]);
        int64_t used = 0;
        for (int64_t p = 0; p < s.n; p++) used += s.v[p].cu_seqlens[s.v[p].n_examples];
        /* First fit leaves no two packs that could have been merged. */
        for (int64_t p = 0; p < s.n; p++)
            for (int64_t q = p + 1; q < s.n; q++)
                CHECK(s.v[p].cu_seqlens[s.v[p].n_examples] + s.v[q].cu_seqlens[s.v[q].n_examples] >
                      variants[v].seq_length);
        CHECK(s.n * variants[v].seq_length >= used);
        if (variants[v].pad_cu_seqlens)
            for (int64_t p = 1; p < s.n; p++) CHECK_INT_EQ(s.v[p].n_seqs, s.v[0].n_seqs);
        tr_sft_samples_free(&s);
    }
    tr_sft_samples unpacked;
    CHECK_INT_EQ(tr_sft_unpacked(&ex, &variants[2], &unpacked, &d), TR_OK);
    CHECK_INT_EQ(unpacked.n, 39);
    check_packs(&ex, &unpacked, &variants[2]);
    for (int64_t p = 0; p < unpacked.n; p++) CHECK_INT_EQ(unpacked.v[p].n_examples, 1);
    tr_sft_samples_free(&unpacked);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_sft_examples_free(&ex);
    tr_diags_free(&d);
}

/* Hand-checked layout: lengths 5,3,4 ids (4,2,3 positions) in packs of 8 with pad multiple 2:
 * padded 4,2,4 -> FFD: 4 (ex0) and 4 (ex2) fill pack 0; ex1 opens pack 1. */
static void test_small_layout_by_hand(void) {
    int64_t lens[3] = {5, 3, 4};
    tr_sft_examples ex;
    make_examples(&ex, lens, 3);
    tr_diags d;
    tr_diags_init(&d);
    tr_sft_pack_options o = {8, 2, true, true, -5};
    tr_sft_samples s;
    CHECK_INT_EQ(tr_sft_pack(&ex, &o, &s, &d), TR_OK);
    CHECK_INT_EQ(s.n, 2);
    if (s.n == 2) {
        CHECK_INT_EQ(s.v[0].n_examples, 2);
        CHECK_INT_EQ(s.v[0].examples[0], 0);
        CHECK_INT_EQ(s.v[0].examples[1], 2);
        int64_t cu0[] = {0, 4, 8, 8};
        int64_t cu0u[] = {0, 4, 7, 7};
        CHECK_INT_EQ(s.v[0].n_seqs, 3);
        for (int k = 0; k < 4; k++) CHECK_INT_EQ(s.v[0].cu_seqlens[k], cu0[k]);
        for (int k = 0; k < 4; k++) CHECK_INT_EQ(s.v[0].cu_seqlens_unpadded[k], cu0u[k]);
        int64_t cu1[] = {0, 2, 8, 8}; /* example 1, then the padding tail as its own segment */
        for (int k = 0; k < 4; k++) CHECK_INT_EQ(s.v[1].cu_seqlens[k], cu1[k]);
        CHECK_INT_EQ(s.v[0].tokens[7], -5);
        int32_t ds[8], want0[8] = {0, 0, 0, 0, 4, 4, 4, 4}, want1[8] = {0, 0, 2, 2, 2, 2, 2, 2};
        tr_sft_doc_start(&s.v[0], ds);
        for (int t = 0; t < 8; t++) CHECK_INT_EQ(ds[t], want0[t]);
        tr_sft_doc_start(&s.v[1], ds);
        for (int t = 0; t < 8; t++) CHECK_INT_EQ(ds[t], want1[t]);
        CHECK_INT_EQ(s.v[1].position_ids[2], 0);
    }
    tr_sft_samples_free(&s);
    tr_sft_examples_free(&ex);
    tr_diags_free(&d);
}

static void test_bad_options(void) {
    tr_sft_examples ex = {0};
    tr_diags d;
    tr_diags_init(&d);
    tr_sft_samples s;
    tr_sft_pack_options cu = {8, 1, false, true, 0};
    CHECK_INT_EQ(tr_sft_pack(&ex, &cu, &s, &d), TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.sft_pad_cu_seqlens") != NULL);
    tr_sft_pack_options mult = {10, 4, false, false, 0};
    CHECK_INT_EQ(tr_sft_pack(&ex, &mult, &s, &d), TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.sft_pad_mult") != NULL);
    tr_sft_pack_options zero = {0, 1, false, false, 0};
    CHECK_INT_EQ(tr_sft_pack(&ex, &zero, &s, &d), TR_ERR_INVALID);
    CHECK(tr_diags_find(&d, "data.sft_seq_length") != NULL);
    tr_sft_pack_options ok = {8, 1, false, false, 0};
    CHECK_INT_EQ(tr_sft_pack(&ex, &ok, &s, &d), TR_OK); /* nothing to pack is fine */
    CHECK_INT_EQ(s.n, 0);
    tr_sft_samples_free(&s);
    tr_diags_free(&d);
}

static void test_options_from_config(void) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(tr_config_init(&c, &d), TR_OK);
    c.dataset.seq_length = 64;
    c.dataset.pad_seq_to_mult = 4;
    c.dataset.pad_to_max_length = true;
    tr_sft_pack_options o;
    tr_sft_pack_options_from_config(&c.dataset, 3, &o);
    CHECK_INT_EQ(o.seq_length, 64);
    CHECK_INT_EQ(o.pad_seq_to_mult, 4);
    CHECK(o.pad_to_max_length && !o.pad_cu_seqlens);
    CHECK_INT_EQ(o.pad_id, 3);
    c.dataset.packed_sequence_size = 128; /* the packing spec wins over seq_length */
    tr_sft_pack_options_from_config(&c.dataset, 3, &o);
    CHECK_INT_EQ(o.seq_length, 128);
    CHECK_INT_EQ(tr_sft_pack_check(&o, &d), TR_OK);
    tr_config_free(&c);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_options_from_config), TR_TEST(test_packing_invariants),
             TR_TEST(test_small_layout_by_hand), TR_TEST(test_bad_options))
