/* Tiny random LlamaForCausalLM, Qwen3ForCausalLM and GPT2LMHeadModel saved by transformers
 * (tests/reference/make_hf_fixtures.py):
 * config.json becomes the model section, the safetensors weights fill a Trestle model, and that
 * model's logits and loss (and, for Qwen3, every parameter's gradient) match what transformers
 * computed (fp32, relative 1e-4). TP shards
 * read exactly their slices of the same weights; a config.json that disagrees with the tensors,
 * or another architecture, is refused naming the key or the tensor. Export writes the same
 * files back, and refuses a model it would write wrongly. */
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

#define DIR       TRESTLE_SOURCE_DIR "/tests/reference/fixtures/hf_llama"
#define QWEN3_DIR TRESTLE_SOURCE_DIR "/tests/reference/fixtures/hf_qwen3"
#define GPT2_DIR  TRESTLE_SOURCE_DIR "/tests/reference/fixtures/hf_gpt2"

static bool spec_from_dir(const char *dir, tr_model_spec *s, tr_diags *d) {
    tr_config c;
    if (tr_config_init(&c, d) != TR_OK) return false;
    bool ok = tr_hf_config_apply(&c, dir, false, d) == TR_OK;
    tr_world w = {1, 1};
    ok = ok && tr_config_finalize(&c, &w, d) == TR_OK;
    ok = ok && tr_model_spec_from_config(&c, s, d) == TR_OK;
    tr_config_free(&c);
    return ok;
}

static void test_config_json_to_model_section(void) {
    tr_diags d = {0};
    tr_config c;
    CHECK(tr_config_init(&c, &d) == TR_OK);
    CHECK(tr_hf_config_apply(&c, DIR, false, &d) == TR_OK);
    const tr_model_config *m = &c.model;
    CHECK_INT_EQ(m->num_layers, 2);
    CHECK_INT_EQ(m->hidden_size, 32);
    CHECK_INT_EQ(m->ffn_hidden_size, 48);
    CHECK_INT_EQ(m->num_attention_heads, 4);
    CHECK_INT_EQ(m->num_query_groups, 2);
    CHECK_INT_EQ(m->kv_channels, 8);
    CHECK_INT_EQ(m->vocab_size, 64);
    CHECK_INT_EQ(m->seq_length, 12);
    CHECK(m->rope_scaling && m->rope_scaling_factor == 8.0);
    CHECK_INT_EQ(m->rope_scaling_original_max_position_embeddings, 8);
    CHECK(m->rotary_base == 10000.0 && m->layernorm_epsilon == 1e-5);
    CHECK(m->gated_linear_unit && m->normalization == TR_NORM_RMSNORM);
    CHECK(!m->share_embeddings_and_output_weights);
    CHECK(m->params_dtype == TR_DTYPE_FP32 && !m->bf16 && !m->fp16);
    CHECK(!m->qk_layernorm);
    /* --explain names the file a value came from. */
    const tr_origin *o = &c.origin[TR_FID_model_hidden_size];
    CHECK(o->kind == TR_ORIGIN_FILE && o->name && strstr(o->name, "config.json"));
    CHECK_INT_EQ(d.n_errors, 0);
    tr_config_free(&c);
    tr_diags_free(&d);
}

/* Qwen3: Llama's layers with qk_layernorm, head_dim as given (8, not hidden / heads = 4), rope
 * theta 1e6, a tied head. */
static void test_qwen3_config(void) {
    tr_diags d = {0};
    tr_config c;
    CHECK(tr_config_init(&c, &d) == TR_OK);
    CHECK(tr_hf_config_apply(&c, QWEN3_DIR, false, &d) == TR_OK);
    const tr_model_config *m = &c.model;
    CHECK(m->qk_layernorm);
    CHECK_INT_EQ(m->hidden_size, 16);
    CHECK_INT_EQ(m->num_attention_heads, 4);
    CHECK_INT_EQ(m->num_query_groups, 2);
    CHECK_INT_EQ(m->kv_channels, 8);
    CHECK_INT_EQ(m->ffn_hidden_size, 24);
    CHECK(m->rotary_base == 1e6 && m->layernorm_epsilon == 1e-6 && !m->rope_scaling);
    CHECK(m->share_embeddings_and_output_weights && !m->add_qkv_bias && !m->add_bias_linear);
    CHECK(m->gated_linear_unit && m->normalization == TR_NORM_RMSNORM);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_config_free(&c);
    tr_diags_free(&d);
}

/* dir's model imported into Trestle gives transformers' logits and loss (and gradients where the
 * fixture has them); each TP 2 shard holds exactly its slice of the whole model's parameters. */
static void check_parity(const char *dir, const char *expected) {
    tr_diags d = {0};
    tr_model_spec s;
    CHECK(spec_from_dir(dir, &s, &d));
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

static void test_logits_match_transformers(void) {
    check_parity(DIR, "hf_llama/expected.bin");
    check_parity(GPT2_DIR, "hf_gpt2/expected.bin");
    check_parity(QWEN3_DIR, "hf_qwen3/expected.bin");
}

/* A copy of fixture directory `src` whose config.json has `from` replaced by `to`. */
static const char *variant_of(const char *src_dir, const char *from, const char *to) {
    static char dir[128];
    snprintf(dir, sizeof dir, "/tmp/trestle_hf_%ld", (long)getpid());
    mkdir(dir, 0700);
    char src[512], dst[512], *text = NULL;
    snprintf(src, sizeof src, "%s/config.json", src_dir);
    FILE *in = fopen(src, "rb");
    size_t n = 0;
    if (in) {
        text = calloc(1 << 16, 1);
        n = text ? fread(text, 1, (1 << 16) - 1, in) : 0;
        fclose(in);
    }
    char *at = text ? strstr(text, from) : NULL;
    CHECK(at != NULL);
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    FILE *out = fopen(dst, "wb");
    if (out && at) {
        fwrite(text, 1, (size_t)(at - text), out);
        fputs(to, out);
        fputs(at + strlen(from), out);
    }
    if (out) fclose(out);
    free(text);
    (void)n;
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    snprintf(src, sizeof src, "%s/model.safetensors", src_dir);
    unlink(dst);
    CHECK(symlink(src, dst) == 0);
    return dir;
}

static const char *variant(const char *from, const char *to) {
    return variant_of(DIR, from, to);
}

static void cleanup(const char *dir) {
    char p[256];
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    rmdir(dir);
}

static void expect_refused_from(const char *src, const char *from, const char *to,
                                const char *word) {
    tr_diags d = {0};
    const char *dir = variant_of(src, from, to);
    tr_model_spec s;
    CHECK(spec_from_dir(dir, &s, &d));
    tr_hf_weights w;
    CHECK(tr_hf_weights_open(&w, dir, &d) == TR_OK);
    tr_model m;
    CHECK(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1) == TR_OK);
    CHECK(tr_hf_import(&m, &w, &d) != TR_OK);
    CHECK(d.n > 0 && strcmp(d.items[d.n - 1].id, "hf.tensor") == 0 &&
          strstr(d.items[d.n - 1].message, word));
    if (d.n) fprintf(stderr, "  (expected) %s\n", d.items[d.n - 1].message);
    tr_model_free(&m);
    tr_hf_weights_close(&w);
    cleanup(dir);
    tr_diags_free(&d);
}

static void expect_import_refused(const char *from, const char *to, const char *word) {
    expect_refused_from(DIR, from, to, word);
}

static void test_refuses_disagreements(void) {
    /* config.json says 64 MLP channels, the tensors hold 48. */
    expect_import_refused("\"intermediate_size\": 48", "\"intermediate_size\": 64",
                          "model.layers.0.mlp.gate_proj.weight");
    /* one layer fewer: layer 1's tensors have no place */
    expect_import_refused("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1",
                          "model.layers.1.");
    /* tied: lm_head has no place */
    expect_import_refused("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true",
                          "lm_head.weight");
    tr_diags d = {0};
    tr_config c;
    CHECK(tr_config_init(&c, &d) == TR_OK);
    const char *dir = variant("LlamaForCausalLM", "GPTNeoXForCausalLM");
    CHECK(tr_hf_config_apply(&c, dir, false, &d) != TR_OK);
    CHECK(d.n > 0 && strcmp(d.items[d.n - 1].id, "hf.architecture") == 0);
    cleanup(dir);
    dir = variant("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"");
    CHECK(tr_hf_config_apply(&c, dir, false, &d) != TR_OK);
    CHECK(d.n > 0 && strcmp(d.items[d.n - 1].id, "hf.config") == 0 &&
          strstr(d.items[d.n - 1].message, "hidden_act"));
    cleanup(dir);
    CHECK(tr_hf_config_apply(&c, "/nonexistent", false, &d) != TR_OK);
    /* Qwen3's head_dim is not hidden / heads: a config.json without it is refused, not guessed. */
    dir = variant_of(QWEN3_DIR, "\"head_dim\": 8,", "");
    CHECK(tr_hf_config_apply(&c, dir, false, &d) != TR_OK);
    CHECK(d.n > 0 && strcmp(d.items[d.n - 1].id, "hf.config") == 0 &&
          strstr(d.items[d.n - 1].message, "head_dim"));
    cleanup(dir);
    tr_config_free(&c);
    tr_diags_free(&d);
    /* Qwen3's weights read as a Llama: its q/k norms have no place in a model without them. */
    expect_refused_from(QWEN3_DIR, "Qwen3ForCausalLM", "LlamaForCausalLM", "k_norm.weight");
}

/* The same weights split over two shards and an index: the same parameters. An index entry that
 * leaves the directory is refused. */
static void test_sharded_index(void) {
    tr_diags d = {0};
    tr_hf_weights one;
    CHECK(tr_hf_weights_open(&one, DIR, &d) == TR_OK);
    CHECK_INT_EQ(one.n, 1);
    if (one.n != 1) return;
    const tr_st_file *f = &one.files[0];
    char dir[128], path[256];
    snprintf(dir, sizeof dir, "/tmp/trestle_hf_shards_%ld", (long)getpid());
    mkdir(dir, 0700);
    tr_st_entry *e = calloc((size_t)f->n, sizeof *e);
    for (int i = 0; i < f->n; i++)
        e[i] =
            (tr_st_entry){f->t[i].name, f->t[i].dtype, f->t[i].ndim, f->t[i].shape, f->t[i].data};
    int half = f->n / 2;
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    CHECK(tr_st_write(path, e, half, NULL, NULL, 0, &d) == TR_OK);
    snprintf(path, sizeof path, "%s/b.safetensors", dir);
    CHECK(tr_st_write(path, e + half, f->n - half, NULL, NULL, 0, &d) == TR_OK);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *out = fopen(path, "w");
    if (out) {
        fputs("{\"metadata\": {}, \"weight_map\": {", out);
        for (int i = 0; i < f->n; i++)
            fprintf(out, "%s\"%s\": \"%s\"", i ? ", " : "", f->t[i].name,
                    i < half ? "a.safetensors" : "b.safetensors");
        fputs("}}", out);
        fclose(out);
    }
    char src[512];
    snprintf(src, sizeof src, "%s/config.json", DIR);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(symlink(src, path) == 0);
    tr_model_spec s;
    CHECK(spec_from_dir(dir, &s, &d));
    tr_hf_weights two;
    CHECK(tr_hf_weights_open(&two, dir, &d) == TR_OK);
    CHECK_INT_EQ(two.n, 2);
    tr_model a, b;
    CHECK(tr_model_create(&a, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1) == TR_OK);
    CHECK(tr_model_create(&b, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1) == TR_OK);
    CHECK(tr_hf_import(&a, &one, &d) == TR_OK && tr_hf_import(&b, &two, &d) == TR_OK);
    CHECK(a.n_params == b.n_params &&
          memcmp(a.params, b.params, (size_t)a.n_params * sizeof(float)) == 0);
    tr_model_free(&a);
    tr_model_free(&b);
    tr_hf_weights_close(&two);
    CHECK_INT_EQ(d.n_errors, 0);
    /* An index naming a file outside the directory. */
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    out = fopen(path, "w");
    if (out) {
        fprintf(out, "{\"weight_map\": {\"%s\": \"../a.safetensors\"}}", f->t[0].name);
        fclose(out);
    }
    CHECK(tr_hf_weights_open(&two, dir, &d) != TR_OK);
    CHECK(d.n > 0 && strcmp(d.items[d.n - 1].id, "hf.index") == 0);
    const char *names[] = {"a.safetensors", "b.safetensors", "model.safetensors.index.json",
                           "config.json"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    free(e);
    tr_hf_weights_close(&one);
    tr_diags_free(&d);
}

/* Every tensor of `a` is in `b` with the same dtype, shape and bytes, and b has no other. */
static int64_t differing_tensors(const tr_st_file *a, const tr_st_file *b) {
    int64_t bad = a->n != b->n;
    for (int i = 0; i < a->n; i++) {
        const tr_st_tensor *x = &a->t[i], *y = tr_st_find(b, x->name);
        bool same = y && y->dtype == x->dtype && y->ndim == x->ndim &&
                    memcmp(y->shape, x->shape, sizeof x->shape) == 0 &&
                    y->end - y->begin == x->end - x->begin &&
                    memcmp(y->data, x->data, (size_t)(x->end - x->begin)) == 0;
        if (!same) fprintf(stderr, "  tensor %s differs after the round trip\n", x->name);
        bad += !same;
    }
    return bad;
}

/* Import then export gives the same file back, tensor for tensor, and a config.json that
 * describes the same model; in fp32 and in bf16. With `expected`, the exported directory
 * imported again gives transformers' logits (the fixture's) once more. */
static void round_trip(const char *src, tr_st_dtype dtype, const char *out, const char *expected) {
    tr_diags d = {0};
    tr_model_spec s;
    CHECK(spec_from_dir(src, &s, &d));
    tr_hf_weights w;
    CHECK(tr_hf_weights_open(&w, src, &d) == TR_OK);
    tr_model m;
    CHECK(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 1) == TR_OK);
    CHECK(tr_hf_import(&m, &w, &d) == TR_OK);
    CHECK(tr_hf_export(&m, out, dtype, &d) == TR_OK);
    tr_hf_weights back;
    CHECK(tr_hf_weights_open(&back, out, &d) == TR_OK);
    if (w.n == 1 && back.n == 1) {
        CHECK_INT_EQ(differing_tensors(&w.files[0], &back.files[0]), 0);
        CHECK_STR_EQ(tr_st_meta(&back.files[0], "format"), "pt");
    }
    tr_config c;
    CHECK(tr_config_init(&c, &d) == TR_OK);
    CHECK(tr_hf_config_apply(&c, src, false, &d) == TR_OK);
    CHECK(tr_hf_config_check(&c, out, &d) == TR_OK);
    tr_config_free(&c);
    tr_hf_weights_close(&back);
    tr_hf_weights_close(&w);
    tr_model_free(&m);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
    if (expected) check_parity(out, expected);
    char p[256];
    snprintf(p, sizeof p, "%s/config.json", out);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    unlink(p);
    rmdir(out);
}

/* src and a bf16 copy of it (each weight rounded once) through Trestle and back. */
static void round_trips(const char *src_dir, const char *expected) {
    char out[128];
    snprintf(out, sizeof out, "/tmp/trestle_hf_out_%ld", (long)getpid());
    round_trip(src_dir, TR_ST_F32, out, expected);
    tr_diags d = {0};
    tr_hf_weights w;
    CHECK(tr_hf_weights_open(&w, src_dir, &d) == TR_OK);
    if (w.n != 1) return;
    const tr_st_file *f = &w.files[0];
    char bf[128], path[256], src[512];
    snprintf(bf, sizeof bf, "/tmp/trestle_hf_bf16_%ld", (long)getpid());
    mkdir(bf, 0700);
    tr_st_entry *e = calloc((size_t)f->n, sizeof *e);
    uint16_t **h = calloc((size_t)f->n, sizeof *h);
    for (int i = 0; i < f->n; i++) {
        int64_t n = tr_st_numel(&f->t[i]);
        h[i] = malloc((size_t)(n ? n : 1) * 2);
        for (int64_t k = 0; k < n; k++) {
            float v;
            memcpy(&v, (const char *)f->t[i].data + 4 * k, 4);
            uint32_t u;
            memcpy(&u, &v, 4);
            u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; the weights are finite */
            h[i][k] = (uint16_t)(u >> 16);
        }
        e[i] = (tr_st_entry){f->t[i].name, TR_ST_BF16, f->t[i].ndim, f->t[i].shape, h[i]};
    }
    snprintf(path, sizeof path, "%s/model.safetensors", bf);
    CHECK(tr_st_write(path, e, f->n, NULL, NULL, 0, &d) == TR_OK);
    snprintf(src, sizeof src, "%s/config.json", src_dir);
    snprintf(path, sizeof path, "%s/config.json", bf);
    CHECK(symlink(src, path) == 0);
    round_trip(bf, TR_ST_BF16, out, NULL);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", bf);
    unlink(path);
    rmdir(bf);
    for (int i = 0; i < f->n; i++) free(h[i]);
    free(h);
    free(e);
    tr_hf_weights_close(&w);
    tr_diags_free(&d);
}

static void test_round_trip(void) {
    round_trips(DIR, "hf_llama/expected.bin");
    round_trips(QWEN3_DIR, "hf_qwen3/expected.bin"); /* the q/k norms, Qwen3's names */
    /* Conv1D weights transposed back, c_attn refused, learned positions, biases, tied head */
    round_trips(GPT2_DIR, "hf_gpt2/expected.bin");
}

/* Export refuses, naming why and creating nothing, a model it would write wrongly: a TP shard,
 * and a Llama-style model with biases (no Llama, Qwen3 or GPT-2 config.json describes it). */
static void expect_export_refused(const char *src, int tp, bool bias, const char *word) {
    tr_diags d = {0};
    tr_model_spec s;
    CHECK(spec_from_dir(src, &s, &d));
    s.bias_linear = bias;
    tr_model m;
    CHECK(tr_model_create(&m, &s, (tr_tp_shard){0, tp}, tr_ops_cpu(), 1) == TR_OK);
    char out[128];
    snprintf(out, sizeof out, "/tmp/trestle_hf_refused_%ld", (long)getpid());
    CHECK(tr_hf_export(&m, out, TR_ST_F32, &d) != TR_OK);
    CHECK(d.n > 0 && strcmp(d.items[d.n - 1].id, "hf.export") == 0 &&
          strstr(d.items[d.n - 1].message, word));
    if (d.n > 0) fprintf(stderr, "  (expected) %s\n", d.items[d.n - 1].message);
    struct stat st;
    CHECK(stat(out, &st) != 0);
    tr_model_free(&m);
    tr_diags_free(&d);
}

static void test_export_refusals(void) {
    expect_export_refused(DIR, 2, false, "not a whole");
    expect_export_refused(DIR, 1, true, "not a whole model of an architecture");
}

/* Logits [rows, hf_vocab] of m on the fixture's tokens (the padding columns dropped). */
static float *logits_on(tr_model *m, const fixture *f, int batch) {
    const fix_tensor *tok = fixture_get(f, "", "tokens"), *tgt = fixture_get(f, "", "targets");
    int rows = batch * m->full.seq;
    int hv = m->full.vocab_real ? m->full.vocab_real : m->full.vocab;
    CHECK(tok && tgt && (int)tok->n == rows && rows <= 64);
    if (!tok || !tgt || (int)tok->n != rows || rows > 64) return NULL;
    int32_t ids[64], tg[64];
    for (int i = 0; i < rows; i++) ids[i] = (int32_t)tok->data[i], tg[i] = (int32_t)tgt->data[i];
    float loss = 0;
    CHECK_INT_EQ(tr_model_forward(m, ids, tg, &loss), TR_OK);
    float *out = malloc((size_t)rows * hv * sizeof *out);
    for (int r = 0; r < rows; r++)
        memcpy(out + (int64_t)r * hv, m->logits + (int64_t)r * m->full.vocab,
               (size_t)hv * sizeof *out);
    return out;
}

static float *import_logits(const char *dir, const fixture *f, int batch, int *n) {
    tr_diags d = {0};
    tr_model_spec s;
    CHECK(spec_from_dir(dir, &s, &d));
    tr_hf_weights w;
    CHECK(tr_hf_weights_open(&w, dir, &d) == TR_OK);
    tr_model m;
    CHECK(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), batch) == TR_OK);
    CHECK(tr_hf_import(&m, &w, &d) == TR_OK);
    float *l = logits_on(&m, f, batch);
    *n = batch * s.seq * (s.vocab_real ? s.vocab_real : s.vocab);
    tr_model_free(&m);
    tr_hf_weights_close(&w);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
    return l;
}

/* A LoRA (or DoRA) model on the imported base, every adapter drawn away from its initial value
 * (B nonzero, magnitudes off the weight norms), exported: the export holds the merged weights,
 * and imported again (a model without adapters) it gives the adapter model's logits. The base
 * alone gives other logits, so a merge that dropped the adapters would fail. With
 * TRESTLE_HF_KEEP_MERGED set, the directory stays there with the adapter model's logits
 * (trestle_logits.f32, [rows, vocab]) and tokens (trestle_tokens.i32) for
 * tests/reference/check_merged_export.py, which loads it with transformers. */
static void merged_export(const char *src, const char *expected, bool dora, const char *tag) {
    tr_diags d = {0};
    tr_model_spec s;
    CHECK(spec_from_dir(src, &s, &d));
    s.lora_rank = 4;
    s.lora_targets =
        (1u << TR_LORA_QKV) | (1u << TR_LORA_PROJ) | (1u << TR_LORA_FC1) | (1u << TR_LORA_FC2);
    s.lora_scale = 2.0f;
    s.lora_dora = dora;
    fixture f;
    CHECK(fixture_load(&f, expected));
    const int batch = 2;
    tr_hf_weights w;
    CHECK(tr_hf_weights_open(&w, src, &d) == TR_OK);
    tr_model m;
    CHECK(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), batch) == TR_OK);
    CHECK(tr_hf_import(&m, &w, &d) == TR_OK);
    CHECK(tr_model_init_dora_magnitudes(&m) == TR_OK);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < m.n_info; i++) {
        const tr_param_info *p = &m.info[i];
        if (!strstr(p->name, ".adapter.")) continue;
        bool mag = strstr(p->name, "weight_magnitude") != NULL;
        for (int64_t e = 0; e < p->numel; e++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            float u = (float)((double)(x >> 11) / 9007199254740992.0) - 0.5f; /* [-0.5, 0.5) */
            float *v = &m.params[p->offset + e];
            *v = mag ? *v * (1.0f + 0.4f * u) : 0.3f * u;
        }
    }
    tr_model_params_changed(&m);
    float *adapted = logits_on(&m, &f, batch);
    const char *keep = getenv("TRESTLE_HF_KEEP_MERGED");
    char out[256];
    if (keep)
        snprintf(out, sizeof out, "%s/%s", keep, tag);
    else
        snprintf(out, sizeof out, "/tmp/trestle_hf_merged_%ld", (long)getpid());
    if (keep) mkdir(keep, 0755);
    CHECK_INT_EQ(tr_hf_export(&m, out, TR_ST_F32, &d), TR_OK);
    int n = 0, nb = 0;
    float *merged = import_logits(out, &f, batch, &n);
    float *base = import_logits(src, &f, batch, &nb);
    if (adapted && merged && base) {
        double e = hf_rel_err(merged, adapted, n), eb = hf_rel_err(base, adapted, n);
        printf("  %s: merged export re-imported vs the adapter model: logits relative error "
               "%.3g (the base alone: %.3g)\n",
               tag, e, eb);
        CHECK(e <= 1e-5);
        CHECK(eb > 1e-2);
    }
    char p[300];
    if (keep && adapted) {
        snprintf(p, sizeof p, "%s/trestle_logits.f32", out);
        FILE *fl = fopen(p, "wb");
        CHECK(fl && fwrite(adapted, sizeof *adapted, (size_t)n, fl) == (size_t)n);
        if (fl) fclose(fl);
        snprintf(p, sizeof p, "%s/trestle_tokens.i32", out);
        const fix_tensor *tok = fixture_get(&f, "", "tokens");
        FILE *ft = fopen(p, "wb");
        for (int i = 0; ft && tok && i < (int)tok->n; i++) {
            int32_t t = (int32_t)tok->data[i];
            fwrite(&t, sizeof t, 1, ft);
        }
        if (ft) fclose(ft);
    } else {
        snprintf(p, sizeof p, "%s/config.json", out);
        unlink(p);
        snprintf(p, sizeof p, "%s/model.safetensors", out);
        unlink(p);
        rmdir(out);
    }
    free(adapted), free(merged), free(base);
    tr_model_free(&m);
    tr_hf_weights_close(&w);
    fixture_free(&f);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
}

static void test_merged_export(void) {
    merged_export(DIR, "hf_llama/expected.bin", false, "llama_lora");
    merged_export(DIR, "hf_llama/expected.bin", true, "llama_dora");
    merged_export(QWEN3_DIR, "hf_qwen3/expected.bin", false, "qwen3_lora");
    merged_export(GPT2_DIR, "hf_gpt2/expected.bin", false, "gpt2_lora");
    merged_export(GPT2_DIR, "hf_gpt2/expected.bin", true, "gpt2_dora");
}

TR_TEST_MAIN(TR_TEST(test_config_json_to_model_section), TR_TEST(test_qwen3_config),
             TR_TEST(test_logits_match_transformers), TR_TEST(test_sharded_index),
             TR_TEST(test_round_trip), TR_TEST(test_refuses_disagreements),
             TR_TEST(test_export_refusals), TR_TEST(test_merged_export))
