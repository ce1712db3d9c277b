/* Tiny random DeepseekV3ForCausalLM checkpoints with dense layers, saved by transformers
 * (tests/reference/make_hf_deepseek_fixtures.py): config.json becomes an MLA model section,
 * the safetensors fill a Trestle model, and its logits, loss and every parameter's gradient
 * match transformers' (fp32, relative 1e-4), for compressed queries with YaRN and for direct
 * queries with plain rotary and wide value heads. A TP 2 shard holds exactly its slice; export
 * writes a directory that imports back bit for bit; a checkpoint with rotate-half rotary
 * channels or rotary settings Trestle does not map is refused naming the key. (MoE layers and
 * MTP: test_hf_deepseek_moe.c.) */
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

/* Export writes a DeepseekV3ForCausalLM directory that imports back into the same spec and the
 * same parameters, bit for bit (F32), for both fixtures (MoE and MTP: test_hf_deepseek_moe). */
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
    char p[256];
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
}

static void test_export_round_trip(void) {
    round_trip(FIX "hf_deepseek_v3");
    round_trip(FIX "hf_deepseek_v3_q");
}

/* A copy of hf_deepseek_v3 whose config.json has `from` replaced by `to`. */
static const char *variant(const char *from, const char *to) {
    static char dir[128];
    snprintf(dir, sizeof dir, "/tmp/trestle_hf_deepseek_%d", (int)getpid());
    mkdir(dir, 0700);
    char src[512], dst[256];
    snprintf(src, sizeof src, "%shf_deepseek_v3/config.json", FIX);
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

static void expect_refused(const char *from, const char *to, const char *word) {
    const char *dir = variant(from, to);
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

static void test_refusals(void) {
    expect_refused("\"rope_interleave\": true", "\"rope_interleave\": false", "rope_interleave");
    expect_refused("\"mscale_all_dim\": 0.6,", "", "rope_parameters");
    expect_refused("\"rope_type\": \"yarn\"", "\"rope_type\": \"longrope\"", "rope_parameters");
}

TR_TEST_MAIN(TR_TEST(test_config), TR_TEST(test_logits_and_grads_match_transformers),
             TR_TEST(test_export_round_trip), TR_TEST(test_refusals))
