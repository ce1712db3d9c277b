/* MixtralForCausalLM and Qwen3MoeForCausalLM imported into Trestle give transformers' logits,
 * loss (the language-model loss; the router's aux loss is not part of either) and every
 * parameter's gradient, within 1e-4 (fp32), from the fixtures of
 * tests/reference/make_hf_moe_fixtures.py: the config.json mapping (experts, top-k, the expert
 * width, norm_topk_prob, Qwen3-MoE's dense first layer) and the tensor maps (router, per-expert
 * [gate; up] and down) against the reference implementation. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/validate.h"
#include "runtime/hf/hf.h"
#include "runtime/model/model.h"
#include "tests/unit/harness.h"
#include "tests/unit/hf/parity.h"
#include "tests/unit/model/fixture.h"

#define MIXTRAL   TRESTLE_SOURCE_DIR "/tests/reference/fixtures/hf_mixtral"
#define QWEN3_MOE TRESTLE_SOURCE_DIR "/tests/reference/fixtures/hf_qwen3_moe"

static bool config_from_dir(const char *dir, tr_config *c, tr_model_spec *s, tr_diags *d) {
    if (tr_config_init(c, d) != TR_OK) return false;
    bool ok = tr_hf_config_apply(c, dir, false, d) == TR_OK;
    tr_world w = {1, 1};
    ok = ok && tr_config_finalize(c, &w, d) == TR_OK;
    return ok && tr_model_spec_from_config(c, s, d) == TR_OK;
}

static void parity(const char *dir, const char *expected) {
    tr_diags d = {0};
    tr_config c;
    tr_model_spec s;
    CHECK(config_from_dir(dir, &c, &s, &d));
    fixture f;
    CHECK(fixture_load(&f, expected));
    tr_hf_weights w;
    CHECK(tr_hf_weights_open(&w, dir, &d) == TR_OK);
    tr_model m;
    const int batch = 2;
    CHECK(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), batch) == TR_OK);
    CHECK(tr_hf_import(&m, &w, &d) == TR_OK);
    m.training = 0; /* no balancing losses: transformers' loss is the LM loss */
    hf_check_forward(&m, &f, batch * s.seq, expected);
    hf_check_grads(&m, &f);
    tr_model_free(&m);
    tr_hf_weights_close(&w);
    fixture_free(&f);
    tr_config_free(&c);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
}

static void test_mixtral_config(void) {
    tr_diags d = {0};
    tr_config c;
    tr_model_spec s;
    CHECK(config_from_dir(MIXTRAL, &c, &s, &d));
    CHECK_INT_EQ(c.model.num_moe_experts, 4);
    CHECK_INT_EQ(c.model.moe_router_topk, 2);
    CHECK_INT_EQ(c.model.moe_ffn_hidden_size, 12);
    CHECK(!c.model.moe_router_pre_softmax);
    CHECK(tr_moe_is_layer(&s.moe, 0) && tr_moe_is_layer(&s.moe, 1));
    tr_config_free(&c);
    tr_diags_free(&d);
}

static void test_qwen3_moe_config(void) {
    tr_diags d = {0};
    tr_config c;
    tr_model_spec s;
    CHECK(config_from_dir(QWEN3_MOE, &c, &s, &d));
    CHECK_INT_EQ(c.model.num_moe_experts, 8);
    CHECK_INT_EQ(c.model.moe_ffn_hidden_size, 12);
    CHECK_INT_EQ(c.model.ffn_hidden_size, 20);
    CHECK(c.model.qk_layernorm);
    CHECK(!tr_moe_is_layer(&s.moe, 0) && tr_moe_is_layer(&s.moe, 1)); /* mlp_only_layers [0] */
    tr_config_free(&c);
    tr_diags_free(&d);
}

/* A model section whose routing disagrees with config.json is refused naming the field. */
static void test_routing_mismatch(void) {
    tr_diags d = {0};
    tr_config c;
    tr_model_spec s;
    CHECK(config_from_dir(MIXTRAL, &c, &s, &d));
    CHECK(tr_hf_config_check(&c, MIXTRAL, &d) == TR_OK);
    c.model.moe_router_topk = 1;
    c.model.moe_router_pre_softmax = true;
    CHECK(tr_hf_config_check(&c, MIXTRAL, &d) != TR_OK);
    int found = 0;
    for (int i = 0; i < d.n; i++)
        found += strcmp(d.items[i].id, "hf.config_mismatch") == 0 &&
                 (strstr(d.items[i].message, "model.moe_router_topk") ||
                  strstr(d.items[i].message, "model.moe_router_pre_softmax"));
    CHECK_INT_EQ(found, 2);
    tr_config_free(&c);
    tr_diags_free(&d);
}

/* A Mixtral-shaped model whose routing config.json cannot express (sigmoid scores, an expert
 * bias, dense layers) is refused by the export, naming it; the model as imported exports. */
static void test_export_refusals(void) {
    tr_diags d = {0};
    tr_config c;
    tr_model_spec s;
    CHECK(config_from_dir(MIXTRAL, &c, &s, &d));
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/trestle_hf_moe_refused_%d", (int)getpid());
    for (int k = 0; k < 3; k++) {
        tr_model_spec b = s;
        if (k == 0) b.moe.score = TR_MOE_SIGMOID;
        if (k == 1) b.moe.expert_bias = true, b.moe.score = TR_MOE_SIGMOID, b.moe.topk_scale = 2;
        if (k == 2) b.moe.layers[0] &= ~(uint64_t)1; /* layer 0 dense */
        tr_model m;
        CHECK(tr_model_create(&m, &b, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1) == TR_OK);
        tr_diags e = {0};
        CHECK(tr_hf_export(&m, dir, TR_ST_F32, &e) != TR_OK);
        CHECK(tr_diags_find(&e, "hf.export") != NULL);
        tr_diags_free(&e);
        tr_model_free(&m);
    }
    rmdir(dir);
    tr_config_free(&c);
    tr_diags_free(&d);
}

static void test_mixtral_matches_transformers(void) {
    parity(MIXTRAL, "hf_mixtral/expected.bin");
}

static void test_qwen3_moe_matches_transformers(void) {
    parity(QWEN3_MOE, "hf_qwen3_moe/expected.bin");
}

TR_TEST_MAIN(TR_TEST(test_mixtral_config), TR_TEST(test_qwen3_moe_config),
             TR_TEST(test_routing_mismatch), TR_TEST(test_export_refusals),
             TR_TEST(test_mixtral_matches_transformers),
             TR_TEST(test_qwen3_moe_matches_transformers))
