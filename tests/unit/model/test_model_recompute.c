/* Activation recomputation (runtime/model/recompute.c) against the run that keeps everything:
 * every loss and every gradient element bitwise equal, for full/uniform, full/block and
 * selective (each module alone and all together), with hidden dropout on, on a model of two
 * parts with two microbatches in flight each (a pipeline rank's view: the second microbatch's
 * forward overwrites the shared recompute sets before the first one's backward), for GPT and
 * Llama layers, bf16 with half-precision saved inputs, LoRA with adapter dropout and packed
 * sequences. Before every backward the shared recompute sets are filled with NaN, so a tensor
 * read there without being recomputed would show. The comparison can fail: a kept input changed
 * after its forward changes the gradients. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model/internal.h"
#include "tests/unit/harness.h"
#include "tests/unit/model/tiny_models.h"

enum { B = 2, T = 16, LAYERS = 5 };

typedef struct variant {
    const char *name;
    int recompute, block, layers;
    unsigned mods;
} variant;

#define MOD(x) (1u << TR_RC_MOD_##x)
static const variant variants[] = {
    {"full uniform 2", TR_RECOMPUTE_FULL, 0, 2, 0},
    {"full uniform 1", TR_RECOMPUTE_FULL, 0, 1, 0},
    {"full uniform 3", TR_RECOMPUTE_FULL, 0, 3, 0},
    {"full block 2", TR_RECOMPUTE_FULL, 1, 2, 0},
    {"selective core_attn", TR_RECOMPUTE_SELECTIVE, 0, 0, MOD(CORE_ATTN)},
    {"selective mlp", TR_RECOMPUTE_SELECTIVE, 0, 0, MOD(MLP)},
    {"selective layernorm", TR_RECOMPUTE_SELECTIVE, 0, 0, MOD(LAYERNORM)},
    {"selective all", TR_RECOMPUTE_SELECTIVE, 0, 0, MOD(CORE_ATTN) | MOD(MLP) | MOD(LAYERNORM)},
};
enum { N_VARIANTS = sizeof variants / sizeof variants[0] };

/* The two parts: layers 0-2 with the embedding, 3-4 with the loss, two slots each. */
static const tr_model_part parts[2] = {{0, 3, true, false, 2}, {3, 2, false, true, 2}};

typedef struct result {
    float loss[2];
    float *grads;
    int64_t n, act_numel;
} result;

static void batch(int32_t *ids, int32_t *tg, int32_t *doc, int32_t *pos, int vocab, int mb) {
    for (int i = 0; i < B * T; i++) {
        int t = i % T, start = t < 7 ? 0 : 7;
        ids[i] = (int32_t)((i * 7 + 3 + mb * 5) % vocab);
        tg[i] = i % 5 == 2 ? -1 : (int32_t)((i * 5 + 1 + mb) % vocab);
        doc[i] = start;
        pos[i] = t - start;
    }
}

/* The recompute sets lie in front of every slot's tensors (runtime/model/acts.c); layer 0 of
 * part 0 always keeps its input, so that is where they end. */
static void scribble_sets(tr_model *m) {
    if (!m->n_rc_sets) return;
    for (float *p = m->act_buf; p < m->slot_acts[0].layers[0].x_in; p++) *p = NAN;
}

/* Two microbatches in flight through both parts, then their backwards in order. perturb: after
 * the forwards, one element of microbatch 0's kept input of layer 0 moves (the negative case). */
static void run(tr_model_spec s, bool packed, bool perturb, result *r) {
    tr_model m;
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B, parts, 2),
                 TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&m, 5), TR_OK);
    m.training = 1;
    m.dropout_seed = 977;
    int64_t n = (int64_t)B * T * s.hidden;
    float *x[2], *dx = malloc((size_t)n * sizeof *dx);
    int32_t ids[B * T], tg[B * T], doc[B * T], pos[B * T];
    for (int mb = 0; mb < 2; mb++) {
        x[mb] = malloc((size_t)n * sizeof **x);
        batch(ids, tg, doc, pos, s.vocab, mb);
        if (packed) CHECK_INT_EQ(tr_model_set_sequences(&m, doc, pos), TR_OK);
        m.dropout_round = 40 + (uint64_t)mb;
        CHECK_INT_EQ(tr_model_forward_part(&m, 0, mb, ids, NULL, NULL, x[mb], NULL), TR_OK);
        CHECK_INT_EQ(tr_model_forward_part(&m, 1, mb, NULL, tg, x[mb], NULL, &r->loss[mb]), TR_OK);
    }
    if (perturb) m.slot_acts[0].layers[0].x_in[3] += 1e-3f;
    for (int mb = 0; mb < 2; mb++) {
        m.dropout_round = 99; /* the backward must take the slot's round, not this one */
        scribble_sets(&m);
        CHECK_INT_EQ(tr_model_backward_part(&m, 1, mb, 0.5f, NULL, dx), TR_OK);
        scribble_sets(&m);
        CHECK_INT_EQ(tr_model_backward_part(&m, 0, mb, 0.5f, dx, NULL), TR_OK);
    }
    r->n = m.n_params;
    r->act_numel = m.act_numel;
    r->grads = malloc((size_t)m.n_params * sizeof *r->grads);
    memcpy(r->grads, m.grads, (size_t)m.n_params * sizeof *r->grads);
    for (int mb = 0; mb < 2; mb++) free(x[mb]);
    free(dx);
    tr_model_free(&m);
}

/* Elements of the gradients (and losses) whose bits differ. */
static int64_t differing(const result *a, const result *b) {
    int64_t d = memcmp(a->loss, b->loss, sizeof a->loss) != 0;
    if (a->n != b->n) return -1;
    for (int64_t i = 0; i < a->n; i++) d += memcmp(&a->grads[i], &b->grads[i], sizeof(float)) != 0;
    return d;
}

static tr_model_spec with(tr_model_spec s, const variant *v) {
    s.recompute = v->recompute;
    s.recompute_block = v->block;
    s.recompute_layers = v->layers;
    s.recompute_modules = v->mods;
    return s;
}

static void check_family(const char *family, tr_model_spec s, bool packed) {
    s.num_layers = LAYERS;
    s.seq = T;
    s.hidden_dropout = 0.1f;
    result ref;
    run(s, packed, false, &ref);
    CHECK(isfinite(ref.loss[0]) && isfinite(ref.loss[1]));
    for (int k = 0; k < N_VARIANTS; k++) {
        result got;
        run(with(s, &variants[k]), packed, false, &got);
        int64_t d = differing(&got, &ref);
        printf("  %-10s %-20s: %lld of %lld gradient elements (and the losses) differ; "
               "activations %lld floats (without recomputation %lld)\n",
               family, variants[k].name, (long long)d, (long long)ref.n, (long long)got.act_numel,
               (long long)ref.act_numel);
        CHECK_INT_EQ(d, 0);
        CHECK(got.act_numel < ref.act_numel);
        free(got.grads);
    }
    free(ref.grads);
}

static void test_gpt(void) {
    check_family("gpt", tr_test_gpt_spec(T), false);
}

static void test_llama(void) {
    check_family("llama", tr_test_llama_spec(T), false);
}

static void test_llama_bf16_half_inputs(void) {
    tr_model_spec s = tr_test_llama_spec(T);
    s.lowp = TR_LOWP_BF16;
    check_family("llama bf16", s, false);
}

static void test_gpt_fp16_half_inputs(void) {
    tr_model_spec s = tr_test_gpt_spec(T);
    s.lowp = TR_LOWP_F16;
    check_family("gpt fp16", s, false);
}

static void test_llama_lora(void) {
    tr_model_spec s = tr_test_llama_spec(T);
    s.lora_rank = 3;
    s.lora_targets = (1u << TR_LORA_TARGETS) - 1;
    s.lora_scale = 2.0f;
    s.lora_a_init = TR_INIT_XAVIER;
    s.lora_b_init = TR_INIT_XAVIER; /* nonzero, so every adapter gradient is exercised */
    s.lora_dropout = 0.25f;
    check_family("llama lora", s, false);
}

static void test_llama_packed(void) {
    check_family("llama pack", tr_test_llama_spec(T), true);
}

/* What a slot keeps: full/uniform 1 keeps each layer's input alone, everything else in the one
 * shared set; selective core_attn shares only the attention output and lse. */
static void test_kept_tensors(void) {
    tr_model_spec s = tr_test_llama_spec(T);
    s.num_layers = LAYERS;
    tr_model m;
    s = with(s, &variants[1]);
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B, parts, 2),
                 TR_OK);
    CHECK_INT_EQ(m.n_rc_sets, 1);
    const tr_layer_acts *sc = &m.rc_sets[0];
    CHECK(sc->x_in == NULL && sc->q && sc->fc1 && sc->ln2_mean);
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < m.parts[k / 2].num_layers; i++) {
            const tr_layer_acts *a = &m.slot_acts[k].layers[i];
            CHECK(a->x_in && a->x_in != sc->x_in);
            CHECK(a->q == sc->q && a->attn == sc->attn && a->lse == sc->lse);
            CHECK(a->x_mid == sc->x_mid && a->fc1 == sc->fc1 && a->act == sc->act);
            CHECK(a->ln1 == sc->ln1 && a->ln2_rstd == sc->ln2_rstd);
        }
    tr_model_free(&m);
    s = with(s, &variants[4]);
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B, parts, 2),
                 TR_OK);
    CHECK_INT_EQ(m.n_rc_sets, 1);
    sc = &m.rc_sets[0];
    CHECK(sc->attn && sc->lse && !sc->q && !sc->x_in && !sc->fc1 && !sc->ln1);
    const tr_layer_acts *a = &m.slot_acts[1].layers[2];
    CHECK(a->attn == sc->attn && a->lse == sc->lse && a->q != NULL &&
          a->q != m.slot_acts[0].layers[2].q);
    tr_model_free(&m);
    /* full/uniform 3 over parts of 3 and 2 layers: three sets, the first without an input */
    s = with(s, &variants[2]);
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B, parts, 2),
                 TR_OK);
    CHECK_INT_EQ(m.n_rc_sets, 3);
    CHECK(!m.rc_sets[0].x_in && m.rc_sets[1].x_in && m.rc_sets[2].x_in);
    CHECK(m.slot_acts[2].layers[1].x_in == m.rc_sets[1].x_in);
    tr_model_free(&m);
}

/* The comparison can fail: microbatch 0's kept input of layer 0, changed after its forward,
 * reaches the gradients only through the recomputation. */
static void test_comparison_can_fail(void) {
    tr_model_spec s = tr_test_llama_spec(T);
    s.num_layers = LAYERS;
    s.hidden_dropout = 0.1f;
    result ref, got;
    run(s, false, false, &ref);
    run(with(s, &variants[0]), false, true, &got);
    int64_t d = differing(&got, &ref);
    printf("  kept input perturbed: %lld of %lld elements differ\n", (long long)d,
           (long long)ref.n);
    CHECK(d > 0);
    free(ref.grads);
    free(got.grads);
}

TR_TEST_MAIN(TR_TEST(test_gpt), TR_TEST(test_llama), TR_TEST(test_llama_bf16_half_inputs),
             TR_TEST(test_gpt_fp16_half_inputs), TR_TEST(test_llama_lora),
             TR_TEST(test_llama_packed), TR_TEST(test_kept_tensors),
             TR_TEST(test_comparison_can_fail))
