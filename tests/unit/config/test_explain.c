/* --explain KEY: the override chain of a field, oldest first, with the winner marked. */
#include <stdlib.h>
#include <unistd.h>

#include "overrides/overrides.h"
#include "tests/unit/harness.h"

/* Runs --explain into a temporary file and returns its text (malloc'd). A tmpfile rather than
 * open_memstream: gcc 12 takes the memstream's buffer pointer for a dangling local. */
static char *explain(const tr_config *c, const char *key, tr_diags *d, tr_status *s) {
    FILE *out = tmpfile();
    *s = TR_ERR_INVALID; /* no temporary file: the checks on s fail */
    if (!out) return NULL;
    *s = tr_config_explain(c, key, out, d);
    long len = ftell(out);
    char *text = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (text) {
        rewind(out);
        size_t got = fread(text, 1, (size_t)len, out);
        text[got] = '\0';
    }
    fclose(out);
    return text;
}

/* Position of needle in text, or -1. */
static long offset_of(const char *text, const char *needle) {
    const char *p = text ? strstr(text, needle) : NULL;
    return p ? (long)(p - text) : -1;
}

/* The line of text that contains needle, for checking what is marked on it. */
static const char *line_with(const char *text, const char *needle, char *buf, size_t cap) {
    const char *p = text ? strstr(text, needle) : NULL;
    if (!p) return "";
    while (p > text && p[-1] != '\n') p--;
    const char *e = strchr(p, '\n');
    snprintf(buf, cap, "%.*s", (int)(e ? e - p : (long)strlen(p)), p);
    return buf;
}

static void test_chain_from_default_to_cli(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    CHECK_INT_EQ(tr_config_init(&c, &d), TR_OK);
    tr_config before;
    CHECK_INT_EQ(tr_config_copy(&before, &c), TR_OK);
    c.optimizer.lr = 1e-4;
    tr_origin recipe = tr_origin_make(TR_ORIGIN_RECIPE, "llama32_1b_pretrain");
    CHECK_INT_EQ(tr_config_mark_changes(&c, &before, &recipe), TR_OK);
    tr_config_free(&before);

    char path[] = "/tmp/tr_explain_XXXXXX";
    int fd = mkstemp(path);
    const char *yaml = "train: {train_iters: 5}\noptimizer:\n  lr: 2.5e-4\n";
    CHECK(write(fd, yaml, strlen(yaml)) == (ssize_t)strlen(yaml));
    close(fd);
    CHECK_INT_EQ(tr_config_apply_yaml_file(&c, path, &d), TR_OK);
    unlink(path);
    const char *toks[] = {"optimizer.lr=7e-4", "train.train_iters=9"};
    int argi[] = {5, 6};
    CHECK_INT_EQ(tr_overrides_apply_argv(&c, toks, argi, 2, &d), TR_OK);

    tr_status s;
    char *text = explain(&c, "optimizer.lr", &d, &s);
    CHECK_INT_EQ(s, TR_OK);
    CHECK_CONTAINS(text, "optimizer.lr");
    CHECK_CONTAINS(text, tr_field_by_path("optimizer.lr")->doc);
    CHECK_CONTAINS(text, "float or null");
    /* Order: default, recipe, file, CLI. */
    char where[160];
    snprintf(where, sizeof where, "%s:3:3", path);
    long pd = offset_of(text, "default"), pr = offset_of(text, "recipe llama32_1b_pretrain");
    long pf = offset_of(text, where), pc = offset_of(text, "argv[5]");
    CHECK(pd >= 0 && pr >= 0 && pf >= 0 && pc >= 0);
    CHECK(pd < pr && pr < pf && pf < pc);
    char buf[512];
    CHECK_CONTAINS(line_with(text, "recipe llama32_1b_pretrain", buf, sizeof buf), "0.0001");
    CHECK_CONTAINS(line_with(text, where, buf, sizeof buf), "0.00025");
    CHECK_CONTAINS(line_with(text, "argv[5]", buf, sizeof buf), "0.0007");
    CHECK_CONTAINS(line_with(text, "argv[5]", buf, sizeof buf), "<- in effect");
    CHECK(!strstr(line_with(text, where, buf, sizeof buf), "in effect"));
    CHECK(!strstr(text, "argv[6]")); /* another field's history */
    free(text);

    /* A field nobody touched: the default is in effect. */
    text = explain(&c, "model.num_layers", &d, &s);
    CHECK_INT_EQ(s, TR_OK);
    CHECK_CONTAINS(line_with(text, "default", buf, sizeof buf), "<- in effect");
    CHECK_CONTAINS(text, "range 0..");
    free(text);

    /* Shorthands explain the field they stand for; enums list their values. */
    text = explain(&c, "peft", &d, &s);
    CHECK_INT_EQ(s, TR_OK);
    CHECK_CONTAINS(text, "peft.scheme");
    CHECK_CONTAINS(text, "lora|dora");
    free(text);
    CHECK_INT_EQ(d.n_errors, 0);

    /* A value written without a record is reported as such, not credited to the last origin. */
    c.optimizer.lr = 0.5;
    text = explain(&c, "optimizer.lr", &d, &s);
    CHECK_CONTAINS(line_with(text, "(not recorded)", buf, sizeof buf), "0.5");
    CHECK(!strstr(line_with(text, "argv[5]", buf, sizeof buf), "in effect"));
    free(text);

    tr_config_free(&c);
    tr_diags_free(&d);
}

static void test_derived_origin_text(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    CHECK_INT_EQ(tr_config_init(&c, &d), TR_OK);
    tr_value v;
    tr_origin o = tr_origin_make(TR_ORIGIN_DERIVED, "finalize");
    CHECK_INT_EQ(tr_value_scalar(&v, "8", false, o), TR_OK);
    CHECK_INT_EQ(tr_config_set(&c, tr_field_by_path("derived.world_size"), &v, &o, &d), TR_OK);
    tr_value_free(&v);
    tr_status s;
    char *text = explain(&c, "derived.world_size", &d, &s);
    CHECK_INT_EQ(s, TR_OK);
    char buf[256];
    CHECK_CONTAINS(line_with(text, "derived by finalize", buf, sizeof buf), "8");
    CHECK_CONTAINS(line_with(text, "derived by finalize", buf, sizeof buf), "<- in effect");
    CHECK_CONTAINS(text, "computed by finalize()");
    free(text);
    tr_config_free(&c);
    tr_diags_free(&d);
}

static void test_unknown_key_suggests(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    CHECK_INT_EQ(tr_config_init(&c, &d), TR_OK);
    tr_status s;
    char *text = explain(&c, "train.lr", &d, &s);
    CHECK_INT_EQ(s, TR_ERR_NOTFOUND);
    const tr_diag *dg = tr_diags_find(&d, "override.unknown_key");
    CHECK(dg != NULL);
    if (dg) CHECK_CONTAINS(dg->hint, "optimizer.lr");
    free(text);
    tr_diags_clear(&d);
    text = explain(&c, "model", &d, &s);
    CHECK(s != TR_OK);
    CHECK(tr_diags_find(&d, "override.section") != NULL);
    free(text);
    tr_config_free(&c);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_chain_from_default_to_cli), TR_TEST(test_derived_origin_text),
             TR_TEST(test_unknown_key_suggests))
