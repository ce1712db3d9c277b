/* PEFT adapter directories (runtime/hf/adapter.c) against the `peft` package: a LoRA that peft
 * put on the tiny random Llama and Qwen3 fixtures and saved (tests/reference/
 * make_peft_fixtures.py), read into a Trestle LoRA model on the imported base, gives the logits
 * and loss peft computed; exported again it gives back every tensor of peft's file with the
 * same values and peft's config keys (so peft, which wrote those, reads ours); TP shards read
 * their slices; an adapter of another rank, scale or targets, a q/k/v whose lora_A differ, and
 * a missing or extra tensor are refused naming the key or the tensor; so is a model with MoE
 * expert adapters. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/validate.h"
#include "runtime/hf/hf.h"
#include "runtime/io/json.h"
#include "tests/unit/harness.h"
#include "tests/unit/model/fixture.h"

#define FIX TRESTLE_SOURCE_DIR "/tests/reference/fixtures/"

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

static double rel_err(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = (double)a[i] - b[i];
        num += e * e;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* A LoRA model (r 4, scale 8 / 4, every linear layer) on the base in dir, TP shard tp of n. */
static bool lora_model(tr_model *m, const char *base, int rank, int tp_rank, int tp, tr_diags *d) {
    tr_model_spec s;
    if (!spec_from_dir(base, &s, d)) return false;
    s.lora_rank = rank;
    s.lora_targets =
        (1u << TR_LORA_QKV) | (1u << TR_LORA_PROJ) | (1u << TR_LORA_FC1) | (1u << TR_LORA_FC2);
    s.lora_scale = 8.0f / (float)rank;
    tr_hf_weights w;
    if (tr_hf_weights_open(&w, base, d) != TR_OK) return false;
    bool ok = tr_model_create(m, &s, (tr_tp_shard){tp_rank, tp}, tr_ops_cpu(), 2) == TR_OK;
    ok = ok && tr_hf_import(m, &w, d) == TR_OK;
    tr_hf_weights_close(&w);
    return ok;
}

static void same_tensors(const char *ours, const char *theirs) {
    tr_diags d = {0};
    tr_st_file a, b;
    CHECK_INT_EQ(tr_st_open(&a, ours, &d), TR_OK);
    CHECK_INT_EQ(tr_st_open(&b, theirs, &d), TR_OK);
    CHECK_INT_EQ(a.n, b.n);
    int64_t differ = 0;
    for (int i = 0; i < b.n; i++) {
        const tr_st_tensor *x = tr_st_find(&a, b.t[i].name);
        CHECK(x != NULL);
        if (!x) continue;
        bool shape = x->ndim == b.t[i].ndim && x->shape[0] == b.t[i].shape[0] &&
                     x->shape[1] == b.t[i].shape[1] && x->dtype == b.t[i].dtype;
        CHECK(shape);
        if (shape && memcmp(x->data, b.t[i].data, x->end - x->begin) != 0) differ++;
    }
    CHECK_INT_EQ(differ, 0);
    CHECK(tr_st_meta(&a, "format") && strcmp(tr_st_meta(&a, "format"), "pt") == 0);
    tr_st_close(&a);
    tr_st_close(&b);
    tr_diags_free(&d);
}

/* The keys peft reads: ours must hold the values peft's own file holds. */
static void same_config(const char *ours, const char *theirs) {
    tr_diags d = {0};
    char *ta = NULL, *tb = NULL;
    size_t la = 0, lb = 0;
    tr_json a = {0}, b = {0};
    CHECK_INT_EQ(tr_read_file(ours, "t", &ta, &la, &d), TR_OK);
    CHECK_INT_EQ(tr_read_file(theirs, "t", &tb, &lb, &d), TR_OK);
    CHECK_INT_EQ(tr_json_parse(ta, la, ours, &a, &d), TR_OK);
    CHECK_INT_EQ(tr_json_parse(tb, lb, theirs, &b, &d), TR_OK);
    const char *keys[] = {"peft_type", "task_type", "r",          "lora_alpha",    "lora_dropout",
                          "bias",      "use_dora",  "use_rslora", "fan_in_fan_out"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const tr_json *x = tr_json_get(&a, keys[i]), *y = tr_json_get(&b, keys[i]);
        CHECK(x && y && x->type == y->type);
        if (!x || !y || x->type != y->type) {
            printf("  key %s differs\n", keys[i]);
            continue;
        }
        if (x->type == TR_JSON_NUMBER) CHECK(x->number == y->number);
        if (x->type == TR_JSON_STRING) CHECK(strcmp(x->str, y->str) == 0);
    }
    const tr_json *x = tr_json_get(&a, "target_modules"), *y = tr_json_get(&b, "target_modules");
    CHECK(x && y && x->type == TR_JSON_ARRAY && y->type == TR_JSON_ARRAY && x->n == y->n);
    for (size_t i = 0; x && y && x->n == y->n && i < y->n; i++) {
        bool found = false;
        for (size_t j = 0; j < x->n; j++) found |= strcmp(x->items[j].str, y->items[i].str) == 0;
        CHECK(found);
    }
    const tr_json *base = tr_json_get(&a, "base_model_name_or_path");
    CHECK(base && base->type == TR_JSON_STRING && strcmp(base->str, "hf_llama") == 0);
    tr_json_free(&a), tr_json_free(&b);
    free(ta), free(tb);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
}

static void parity(const char *base, const char *adapter, const char *expected) {
    tr_diags d = {0};
    tr_model m;
    CHECK(lora_model(&m, base, 4, 0, 1, &d));
    CHECK_INT_EQ(tr_hf_adapter_import(&m, adapter, &d), TR_OK);
    fixture f;
    CHECK(fixture_load(&f, expected));
    const fix_tensor *tok = fixture_get(&f, "", "tokens"), *tgt = fixture_get(&f, "", "targets");
    const fix_tensor *logits = fixture_get(&f, "", "logits"), *loss = fixture_get(&f, "", "loss");
    int rows = 2 * m.full.seq;
    CHECK(tok && tgt && logits && loss && (int)tok->n == rows && rows <= 64);
    if (tok && tgt && logits && loss && (int)tok->n == rows && rows <= 64) {
        int32_t ids[64], tg[64];
        for (int i = 0; i < rows; i++)
            ids[i] = (int32_t)tok->data[i], tg[i] = (int32_t)tgt->data[i];
        float l = 0;
        CHECK_INT_EQ(tr_model_forward(&m, ids, tg, &l), TR_OK);
        double e = rel_err(m.logits, logits->data, (int64_t)rows * m.full.vocab);
        printf("  %s: logits relative error %.3g vs peft, loss %.7f vs %.7f\n", adapter, e,
               (double)l, (double)loss->data[0]);
        CHECK(e <= 1e-5);
        CHECK_CLOSE(l, loss->data[0], 1e-5, 0);
    }
    /* Export: peft's tensors and keys back. */
    char out[256], a[300], b[300];
    snprintf(out, sizeof out, "/tmp/trestle_peft_%ld", (long)getpid());
    CHECK_INT_EQ(tr_hf_adapter_export(&m, out, "hf_llama", TR_ST_F32, &d), TR_OK);
    CHECK(tr_hf_is_adapter_dir(out));
    snprintf(a, sizeof a, "%s/adapter_model.safetensors", out);
    snprintf(b, sizeof b, "%s/adapter_model.safetensors", adapter);
    same_tensors(a, b);
    snprintf(a, sizeof a, "%s/adapter_config.json", out);
    snprintf(b, sizeof b, "%s/adapter_config.json", adapter);
    same_config(a, b);
    /* Each TP 2 shard reads exactly its slice of the adapters. */
    for (int r = 0; r < 2; r++) {
        tr_model part;
        CHECK(lora_model(&part, base, 4, r, 2, &d));
        CHECK_INT_EQ(tr_hf_adapter_import(&part, out, &d), TR_OK);
        int64_t wrong = 0, seen = 0;
        for (int i = 0; i < part.n_info; i++) {
            const tr_param_info *p = &part.info[i];
            const tr_param_info *q = tr_model_find_param(&m, p->name);
            if (!strstr(p->name, ".adapter.") || !q) continue;
            for (int64_t e = 0; e < p->numel; e++, seen++)
                wrong += part.params[p->offset + e] !=
                         m.params[q->offset + tr_model_logical_index(&part, p, e)];
        }
        CHECK(seen > 0);
        CHECK_INT_EQ(wrong, 0);
        tr_model_free(&part);
    }
    snprintf(a, sizeof a, "%s/adapter_model.safetensors", out);
    unlink(a);
    snprintf(a, sizeof a, "%s/adapter_config.json", out);
    unlink(a);
    rmdir(out);
    tr_model_free(&m);
    fixture_free(&f);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
}

static void test_parity_with_peft(void) {
    parity(FIX "hf_llama", FIX "peft_llama", "peft_llama/expected.bin");
    parity(FIX "hf_qwen3", FIX "peft_qwen3", "peft_qwen3/expected.bin");
}

/* A copy of the Llama adapter with config.json's text edited (from -> to) or one tensor's
 * values changed; the import is refused with `id`, and the message names `word`. */
static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    CHECK(a && b);
    char buf[65536];
    size_t n;
    while (a && b && (n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    if (a) fclose(a);
    if (b) fclose(b);
}

static void expect_refused(const char *cfg_from, const char *cfg_to, bool change_k_a,
                           bool drop_tensor, const char *id, const char *word) {
    char dir[256], p[300];
    snprintf(dir, sizeof dir, "/tmp/trestle_peft_bad_%ld", (long)getpid());
    mkdir(dir, 0755);
    tr_diags d = {0};
    char *text = NULL;
    size_t len = 0;
    CHECK_INT_EQ(tr_read_file(FIX "peft_llama/adapter_config.json", "t", &text, &len, &d), TR_OK);
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    FILE *f = fopen(p, "w");
    char *at = cfg_from ? strstr(text, cfg_from) : NULL;
    CHECK(!cfg_from || at);
    if (f && at) {
        fwrite(text, 1, (size_t)(at - text), f);
        fputs(cfg_to, f);
        fputs(at + strlen(cfg_from), f);
    } else if (f) {
        fputs(text, f);
    }
    if (f) fclose(f);
    free(text);
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    if (change_k_a || drop_tensor) {
        tr_st_file src;
        CHECK_INT_EQ(tr_st_open(&src, FIX "peft_llama/adapter_model.safetensors", &d), TR_OK);
        tr_st_entry e[64];
        float *copy = NULL;
        int n = 0;
        for (int i = 0; i < src.n && n < 64; i++) {
            const tr_st_tensor *t = &src.t[i];
            const char *k = "base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight";
            bool is_k = strcmp(t->name, k) == 0;
            if (drop_tensor && is_k) continue;
            e[n] = (tr_st_entry){t->name, t->dtype, t->ndim, t->shape, t->data};
            if (change_k_a && is_k) {
                copy = malloc(t->end - t->begin);
                memcpy(copy, t->data, t->end - t->begin);
                copy[3] += 0.25f;
                e[n].data = copy;
            }
            n++;
        }
        CHECK_INT_EQ(tr_st_write(p, e, n, NULL, NULL, 0, &d), TR_OK);
        free(copy);
        tr_st_close(&src);
    } else {
        copy_file(FIX "peft_llama/adapter_model.safetensors", p);
    }
    tr_model m;
    CHECK(lora_model(&m, FIX "hf_llama", 4, 0, 1, &d));
    CHECK_INT_EQ(d.n_errors, 0);
    CHECK(tr_hf_adapter_import(&m, dir, &d) != TR_OK);
    bool found = false;
    for (int i = 0; i < d.n; i++)
        found |= strcmp(d.items[i].id, id) == 0 && strstr(d.items[i].message, word) != NULL;
    if (!found) tr_diags_print_text(&d, stdout, false);
    CHECK(found);
    tr_model_free(&m);
    tr_diags_free(&d);
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    unlink(p);
    rmdir(dir);
}

static void test_refusals(void) {
    expect_refused("\"r\": 4", "\"r\": 8", false, false, "hf.adapter", "r is 8");
    expect_refused("\"lora_alpha\": 8", "\"lora_alpha\": 16", false, false, "hf.adapter",
                   "lora_alpha");
    expect_refused("\"use_dora\": false", "\"use_dora\": true", false, false, "hf.adapter",
                   "use_dora");
    expect_refused("\"k_proj\"", "\"o_proj\"", false, false, "hf.adapter", "fused");
    expect_refused("\"peft_type\": \"LORA\"", "\"peft_type\": \"IA3\"", false, false, "hf.adapter",
                   "peft_type");
    expect_refused(NULL, NULL, true, false, "hf.tensor", "layers.1.self_attn.k_proj.lora_A");
    expect_refused(NULL, NULL, false, true, "hf.tensor", "layers.1.self_attn.k_proj.lora_A");
    /* The fixture's model with one layer fewer has no place for layer 1's adapters. */
    tr_diags d = {0};
    tr_model m;
    tr_model_spec s;
    CHECK(spec_from_dir(FIX "hf_llama", &s, &d));
    s.num_layers = 1;
    s.lora_rank = 4;
    s.lora_targets =
        (1u << TR_LORA_QKV) | (1u << TR_LORA_PROJ) | (1u << TR_LORA_FC1) | (1u << TR_LORA_FC2);
    s.lora_scale = 2.0f;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 2), TR_OK);
    CHECK(tr_hf_adapter_import(&m, FIX "peft_llama", &d) != TR_OK);
    CHECK(d.n > 0 && strcmp(d.items[d.n - 1].id, "hf.tensor") == 0 &&
          strstr(d.items[d.n - 1].message, "layers.1.") != NULL);
    tr_model_free(&m);
    tr_diags_free(&d);
}

/* LoRA on MoE experts (runtime/moe/lora.c) has no PEFT names: export and import refuse the
 * model, naming an expert adapter. */
static void test_expert_adapters_refused(void) {
    tr_diags d = {0};
    tr_model_spec s;
    CHECK(spec_from_dir(FIX "hf_llama", &s, &d));
    s.lora_rank = 2;
    s.lora_targets = (1u << TR_LORA_QKV) | (1u << TR_LORA_FC1);
    s.lora_scale = 1.0f;
    s.moe = (tr_moe_spec){.experts = 2, .topk = 1, .ffn = 8, .topk_scale = 1.0f, .ep_size = 1};
    s.moe.layers[0] = 2u;
    s.moe.lora_rank = 2;
    s.moe.lora_fc1 = true;
    s.moe.lora_scale = 1.0f;
    tr_model m;
    CHECK_INT_EQ(tr_model_create(&m, &s, (tr_tp_shard){0, 1}, tr_ops_cpu(), 2), TR_OK);
    char out[] = "/tmp/trestle_moe_adapterXXXXXX";
    CHECK(mkdtemp(out) != NULL);
    for (int import = 0; import < 2; import++) {
        tr_status st = import ? tr_hf_adapter_import(&m, FIX "peft_llama", &d)
                              : tr_hf_adapter_export(&m, out, "hf_llama", TR_ST_F32, &d);
        CHECK(st != TR_OK);
        CHECK(d.n > 0 && strcmp(d.items[d.n - 1].id, "hf.adapter") == 0 &&
              strstr(d.items[d.n - 1].message,
                     "decoder.layers.1.mlp.experts.local_experts.0.linear_fc1.adapter") != NULL);
    }
    rmdir(out);
    tr_model_free(&m);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_parity_with_peft), TR_TEST(test_refusals),
             TR_TEST(test_expert_adapters_refused))
