/* The MoE layer's backward against central finite differences of its forward (the oracle is the
 * forward alone): the router under each score function, with and without pre-softmax top-k,
 * group-limited, with expert bias and jitter; the balancing and z losses; the routed and shared
 * experts; capacity drops and padding. The objective is <y, R> + s (aux + z), the balancing
 * losses entering with the scale the backward is given. A perturbation that changes the routing
 * (a top-k decision or a capacity drop) is not differentiable there: such elements are skipped
 * and counted, and must stay rare. Also the losses' values against closed forms, the capacity
 * rule and the expert-bias update. LoRA on the experts (runtime/moe/lora.c): the adapters'
 * gradients and the input's, with and without dropout, while the frozen base gets none. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/moe/internal.h"
#include "tests/unit/harness.h"

enum { H = 8, B = 2, S = 3, T = B * S };

typedef struct fixture {
    tr_moe_spec s;
    tr_moe_dims d;
    tr_moe_layer *L;
    tr_moe_param *info;
    int n_info;
    int64_t *off, numel;
    float *p, *g;
    float x[T * H], r[T * H], y[T * H], dx[T * H];
    float aux_scale;
} fixture;

static uint64_t rng_state;
static float urand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

static tr_moe_spec base_spec(int experts, int topk, int ffn) {
    tr_moe_spec s = {.experts = experts, .topk = topk, .ffn = ffn, .topk_scale = 1.0f};
    s.layers[0] = 1;
    return s;
}

static void setup(fixture *f, tr_moe_spec s, bool swiglu, uint64_t seed) {
    memset(f, 0, sizeof *f);
    f->s = s;
    f->d = (tr_moe_dims){.hidden = H, .batch = B, .seq = S, .slots = 1, .swiglu = swiglu};
    f->n_info = tr_moe_param_count(&s);
    f->info = calloc((size_t)f->n_info, sizeof *f->info);
    f->off = calloc((size_t)f->n_info, sizeof *f->off);
    CHECK_INT_EQ(tr_moe_params(&s, 0, H, swiglu, f->info), TR_OK);
    for (int i = 0; i < f->n_info; i++) {
        f->off[i] = f->numel;
        f->numel += (int64_t)f->info[i].rows * f->info[i].cols;
    }
    f->p = calloc((size_t)f->numel, sizeof *f->p);
    f->g = calloc((size_t)f->numel, sizeof *f->g);
    rng_state = seed;
    for (int i = 0; i < f->n_info; i++) {
        /* the router's logits spread widely, so top-k decisions have margins */
        float scale = i == 0 ? 1.5f : 0.5f;
        for (int64_t e = 0; e < (int64_t)f->info[i].rows * f->info[i].cols; e++)
            f->p[f->off[i] + e] = scale * urand();
    }
    for (int i = 0; i < T * H; i++) {
        f->x[i] = urand();
        f->r[i] = urand();
    }
    f->aux_scale = 0.7f;
    CHECK_INT_EQ(tr_moe_create(&f->L, &s, &f->d, tr_ops_cpu()), TR_OK);
    tr_moe_bind(f->L, f->p, f->g, f->off);
}

static void teardown(fixture *f) {
    tr_moe_free(f->L);
    free(f->info);
    free(f->off);
    free(f->p);
    free(f->g);
}

/* The objective of one training forward (the global aux loss's counts restart first, so every
 * forward is the step's first microbatch). */
static double objective(fixture *f) {
    memset(f->L->ga_counts, 0, (size_t)f->L->E * sizeof(double));
    f->L->ga_steps = 0;
    memset(f->L->counts, 0, (size_t)f->L->E * sizeof(double));
    CHECK_INT_EQ(tr_moe_forward(f->L, 0, f->x, f->y, true, 42, 3), TR_OK);
    double lb, z, j = 0.0;
    int n;
    tr_moe_take_stats(f->L, &lb, &z, &n);
    for (int i = 0; i < T * H; i++) j += (double)f->y[i] * f->r[i];
    return j + f->aux_scale * (f->s.aux_coeff * lb + f->s.z_coeff * z);
}

/* The routing of the last forward, to tell a non-differentiable perturbation. */
typedef struct routing {
    int32_t idx[T * 8], pos[T * 8];
} routing;

static void take_routing(const fixture *f, routing *r) {
    memcpy(r->idx, f->L->st[0].idx, (size_t)T * f->s.topk * sizeof(int32_t));
    memcpy(r->pos, f->L->st[0].pos, (size_t)T * f->s.topk * sizeof(int32_t));
}

static bool same_routing(const fixture *f, const routing *r) {
    size_t n = (size_t)T * f->s.topk * sizeof(int32_t);
    return !memcmp(r->idx, f->L->st[0].idx, n) && !memcmp(r->pos, f->L->st[0].pos, n);
}

/* Central difference of the objective in *v against the analytic gradient an. */
static int check_value(fixture *f, float *v, double an, const routing *base, int *skipped,
                       const char *what, int64_t e) {
    const float eps = 2e-3f;
    float keep = *v;
    *v = keep + eps;
    double jp = objective(f);
    bool ok = same_routing(f, base);
    *v = keep - eps;
    double jm = objective(f);
    ok = ok && same_routing(f, base);
    *v = keep;
    if (!ok) {
        ++*skipped;
        return 0;
    }
    double fd = (jp - jm) / (2.0 * eps);
    if (fabs(fd - an) > 5e-4 + 5e-3 * fabs(an)) {
        fprintf(stderr, "  %s[%lld]: finite difference %.6g, backward %.6g\n", what, (long long)e,
                fd, an);
        return 1;
    }
    return 0;
}

/* Backward once, then every parameter and input element against finite differences. */
static void gradcheck(fixture *f) {
    double j0 = objective(f);
    CHECK(isfinite(j0));
    routing base;
    take_routing(f, &base);
    memset(f->g, 0, (size_t)f->numel * sizeof *f->g);
    /* dJ/dy = R */
    CHECK_INT_EQ(tr_moe_backward(f->L, 0, f->r, f->dx, f->aux_scale), TR_OK);
    float dx[T * H];
    memcpy(dx, f->dx, sizeof dx);
    int bad = 0, skipped = 0, checked = 0;
    for (int i = 0; i < f->n_info; i++) {
        if (f->info[i].frozen) continue; /* the expert bias: no gradient */
        int64_t n = (int64_t)f->info[i].rows * f->info[i].cols;
        for (int64_t e = 0; e < n; e++, checked++)
            bad += check_value(f, &f->p[f->off[i] + e], f->g[f->off[i] + e], &base, &skipped,
                               f->info[i].name, e);
    }
    for (int e = 0; e < T * H; e++, checked++)
        bad += check_value(f, &f->x[e], dx[e], &base, &skipped, "x", e);
    CHECK_INT_EQ(bad, 0);
    /* few elements may flip a routing decision */
    CHECK(skipped * 20 <= checked);
    /* and the analytic gradient is not trivially zero */
    double gn = 0.0;
    for (int64_t e = 0; e < f->numel; e++) gn += (double)f->g[e] * f->g[e];
    CHECK(gn > 1e-6);
}

static void test_router_softmax_aux_z(void) {
    fixture f;
    tr_moe_spec s = base_spec(4, 2, 6);
    s.balance = TR_MOE_LB_AUX;
    s.aux_coeff = 0.3f;
    s.z_coeff = 0.05f;
    setup(&f, s, true, 1);
    gradcheck(&f);
    teardown(&f);
}

static void test_router_pre_softmax_seq_aux(void) {
    fixture f;
    tr_moe_spec s = base_spec(4, 2, 6);
    s.pre_softmax = true;
    s.balance = TR_MOE_LB_SEQ_AUX;
    s.aux_coeff = 0.5f;
    s.topk_scale = 2.5f;
    setup(&f, s, true, 2);
    gradcheck(&f);
    teardown(&f);
}

static void test_router_top1_pre_softmax_gelu(void) {
    fixture f;
    tr_moe_spec s = base_spec(4, 1, 5);
    s.pre_softmax = true;
    s.z_coeff = 0.1f;
    setup(&f, s, false, 3);
    gradcheck(&f);
    teardown(&f);
}

/* DeepSeek's router: sigmoid scores, expert bias (routing only), group-limited top-k, scaled
 * probabilities; plus a gated shared expert and input jitter. */
static void test_router_sigmoid_bias_groups_shared(void) {
    fixture f;
    tr_moe_spec s = base_spec(8, 2, 4);
    s.score = TR_MOE_SIGMOID;
    s.expert_bias = true;
    s.bias_rate = 1e-3f;
    s.groups = 4;
    s.group_topk = 2;
    s.topk_scale = 2.5f;
    s.balance = TR_MOE_LB_SEQ_AUX;
    s.aux_coeff = 0.2f;
    s.shared_ffn = 6;
    s.shared_gate = true;
    s.jitter = 0.05f;
    setup(&f, s, true, 4);
    for (int e = 0; e < 8; e++) f.L->p.bias[e] = 0.3f * urand();
    gradcheck(&f);
    teardown(&f);
}

static void test_router_sqrtsoftplus_global_aux(void) {
    fixture f;
    tr_moe_spec s = base_spec(4, 3, 4);
    s.score = TR_MOE_SQRTSOFTPLUS;
    s.balance = TR_MOE_LB_GLOBAL_AUX;
    s.aux_coeff = 0.4f;
    s.shared_ffn = 5;
    setup(&f, s, false, 5);
    gradcheck(&f);
    teardown(&f);
}

/* The balancing and z losses alone: R = 0, so only the losses reach the router and x. */
static void test_aux_and_z_losses_alone(void) {
    tr_moe_spec s = base_spec(4, 2, 6);
    s.z_coeff = 0.3f;
    s.aux_coeff = 0.6f;
    for (int lb = TR_MOE_LB_AUX; lb <= TR_MOE_LB_GLOBAL_AUX; lb++)
        for (int score = TR_MOE_SOFTMAX; score <= TR_MOE_SIGMOID; score++) {
            fixture f;
            s.balance = lb;
            s.score = score;
            setup(&f, s, true, 10 + (uint64_t)lb);
            memset(f.r, 0, sizeof f.r);
            gradcheck(&f);
            teardown(&f);
        }
}

/* Capacity factor: dropped assignments, both policies, with and without padding. */
static void test_capacity_gradients(void) {
    for (int variant = 0; variant < 3; variant++) {
        fixture f;
        tr_moe_spec s = base_spec(4, 2, 6);
        s.capacity = variant == 2 ? 0.5f : 1.0f;
        s.drop_position = variant == 1;
        s.pad_capacity = variant == 0;
        s.balance = TR_MOE_LB_AUX;
        s.aux_coeff = 0.1f;
        setup(&f, s, variant != 1, 20 + (uint64_t)variant);
        gradcheck(&f);
        teardown(&f);
    }
}

/* A zero router scores every expert alike: the switch loss is exactly 1 (ties route to the
 * first k experts: N = T for them, P = T / E each) and the z-loss (log E)^2. */
static void test_loss_values(void) {
    fixture f;
    tr_moe_spec s = base_spec(4, 2, 6);
    s.balance = TR_MOE_LB_AUX;
    s.aux_coeff = 0.01f;
    s.z_coeff = 1e-3f;
    setup(&f, s, true, 30);
    memset(f.L->p.router, 0, 4 * H * sizeof(float));
    CHECK_INT_EQ(tr_moe_forward(f.L, 0, f.x, f.y, true, 1, 1), TR_OK);
    double lb, z;
    int n;
    tr_moe_take_stats(f.L, &lb, &z, &n);
    CHECK_INT_EQ(n, 1);
    CHECK_CLOSE(lb, 1.0, 1e-6, 0.0);
    CHECK_CLOSE(z, log(4.0) * log(4.0), 1e-6, 0.0);
    /* evaluation: no statistics */
    CHECK_INT_EQ(tr_moe_forward(f.L, 0, f.x, f.y, false, 1, 1), TR_OK);
    tr_moe_take_stats(f.L, &lb, &z, &n);
    CHECK_INT_EQ(n, 0);
    teardown(&f);
}

/* A router whose logits are set by hand (x one-hot per token, router weight = the logits):
 * capacity keeps the most probable tokens (or the earliest), the rest of an expert's tokens
 * are dropped, and the output of a dropped assignment is missing from its token. */
static void test_capacity_rule(void) {
    for (int policy = 0; policy < 2; policy++) {
        fixture f;
        tr_moe_spec s = base_spec(2, 1, 3);
        s.pre_softmax = true;
        s.capacity = 1.0f; /* ceil(6 * 1 / 2 * 1) = 3 rows per expert */
        s.drop_position = policy == 1;
        setup(&f, s, true, 40);
        CHECK_INT_EQ(f.L->capacity, 3);
        memset(f.x, 0, sizeof f.x);
        for (int t = 0; t < T; t++) f.x[t * H + t] = 1.0f;
        /* tokens 0..4 prefer expert 0, with rising confidence; token 5 expert 1 */
        for (int t = 0; t < T; t++) {
            float l = t < 5 ? 0.5f * (float)(t + 1) : -1.0f;
            f.L->p.router[0 * H + t] = l;
            f.L->p.router[1 * H + t] = -l;
        }
        CHECK_INT_EQ(tr_moe_forward(f.L, 0, f.x, f.y, true, 1, 1), TR_OK);
        const tr_moe_state *st = &f.L->st[0];
        int kept0[T] = {0};
        for (int t = 0; t < T; t++) kept0[t] = st->pos[t] >= 0;
        if (policy == 0) { /* the three most probable: tokens 2, 3, 4 */
            CHECK(!kept0[0] && !kept0[1] && kept0[2] && kept0[3] && kept0[4]);
        } else { /* the earliest three: tokens 0, 1, 2 */
            CHECK(kept0[0] && kept0[1] && kept0[2] && !kept0[3] && !kept0[4]);
        }
        CHECK(kept0[5]);
        for (int t = 0; t < T; t++) {
            double norm = 0.0;
            for (int c = 0; c < H; c++) norm += fabs(f.y[t * H + c]);
            CHECK(kept0[t] ? norm > 0.0 : norm == 0.0);
        }
        teardown(&f);
    }
}

/* Aux-loss-free balancing: bias += rate * sign(mean - count) at the step's end, from the token
 * counts of the step's training forwards (Megatron's get_updated_expert_bias). */
static void test_expert_bias_update(void) {
    fixture f;
    tr_moe_spec s = base_spec(4, 2, 6);
    s.score = TR_MOE_SIGMOID;
    s.expert_bias = true;
    s.bias_rate = 0.01f;
    setup(&f, s, true, 50);
    memset(f.L->p.bias, 0, 4 * sizeof(float));
    CHECK_INT_EQ(tr_moe_forward(f.L, 0, f.x, f.y, true, 1, 1), TR_OK);
    CHECK_INT_EQ(tr_moe_forward(f.L, 0, f.x, f.y, true, 1, 2), TR_OK);
    double counts[4];
    memcpy(counts, tr_moe_step_counts(f.L), sizeof counts);
    double total = 0.0;
    for (int e = 0; e < 4; e++) total += counts[e];
    CHECK_CLOSE(total, 2.0 * T * 2, 0.0, 0.0);
    CHECK_INT_EQ(tr_moe_step_end(f.L), TR_OK);
    for (int e = 0; e < 4; e++) {
        double want = counts[e] < total / 4 ? 0.01 : counts[e] > total / 4 ? -0.01 : 0.0;
        CHECK_CLOSE(f.L->p.bias[e], want, 1e-6, 0.0);
        CHECK(tr_moe_step_counts(f.L)[e] == 0.0);
    }
    teardown(&f);
}

/* The layer's tensors: Megatron's names, logical per-expert tensors. */
static void test_param_names(void) {
    tr_moe_spec s = base_spec(3, 2, 6);
    s.expert_bias = true;
    s.shared_ffn = 10;
    s.shared_gate = true;
    tr_moe_param p[16];
    CHECK_INT_EQ(tr_moe_param_count(&s), 11);
    CHECK_INT_EQ(tr_moe_params(&s, 5, H, true, p), TR_OK);
    CHECK_STR_EQ(p[0].name, "decoder.layers.5.mlp.router.weight");
    CHECK_STR_EQ(p[1].name, "decoder.layers.5.mlp.router.expert_bias");
    CHECK(p[1].frozen);
    CHECK_STR_EQ(p[2].name, "decoder.layers.5.mlp.experts.local_experts.0.linear_fc1.weight");
    CHECK_INT_EQ(p[2].rows, 12);
    CHECK_STR_EQ(p[7].name, "decoder.layers.5.mlp.experts.local_experts.2.linear_fc2.weight");
    CHECK_INT_EQ(p[7].cols, 6);
    CHECK_STR_EQ(p[8].name, "decoder.layers.5.mlp.shared_experts.linear_fc1.weight");
    CHECK_INT_EQ(p[8].rows, 20);
    CHECK_STR_EQ(p[10].name, "decoder.layers.5.mlp.shared_experts.gate_weight");
}

/* LoRA: every base tensor frozen (no gradient at all), the adapters of each expert's and the
 * shared expert's fc1 / fc2 against finite differences. B starts random here (not zero), so the
 * adapters' path reaches the output and A's gradient is not trivially zero. */
static void lora_check(tr_moe_spec s, bool swiglu, uint64_t seed) {
    fixture f;
    setup(&f, s, swiglu, seed);
    int adapters = 0;
    for (int i = 0; i < f.n_info; i++) {
        CHECK(f.info[i].adapter != f.info[i].frozen);
        adapters += f.info[i].adapter;
    }
    CHECK_INT_EQ(adapters, tr_moe_lora_param_count(&s));
    gradcheck(&f);
    for (int i = 0; i < f.n_info; i++) {
        if (!f.info[i].frozen) continue;
        double sq = 0.0;
        for (int64_t e = 0; e < (int64_t)f.info[i].rows * f.info[i].cols; e++)
            sq += (double)f.g[f.off[i] + e] * f.g[f.off[i] + e];
        CHECK(sq == 0.0);
    }
    teardown(&f);
}

static tr_moe_spec lora_spec(int experts, int topk, int ffn) {
    tr_moe_spec s = base_spec(experts, topk, ffn);
    s.lora_rank = 2;
    s.lora_fc1 = s.lora_fc2 = true;
    s.lora_scale = 1.5f;
    return s;
}

static void test_lora_experts_shared_gate(void) {
    tr_moe_spec s = lora_spec(4, 2, 6);
    s.shared_ffn = 5;
    s.shared_gate = true;
    s.balance = TR_MOE_LB_AUX;
    s.aux_coeff = 0.2f;
    lora_check(s, true, 11);
}

/* Dropout on the adapters' input (the masks are recomputed in backward), GELU experts, only
 * fc2 adapted, padded capacity (rows without an assignment). */
static void test_lora_dropout_fc2_padded(void) {
    tr_moe_spec s = lora_spec(4, 2, 6);
    s.lora_fc1 = false;
    s.lora_dropout = 0.3f;
    s.capacity = 1.0f;
    s.pad_capacity = true;
    s.shared_ffn = 4;
    lora_check(s, false, 12);
    s = lora_spec(4, 2, 6);
    s.lora_dropout = 0.5f;
    lora_check(s, true, 13);
}

static void test_lora_param_names(void) {
    tr_moe_spec s = lora_spec(2, 1, 6);
    s.shared_ffn = 10;
    s.lora_rank = 3;
    s.lora_fc2 = false;
    tr_moe_param p[16];
    CHECK_INT_EQ(tr_moe_param_count(&s), 7 + 6);
    CHECK_INT_EQ(tr_moe_params(&s, 1, H, true, p), TR_OK);
    CHECK(p[0].frozen && !p[0].adapter);
    CHECK_STR_EQ(
        p[7].name,
        "decoder.layers.1.mlp.experts.local_experts.0.linear_fc1.adapter.linear_in.weight");
    CHECK(p[7].adapter && !p[7].frozen);
    CHECK_INT_EQ(p[7].rows, 3);
    CHECK_INT_EQ(p[7].cols, H);
    CHECK_STR_EQ(
        p[8].name,
        "decoder.layers.1.mlp.experts.local_experts.0.linear_fc1.adapter.linear_out.weight");
    CHECK_INT_EQ(p[8].rows, 12);
    CHECK_INT_EQ(p[8].init, TR_MOE_INIT_LORA_B);
    CHECK_STR_EQ(p[12].name,
                 "decoder.layers.1.mlp.shared_experts.linear_fc1.adapter.linear_out.weight");
    CHECK_INT_EQ(p[12].rows, 20);
}

TR_TEST_MAIN(TR_TEST(test_router_softmax_aux_z), TR_TEST(test_router_pre_softmax_seq_aux),
             TR_TEST(test_router_top1_pre_softmax_gelu),
             TR_TEST(test_router_sigmoid_bias_groups_shared),
             TR_TEST(test_router_sqrtsoftplus_global_aux), TR_TEST(test_aux_and_z_losses_alone),
             TR_TEST(test_capacity_gradients), TR_TEST(test_loss_values),
             TR_TEST(test_capacity_rule), TR_TEST(test_expert_bias_update),
             TR_TEST(test_param_names), TR_TEST(test_lora_experts_shared_gate),
             TR_TEST(test_lora_dropout_fc2_padded), TR_TEST(test_lora_param_names))
