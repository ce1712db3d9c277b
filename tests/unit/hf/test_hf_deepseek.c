/* Tiny random DeepseekV3ForCausalLM checkpoints saved by transformers
 * (tests/reference/make_hf_deepseek_fixtures.py). With dense layers: config.json becomes an MLA
 * model section, the safetensors fill a Trestle model, and its logits, loss and every
 * parameter's gradient match transformers' (fp32, relative 1e-4), for compressed queries with
 * YaRN and for direct queries with plain rotary and wide value heads; a TP 2 shard holds exactly
 * its slice; export writes a directory that imports back bit for bit. With MoE layers: the
 * routing keys become Megatron's (sigmoid scores, expert bias, group-limited top-k, routed
 * scaling, shared experts, the dense layers first) and the model matches transformers' too.
 * transformers has no MTP, so an MTP depth is checked against Trestle itself: the main model's
 * logits are still transformers', and the model exported and imported again has the same
 * parameters and the same main and MTP losses, bit for bit. Rotate-half rotary channels, rotary
 * settings Trestle does not map and routing it cannot express are refused naming the key. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/validate.h"
#include "runtime/hf/hf.h"
#include "tests/unit/harness.h"
#include "tests/unit/hf/parity.h"
#include "tests/unit/model/fixture.h"

#define FIX TRESTLE_SOURCE_DIR "/tests/reference/fixtures/"

static bool spec_from_dir(const char *dir, tr_model_spec *s, tr_config *keep, tr_diags *d) {
    tr_config c;
    if (tr_config_init(&c, d) != TR_OK) return false;
    bool ok = tr_hf_config_apply(&c, dir, false, d) == TR_OK;
    tr_world w = {1, 1};
    ok = ok && tr_config_finalize(&c, &w, d) == TR_OK;
    ok = ok && tr_model_spec_from_config(&c, s, d) == TR_OK;
    if (keep && ok)
        *keep = c;
    else
        tr_config_free(&c);
    return ok;
}

static void test_config(void) {
    tr_diags d = {0};
    tr_config c;
    tr_model_spec s;
    CHECK(spec_from_dir(FIX "hf_deepseek_v3", &s, &c, &d));
    const tr_model_config *m = &c.model;
    CHECK(m->multi_latent_attention && m->qk_layernorm);
    CHECK_INT_EQ(m->q_lora_rank, 12);
    CHECK_INT_EQ(m->kv_lora_rank, 16);
    CHECK_INT_EQ(m->qk_head_dim, 6);
    CHECK_INT_EQ(m->qk_pos_emb_head_dim, 8);
    CHECK_INT_EQ(m->v_head_dim, 8);
    CHECK_INT_EQ(m->rope_type, TR_ROPE_YARN);
    CHECK_CLOSE(m->rotary_scaling_factor, 4.0, 0, 0);
    CHECK_CLOSE(m->mscale, 0.8, 1e-12, 0);
    CHECK_CLOSE(m->mscale_all_dim, 0.6, 1e-12, 0);
    CHECK_INT_EQ(m->original_max_position_embeddings, 64);
    CHECK(!m->share_embeddings_and_output_weights);
    CHECK(s.mla.on && s.head_dim == 8 && s.groups == 4 && !s.rope && !s.qk_norm);
    tr_config_free(&c);
    CHECK(spec_from_dir(FIX "hf_deepseek_v3_q", &s, NULL, &d));
    CHECK(s.mla.on && s.mla.q_lora_rank == 0 && !s.mla.yarn && s.mla.v_dim == 10);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
}

static void check_parity(const char *dir, const char *expected) {
    tr_diags d = {0};
    tr_model_spec s;
    CHECK(spec_from_dir(dir, &s, NULL, &d));
    fixture f;
    CHECK(fixture_load(&f, expected));
    tr_hf_weights w;
    CHECK(tr_hf_weights_open(&w, dir, &d) == TR_OK);
    tr_model m;
    const int batch = 2;
    CHECK(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), batch) == TR_OK);
    CHECK(tr_hf_import(&m, &w, &d) == TR_OK);
    hf_check_forward(&m, &f, batch * s.seq, expected);
    hf_check_grads(&m, &f);
    hf_check_tp_slices(&s, &m, &w, &d);
    tr_model_free(&m);
    tr_hf_weights_close(&w);
    fixture_free(&f);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
}

static void test_logits_and_grads_match_transformers(void) {
    check_parity(FIX "hf_deepseek_v3", "hf_deepseek_v3/expected.bin");
    check_parity(FIX "hf_deepseek_v3_q", "hf_deepseek_v3_q/expected.bin");
}

static void remove_dir(const char *dir) {
    char p[256];
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* Export writes a DeepseekV3ForCausalLM directory that imports back into the same spec and the
 * same parameters, bit for bit (F32), for both fixtures (MoE and MTP: test_mtp). */
static void round_trip(const char *src) {
    tr_diags d = {0};
    tr_model_spec s, back;
    CHECK(spec_from_dir(src, &s, NULL, &d));
    tr_hf_weights w;
    CHECK(tr_hf_weights_open(&w, src, &d) == TR_OK);
    tr_model a, b;
    CHECK(tr_model_create(&a, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1) == TR_OK);
    CHECK(tr_hf_import(&a, &w, &d) == TR_OK);
    tr_hf_weights_close(&w);
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/trestle_hf_deepseek_export_%d", (int)getpid());
    CHECK(tr_hf_export(&a, dir, TR_ST_F32, &d) == TR_OK);
    CHECK(spec_from_dir(dir, &back, NULL, &d));
    CHECK(memcmp(&back.mla, &s.mla, sizeof s.mla) == 0);
    CHECK(back.hidden == s.hidden && back.heads == s.heads && back.ffn == s.ffn &&
          back.vocab == s.vocab && back.tied == s.tied && back.head_dim == s.head_dim);
    CHECK(tr_hf_weights_open(&w, dir, &d) == TR_OK);
    CHECK(tr_model_create(&b, &back, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1) == TR_OK);
    CHECK(tr_hf_import(&b, &w, &d) == TR_OK);
    tr_hf_weights_close(&w);
    CHECK_INT_EQ(b.n_params, a.n_params);
    CHECK(memcmp(a.params, b.params, (size_t)a.n_params * sizeof(float)) == 0);
    tr_model_free(&b);
    tr_model_free(&a);
    remove_dir(dir);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
}

static void test_export_round_trip(void) {
    round_trip(FIX "hf_deepseek_v3");
    round_trip(FIX "hf_deepseek_v3_q");
}

/* A copy of fixture `fix` whose config.json has `from` replaced by `to`. */
static const char *variant(const char *fix, const char *from, const char *to) {
    static char dir[128];
    snprintf(dir, sizeof dir, "/tmp/trestle_hf_deepseek_%d", (int)getpid());
    mkdir(dir, 0700);
    char src[512], dst[256];
    snprintf(src, sizeof src, "%s%s/config.json", FIX, fix);
    FILE *in = fopen(src, "rb");
    char text[8192];
    size_t n = in ? fread(text, 1, sizeof text - 1, in) : 0;
    if (in) fclose(in);
    text[n] = 0;
    char *at = strstr(text, from), out[8192];
    CHECK(at != NULL);
    if (!at) return dir;
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    FILE *o = fopen(dst, "wb");
    if (o) {
        fputs(out, o);
        fclose(o);
    }
    return dir;
}

static void expect_refused(const char *fix, const char *from, const char *to, const char *word) {
    const char *dir = variant(fix, from, to);
    tr_diags d = {0};
    tr_config c;
    CHECK(tr_config_init(&c, &d) == TR_OK);
    CHECK(tr_hf_config_apply(&c, dir, false, &d) != TR_OK);
    const tr_diag *g = tr_diags_find(&d, "hf.config");
    CHECK(g != NULL && strstr(g->message, word) != NULL);
    if (g && !strstr(g->message, word)) fprintf(stderr, "  message: %s\n", g->message);
    tr_config_free(&c);
    tr_diags_free(&d);
    char p[256];
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    rmdir(dir);
}

static void test_moe_config(void) {
    tr_diags d = {0};
    tr_config c;
    tr_model_spec s;
    CHECK(spec_from_dir(FIX "hf_deepseek_v3_moe", &s, &c, &d));
    const tr_model_config *m = &c.model;
    CHECK_INT_EQ(m->num_moe_experts, 8);
    CHECK_INT_EQ(m->moe_router_topk, 2);
    CHECK_INT_EQ(m->moe_ffn_hidden_size, 8);
    CHECK_INT_EQ(m->moe_shared_expert_intermediate_size, 16);
    CHECK_INT_EQ(m->moe_router_score_function, TR_SCORE_SIGMOID);
    CHECK(m->moe_router_enable_expert_bias);
    CHECK_INT_EQ(m->moe_router_num_groups, 2);
    CHECK_INT_EQ(m->moe_router_group_topk, 1);
    CHECK_CLOSE(m->moe_router_topk_scaling_factor, 2.5, 0, 0);
    CHECK(!tr_moe_is_layer(&s.moe, 0) && tr_moe_is_layer(&s.moe, 1) && tr_moe_is_layer(&s.moe, 2));
    CHECK_INT_EQ(s.mtp_layers, 0);
    tr_config_free(&c);
    CHECK(spec_from_dir(FIX "hf_deepseek_v3_mtp", &s, NULL, &d));
    CHECK_INT_EQ(s.mtp_layers, 1);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
}

static void import_dir(const char *dir, tr_model_spec *s, tr_model *m, int batch, tr_diags *d) {
    CHECK(spec_from_dir(dir, s, NULL, d));
    tr_hf_weights w;
    CHECK(tr_hf_weights_open(&w, dir, d) == TR_OK);
    CHECK(tr_model_create(m, s, (tr_tp_shard){0, 1}, tr_ops_cpu(), batch) == TR_OK);
    CHECK(tr_hf_import(m, &w, d) == TR_OK);
    tr_hf_weights_close(&w);
}

static void test_moe_matches_transformers(void) {
    tr_diags d = {0};
    tr_model_spec s;
    tr_model m;
    const int batch = 2;
    import_dir(FIX "hf_deepseek_v3_moe", &s, &m, batch, &d);
    fixture f;
    CHECK(fixture_load(&f, "hf_deepseek_v3_moe/expected.bin"));
    m.training = 0; /* no balancing loss: transformers' loss is the LM loss */
    hf_check_forward(&m, &f, batch * s.seq, "hf_deepseek_v3_moe");
    hf_check_grads(&m, &f);
    tr_model_free(&m);
    fixture_free(&f);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
}

/* One training forward of the fixture's tokens: the loss and each MTP depth's. */
static void losses(tr_model *m, const fixture *f, float *loss, float *mtp) {
    const fix_tensor *tok = fixture_get(f, "", "tokens"), *tgt = fixture_get(f, "", "targets");
    int32_t ids[64], tg[64];
    int rows = m->batch * m->spec.seq;
    CHECK(tok && tgt && (int)tok->n == rows && rows <= 64);
    if (!tok || !tgt || (int)tok->n != rows || rows > 64) return;
    for (int i = 0; i < rows; i++) ids[i] = (int32_t)tok->data[i], tg[i] = (int32_t)tgt->data[i];
    m->training = 1;
    CHECK(tr_model_forward(m, ids, tg, loss) == TR_OK);
    CHECK(tr_model_mtp_losses(m, mtp) == TR_OK);
}

static void test_mtp(void) {
    tr_diags d = {0};
    tr_model_spec s, back;
    tr_model a, b;
    const int batch = 2;
    import_dir(FIX "hf_deepseek_v3_mtp", &s, &a, batch, &d);
    fixture f;
    CHECK(fixture_load(&f, "hf_deepseek_v3_mtp/expected.bin"));
    /* the main model is hf_deepseek_v3_moe's: transformers' logits */
    a.training = 0;
    const fix_tensor *tok = fixture_get(&f, "", "tokens"), *tgt = fixture_get(&f, "", "targets");
    const fix_tensor *logits = fixture_get(&f, "", "logits");
    CHECK(tok && tgt && logits);
    int32_t ids[64], tg[64];
    int rows = batch * s.seq;
    for (int i = 0; tok && tgt && i < rows && i < 64; i++)
        ids[i] = (int32_t)tok->data[i], tg[i] = (int32_t)tgt->data[i];
    float l = 0;
    CHECK(tr_model_forward(&a, ids, tg, &l) == TR_OK);
    double e = logits ? hf_rel_err(a.logits, logits->data, (int64_t)rows * s.vocab) : 1;
    printf("  hf_deepseek_v3_mtp: main logits relative error %.3g\n", e);
    CHECK(e <= 1e-4);
    /* export and import again: the same parameters, the same losses */
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/trestle_hf_mtp_export_%d", (int)getpid());
    CHECK(tr_hf_export(&a, dir, TR_ST_F32, &d) == TR_OK);
    import_dir(dir, &back, &b, batch, &d);
    CHECK_INT_EQ(back.mtp_layers, 1);
    CHECK(memcmp(&back.moe, &s.moe, sizeof s.moe) == 0);
    CHECK_INT_EQ(b.n_params, a.n_params);
    CHECK(b.n_params == a.n_params &&
          memcmp(a.params, b.params, (size_t)a.n_params * sizeof(float)) == 0);
    float la = 0, lb = 0, ma[1] = {0}, mb[1] = {0};
    losses(&a, &f, &la, ma);
    losses(&b, &f, &lb, mb);
    printf("  loss %.7f and MTP loss %.7f, after the round trip %.7f and %.7f\n", (double)la,
           (double)ma[0], (double)lb, (double)mb[0]);
    CHECK(ma[0] > 0 && la == lb && ma[0] == mb[0]);
    tr_model_free(&b);
    tr_model_free(&a);
    remove_dir(dir);
    fixture_free(&f);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
}

static void test_refusals(void) {
    const char *f = "hf_deepseek_v3", *moe = "hf_deepseek_v3_moe";
    expect_refused(f, "\"rope_interleave\": true", "\"rope_interleave\": false", "rope_interleave");
    expect_refused(f, "\"mscale_all_dim\": 0.6,", "", "rope_parameters");
    expect_refused(f, "\"rope_type\": \"yarn\"", "\"rope_type\": \"longrope\"", "rope_parameters");
    /* Megatron normalises the selected sigmoid scores */
    expect_refused(moe, "\"norm_topk_prob\": true", "\"norm_topk_prob\": false", "norm_topk_prob");
    /* transformers scores a group by its best two experts, Megatron by top-k / topk_group */
    expect_refused(moe, "\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 3", "topk_group");
    expect_refused(moe, "\"n_group\": 2,", "\"n_group\": 2, \"scoring_func\": \"softmax\",",
                   "scoring_func");
}

TR_TEST_MAIN(TR_TEST(test_config), TR_TEST(test_logits_and_grads_match_transformers),
             TR_TEST(test_export_round_trip), TR_TEST(test_moe_config),
             TR_TEST(test_moe_matches_transformers), TR_TEST(test_mtp), TR_TEST(test_refusals))
