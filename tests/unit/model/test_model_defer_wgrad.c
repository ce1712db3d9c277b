/* Deferred output-layer weight gradients (spec.defer_wgrad, runtime/model/defer_wgrad.c) against
 * the same model computing them in every backward:
 *  - right after each microbatch's backward the output weight's gradient is absent (still zero)
 *    while every other gradient and the input gradient sent to the previous stage are bitwise the
 *    reference's, and the output weight is not reported ready; after tr_model_drain_wgrad it is
 *    bitwise the reference's, reported once, after the head's other tensors;
 *  - with room for fewer microbatches than run (Megatron's wgrad_deferral_limit) the later ones
 *    are computed at once, and the drain completes the sum (another order: relative 1e-6);
 *  - fp32, bf16 with half-precision saved inputs, bf16 with fp32 saved inputs, for a tied GPT
 *    (a last stage with its tied copy) and an untied Llama holding embedding and loss;
 *  - the kept tensors are counted in the model's activations, exactly as sized here; a frozen
 *    output layer (LoRA) defers nothing, and a tied embedding in the same model is refused;
 *  - the check can fail: without the drain the gradient differs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model/internal.h"
#include "tests/unit/harness.h"
#include "tests/unit/model/tiny_models.h"

enum { B = 2, T = 8, MB = 3 };

typedef struct events {
    const tr_model *m;
    int seq, out_w_at, out_w_count, final_at; /* order of the grad_ready calls */
} events;

static int out_w_param(const tr_model *m) {
    for (int i = 0; i < m->n_info; i++)
        if (m->grads + m->info[i].offset == m->g.out_w) return i;
    return -1;
}

static tr_status on_ready(void *ctx, int p) {
    events *e = ctx;
    e->seq++;
    if (p == out_w_param(e->m)) {
        e->out_w_at = e->seq;
        e->out_w_count++;
    } else if (e->m->grads + e->m->info[p].offset == e->m->g.final_w) {
        e->final_at = e->seq;
    }
    return TR_OK;
}

static void batch(int32_t *ids, int32_t *tg, int vocab, int mb) {
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int32_t)((i * 7 + 3 + mb * 5) % vocab);
        tg[i] = i % 5 == 2 ? -1 : (int32_t)((i * 5 + 1 + mb) % vocab);
    }
}

/* Elements of a and b [n] whose bits differ. */
static int64_t differ(const float *a, const float *b, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

static bool all_zero(const float *a, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] != 0.0f) return false;
    return true;
}

typedef struct pair {
    tr_model ref, def;
    tr_model_part part;
    float *x, *dx_ref, *dx_def;
    int64_t out_n;
} pair;

static int64_t out_numel(const tr_model *m) {
    int p = out_w_param(m);
    return p < 0 ? 0 : m->info[p].numel;
}

/* The loss part alone (layer 1 of 2, fed an input; a tied GPT then holds its tied copy), or the
 * whole model (the untied Llama). */
static void make(pair *p, tr_model_spec s, bool whole, int defer) {
    memset(p, 0, sizeof *p);
    p->part = whole ? (tr_model_part){0, s.num_layers, true, true, 1}
                    : (tr_model_part){1, 1, false, true, 1};
    tr_model_spec sd = s;
    sd.defer_wgrad = defer;
    CHECK_INT_EQ(
        tr_model_create_parts(&p->ref, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B, &p->part, 1),
        TR_OK);
    CHECK_INT_EQ(
        tr_model_create_parts(&p->def, &sd, (tr_tp_shard){0, 1}, tr_ops_cpu(), B, &p->part, 1),
        TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&p->ref, 7), TR_OK);
    CHECK_INT_EQ(tr_model_init_weights(&p->def, 7), TR_OK);
    int64_t n = (int64_t)B * T * s.hidden;
    p->x = malloc((size_t)n * sizeof *p->x);
    p->dx_ref = malloc((size_t)n * sizeof *p->dx_ref);
    p->dx_def = malloc((size_t)n * sizeof *p->dx_def);
    srand(3);
    for (int64_t i = 0; i < n; i++) p->x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    p->out_n = out_numel(&p->def);
}

static void free_pair(pair *p) {
    tr_model_free(&p->ref);
    tr_model_free(&p->def);
    free(p->x);
    free(p->dx_ref);
    free(p->dx_def);
}

static void step(tr_model *m, const pair *p, int mb, float *dx) {
    int32_t ids[B * T], tg[B * T];
    batch(ids, tg, m->spec.vocab, mb);
    bool whole = p->part.has_embedding;
    float loss = 0.0f;
    CHECK_INT_EQ(
        tr_model_forward_part(m, 0, 0, whole ? ids : NULL, tg, whole ? NULL : p->x, NULL, &loss),
        TR_OK);
    CHECK_INT_EQ(tr_model_backward_part(m, 0, 0, 1.0f / MB, NULL, whole ? NULL : dx), TR_OK);
}

/* Every microbatch deferred: absent after each backward, bitwise after the drain. */
static void check_all_deferred(const char *name, tr_model_spec s, bool whole) {
    pair p;
    make(&p, s, whole, MB);
    events ev = {.m = &p.def};
    p.def.hooks = (tr_model_hooks){.ctx = &ev, .grad_ready = on_ready};
    CHECK(p.out_n > 0);
    CHECK_INT_EQ(p.def.defer_cap, MB);
    int64_t n = (int64_t)B * T * s.hidden, ng = p.def.n_params;
    for (int mb = 0; mb < MB; mb++) {
        step(&p.ref, &p, mb, p.dx_ref);
        step(&p.def, &p, mb, p.dx_def);
        CHECK(all_zero(p.def.g.out_w, p.out_n));
        CHECK(!all_zero(p.ref.g.out_w, p.out_n));
        /* Everything else, and the input gradient, bitwise: only dW waits. */
        int64_t off = p.def.g.out_w - p.def.grads;
        CHECK_INT_EQ(differ(p.def.grads, p.ref.grads, off), 0);
        CHECK_INT_EQ(
            differ(p.def.grads + off + p.out_n, p.ref.grads + off + p.out_n, ng - off - p.out_n),
            0);
        if (!whole) CHECK_INT_EQ(differ(p.dx_def, p.dx_ref, n), 0);
        CHECK_INT_EQ(ev.out_w_count, 0);
        CHECK_INT_EQ(p.def.defer_n, mb + 1);
    }
    int final_at = ev.final_at;
    CHECK_INT_EQ(tr_model_drain_wgrad(&p.def), TR_OK);
    int64_t d = differ(p.def.grads, p.ref.grads, ng);
    printf("%s: after the drain %lld of %lld gradient elements differ bitwise\n", name,
           (long long)d, (long long)ng);
    CHECK_INT_EQ(d, 0);
    CHECK_INT_EQ(ev.out_w_count, 1);
    CHECK(ev.out_w_at > final_at && final_at > 0);
    CHECK_INT_EQ(p.def.defer_n, 0);
    free_pair(&p);
}

/* Room for two of three microbatches: the third computes at once, the drain adds the others. */
static void check_limited(const char *name, tr_model_spec s, bool whole) {
    pair p;
    make(&p, s, whole, 2);
    for (int mb = 0; mb < MB; mb++) {
        step(&p.ref, &p, mb, p.dx_ref);
        step(&p.def, &p, mb, p.dx_def);
        CHECK(all_zero(p.def.g.out_w, p.out_n) == (mb < 2));
    }
    CHECK(differ(p.def.g.out_w, p.ref.g.out_w, p.out_n) > 0); /* the undrained sum is short */
    CHECK_INT_EQ(tr_model_drain_wgrad(&p.def), TR_OK);
    double diff = 0.0, scale = 0.0;
    for (int64_t i = 0; i < p.out_n; i++) {
        double e = fabs((double)p.def.g.out_w[i] - (double)p.ref.g.out_w[i]);
        if (e > diff) diff = e;
        if (fabs((double)p.ref.g.out_w[i]) > scale) scale = fabs((double)p.ref.g.out_w[i]);
    }
    printf("%s, 2 of 3 deferred: output weight gradient relative error %.2e\n", name, diff / scale);
    CHECK(diff <= 1e-6 * scale);
    free_pair(&p);
}

/* The kept tensors are activations: cap x (the head's input, half in mixed precision unless
 * fp32 inputs are kept, and the logits gradient, half in mixed precision), aligned buffers. */
static void check_memory(tr_model_spec s, bool whole) {
    pair p;
    make(&p, s, whole, MB);
    int64_t a = 16, nx = (int64_t)B * T * s.hidden, ndy = (int64_t)B * T * s.vocab;
    bool half_x = s.lowp && !s.no_half_acts;
    int64_t x = half_x ? (nx + 1) / 2 : nx, dy = s.lowp ? (ndy + 1) / 2 : ndy;
    int64_t want = MB * ((x + a - 1) / a * a + (dy + a - 1) / a * a);
    CHECK_INT_EQ(p.def.act_numel - p.ref.act_numel, want);
    free_pair(&p);
}

static void check_family(const char *name, tr_model_spec s, bool whole) {
    char label[96];
    struct {
        const char *what;
        int lowp, no_half;
    } prec[] = {{"fp32", 0, 0}, {"bf16", TR_LOWP_BF16, 0}, {"bf16 fp32 inputs", TR_LOWP_BF16, 1}};
    for (size_t k = 0; k < sizeof prec / sizeof prec[0]; k++) {
        tr_model_spec v = s;
        v.lowp = prec[k].lowp;
        v.no_half_acts = prec[k].no_half;
        snprintf(label, sizeof label, "%s %s", name, prec[k].what);
        check_all_deferred(label, v, whole);
        check_limited(label, v, whole);
        check_memory(v, whole);
    }
}

static void test_gpt_last_stage(void) {
    check_family("gpt (tied copy)", tr_test_gpt_spec(T), false);
}

static void test_llama_whole(void) {
    check_family("llama (untied)", tr_test_llama_spec(T), true);
}

/* The negative case: a model that is never drained ends the step without the gradient. */
static void test_undrained_differs(void) {
    pair p;
    make(&p, tr_test_gpt_spec(T), false, MB);
    for (int mb = 0; mb < MB; mb++) {
        step(&p.ref, &p, mb, p.dx_ref);
        step(&p.def, &p, mb, p.dx_def);
    }
    int64_t d = differ(p.def.grads, p.ref.grads, p.def.n_params);
    printf("  never drained: %lld of %lld gradient elements differ (the output weight has %lld)\n",
           (long long)d, (long long)p.def.n_params, (long long)p.out_n);
    CHECK(d > 0 && d <= p.out_n);
    free_pair(&p);
}

/* LoRA freezes the output layer: nothing to defer, nothing kept, the drain is a no-op. */
static void test_lora_frozen(void) {
    tr_model_spec s = tr_test_llama_spec(T);
    s.lora_rank = 2;
    s.lora_targets = (1u << TR_LORA_TARGETS) - 1;
    s.lora_scale = 1.0f;
    s.lora_a_init = TR_INIT_XAVIER;
    s.lora_b_init = TR_INIT_ZERO;
    pair p;
    make(&p, s, true, MB);
    CHECK_INT_EQ(p.def.defer_cap, 0);
    CHECK_INT_EQ(p.def.act_numel, p.ref.act_numel);
    step(&p.ref, &p, 0, NULL);
    step(&p.def, &p, 0, NULL);
    CHECK_INT_EQ(tr_model_drain_wgrad(&p.def), TR_OK);
    CHECK_INT_EQ(differ(p.def.grads, p.ref.grads, p.def.n_params), 0);
    free_pair(&p);
}

/* A tied embedding in the same model would be reported final before the drain adds to it. */
static void test_tied_in_one_model_refused(void) {
    tr_model_spec s = tr_test_gpt_spec(T);
    s.defer_wgrad = 2;
    tr_model m;
    tr_model_part whole = {0, s.num_layers, true, true, 1};
    CHECK_INT_EQ(tr_model_create_parts(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), B, &whole, 1),
                 TR_ERR_INVALID);
}

TR_TEST_MAIN(TR_TEST(test_gpt_last_stage), TR_TEST(test_llama_whole),
             TR_TEST(test_undrained_differs), TR_TEST(test_lora_frozen),
             TR_TEST(test_tied_in_one_model_refused))
