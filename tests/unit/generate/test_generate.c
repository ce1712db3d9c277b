/* The KV cache (runtime/generate/decode.c) against the model's own forward: fed one token at a
 * time, each step's logits equal the full-sequence forward's logits at that position
 * (tr_model_forward, which recomputes the whole prefix), for the Llama, Qwen3 and GPT-2
 * fixtures; a prompt run in one step equals it run token by token. The sampler: greedy is the
 * argmax (lowest id on ties), top-k 1 and a tiny top-p are greedy, and draws follow the
 * softmax (frequencies within 0.015 of the probabilities over 20000 draws). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/validate.h"
#include "runtime/generate/generate.h"
#include "runtime/hf/hf.h"
#include "tests/unit/harness.h"

#define FIX TRESTLE_SOURCE_DIR "/tests/reference/fixtures/"

static bool load(const char *dir, tr_model *m) {
    tr_diags d = {0};
    tr_config c;
    tr_model_spec s;
    tr_world w = {1, 1};
    bool ok = tr_config_init(&c, &d) == TR_OK && tr_hf_config_apply(&c, dir, false, &d) == TR_OK &&
              tr_config_finalize(&c, &w, &d) == TR_OK &&
              tr_model_spec_from_config(&c, &s, &d) == TR_OK;
    tr_config_free(&c);
    tr_hf_weights wt;
    ok = ok && tr_hf_weights_open(&wt, dir, &d) == TR_OK;
    ok = ok && tr_model_create(m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1) == TR_OK;
    ok = ok && tr_hf_import(m, &wt, &d) == TR_OK;
    if (ok) tr_hf_weights_close(&wt);
    tr_diags_free(&d);
    return ok;
}

static void cache_equals_forward(const char *dir) {
    tr_model m;
    CHECK(load(dir, &m));
    int T = m.full.seq, V = m.full.vocab_real ? m.full.vocab_real : m.full.vocab;
    int32_t ids[64], tg[64];
    for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 37 + 11) % V), tg[t] = 0;
    float loss = 0;
    CHECK_INT_EQ(tr_model_forward(&m, ids, tg, &loss), TR_OK);
    float *full = malloc((size_t)T * m.full.vocab * sizeof *full);
    memcpy(full, m.logits, (size_t)T * m.full.vocab * sizeof *full);
    tr_gen g;
    CHECK_INT_EQ(tr_gen_init(&g, &m, T), TR_OK);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        CHECK_INT_EQ(tr_gen_step(&g, ids + t, 1), TR_OK);
        double num = 0, den = 0;
        for (int v = 0; v < V; v++) {
            double e = (double)g.logits[v] - full[(int64_t)t * m.full.vocab + v];
            num += e * e;
            den +=
                (double)full[(int64_t)t * m.full.vocab + v] * full[(int64_t)t * m.full.vocab + v];
        }
        if (sqrt(num / den) > worst) worst = sqrt(num / den);
    }
    CHECK_INT_EQ(tr_gen_step(&g, ids, 1), TR_ERR_INVALID); /* the cache is full */
    tr_gen_free(&g);
    /* The whole prompt in one step: the last position's logits again. */
    CHECK_INT_EQ(tr_gen_init(&g, &m, T), TR_OK);
    CHECK_INT_EQ(tr_gen_step(&g, ids, T), TR_OK);
    double num = 0, den = 0;
    for (int v = 0; v < V; v++) {
        double e = (double)g.logits[v] - full[(int64_t)(T - 1) * m.full.vocab + v];
        num += e * e;
        den += (double)g.logits[v] * g.logits[v];
    }
    printf("  %s: cached steps vs the full forward, worst relative error %.3g; one prefill "
           "%.3g\n",
           dir, worst, sqrt(num / den));
    CHECK(worst <= 1e-5);
    CHECK(sqrt(num / den) <= 1e-5);
    tr_gen_free(&g);
    free(full);
    tr_model_free(&m);
}

static void test_cache_equals_forward(void) {
    cache_equals_forward(FIX "hf_llama");
    cache_equals_forward(FIX "hf_qwen3");
    cache_equals_forward(FIX "hf_gpt2");
}

static void test_sampler(void) {
    float l[4] = {0.5f, 2.0f, 2.0f, -1.0f};
    uint64_t rng = 1;
    tr_sample_params greedy = {0};
    CHECK_INT_EQ(tr_gen_sample(l, 4, &greedy, &rng), 1);
    tr_sample_params k1 = {.temperature = 3.0f, .top_k = 1, .top_p = 1.0f};
    tr_sample_params p0 = {.temperature = 3.0f, .top_p = 1e-6f};
    for (int i = 0; i < 50; i++) {
        CHECK_INT_EQ(tr_gen_sample(l, 4, &k1, &rng), 1);
        CHECK_INT_EQ(tr_gen_sample(l, 4, &p0, &rng), 1);
    }
    /* p = softmax(l / T) over the kept ids: top-k 3 leaves id 3 out; top-p 0.75 keeps the two
     * ids at 2.0 (one holds 0.44 of the mass, two 0.88). */
    tr_sample_params all = {.temperature = 1.0f, .top_p = 1.0f};
    tr_sample_params top3 = {.temperature = 1.0f, .top_k = 3, .top_p = 1.0f};
    tr_sample_params nucleus = {.temperature = 1.0f, .top_p = 0.75f};
    const tr_sample_params *ps[] = {&all, &top3, &nucleus};
    for (int c = 0; c < 3; c++) {
        double z = 0, w[4];
        for (int i = 0; i < 4; i++) {
            bool kept = c == 0 || (c == 1 && i != 3) || (c == 2 && (i == 1 || i == 2));
            z += (w[i] = kept ? exp(l[i]) : 0.0);
        }
        int count[4] = {0};
        const int n = 20000;
        rng = 7;
        for (int i = 0; i < n; i++) count[tr_gen_sample(l, 4, ps[c], &rng)]++;
        for (int i = 0; i < 4; i++) CHECK(fabs((double)count[i] / n - w[i] / z) < 0.015);
    }
}

TR_TEST_MAIN(TR_TEST(test_cache_equals_forward), TR_TEST(test_sampler))
