/* YAML override files: the format, every error path with file:line:col, precedence against the
 * recipe and the command line, and the dump -> load round trip. */
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/field_parse.h"
#include "overrides/overrides.h"
#include "tests/unit/harness.h"

typedef struct fixture {
    tr_config c;
    tr_diags d;
    char dir[64];
    int n_files;
} fixture;

static void setup(fixture *f) {
    tr_diags_init(&f->d);
    if (tr_config_init(&f->c, &f->d) != TR_OK) abort();
    snprintf(f->dir, sizeof f->dir, "/tmp/tr_yaml_test_XXXXXX");
    if (!mkdtemp(f->dir)) abort();
    f->n_files = 0;
}

static void teardown(fixture *f) {
    char path[128];
    for (int i = 0; i < f->n_files; i++) {
        snprintf(path, sizeof path, "%s/f%d.yaml", f->dir, i);
        unlink(path);
    }
    rmdir(f->dir);
    tr_config_free(&f->c);
    tr_diags_free(&f->d);
}

/* Writes text (len bytes, or strlen) to a fresh file and returns its path (static buffer). */
static const char *write_file(fixture *f, const char *text, size_t len) {
    static char path[128];
    snprintf(path, sizeof path, "%s/f%d.yaml", f->dir, f->n_files++);
    FILE *fp = fopen(path, "wb");
    if (!fp) abort();
    fwrite(text, 1, len ? len : strlen(text), fp);
    fclose(fp);
    return path;
}

static tr_status apply_text(fixture *f, const char *text) {
    return tr_config_apply_yaml_file(&f->c, write_file(f, text, 0), &f->d);
}

static const tr_diag *expect(const fixture *f, const char *id, int line, int col) {
    const tr_diag *dg = tr_diags_find(&f->d, id);
    if (!dg) {
        fprintf(stderr, "  no diagnostic %s among:\n", id);
        tr_diags_print_text(&f->d, stderr, false);
        tr_test_failures++;
        return NULL;
    }
    CHECK_INT_EQ(dg->origin.kind, TR_ORIGIN_FILE);
    if (line) CHECK_INT_EQ(dg->origin.line, line);
    if (col) CHECK_INT_EQ(dg->origin.col, col);
    CHECK_CONTAINS(dg->origin_text, "/f");
    return dg;
}

static void test_nested_dotted_flow_and_block(void) {
    fixture f;
    setup(&f);
    CHECK_INT_EQ(apply_text(&f, "# a comment\n"
                                "model:\n"
                                "  num_layers: 8\n"
                                "  normalization: RMSNorm\n"
                                "  window_size: [-1, 64]\n"
                                "optimizer: {lr: 3e-4, weight_decay: 0.1}\n"
                                "model.hidden_size: 512\n"
                                "dataset:\n"
                                "  data_path:\n"
                                "    - /d/a\n"
                                "    - 'null'\n"
                                "train:\n"
                                "  train_iters: ~\n"
                                "  micro_batch_size:\n"
                                "checkpoint:\n"
                                "  save: \"true\"\n"
                                "mixed_precision: bf16_mixed\n"
                                "peft: lora\n"
                                "logger:\n"
                                "rng: {seed: 7}\n"),
                 TR_OK);
    CHECK_INT_EQ(f.d.n_errors, 0);
    CHECK_INT_EQ(f.c.model.num_layers, 8);
    CHECK_INT_EQ(f.c.model.normalization, TR_NORM_RMSNORM);
    CHECK_INT_EQ(f.c.model.window_size.n, 2);
    CHECK_INT_EQ(f.c.model.window_size.v[0], -1);
    CHECK(f.c.optimizer.lr == 3e-4);
    CHECK(f.c.optimizer.weight_decay == 0.1);
    CHECK_INT_EQ(f.c.model.hidden_size, 512);
    CHECK_INT_EQ(f.c.dataset.data_path.n, 2);
    CHECK_STR_EQ(f.c.dataset.data_path.v[1], "null");
    CHECK_INT_EQ(f.c.train.train_iters, TR_NULL_INT);
    CHECK_INT_EQ(f.c.train.micro_batch_size, TR_NULL_INT);
    CHECK_STR_EQ(f.c.checkpoint.save, "true");
    CHECK_INT_EQ(f.c.mixed_precision.preset, TR_MPRESET_BF16_MIXED);
    CHECK_INT_EQ(f.c.peft.scheme, TR_PEFT_LORA);
    CHECK_INT_EQ(f.c.rng.seed, 7);
    /* Each value's origin is the key's line:column. */
    const tr_origin *o = &f.c.origin[TR_FID_model_num_layers];
    CHECK_INT_EQ(o->kind, TR_ORIGIN_FILE);
    CHECK_INT_EQ(o->line, 3);
    CHECK_INT_EQ(o->col, 3);
    CHECK_INT_EQ(f.c.origin[TR_FID_optimizer_weight_decay].line, 6);
    CHECK_INT_EQ(f.c.origin[TR_FID_optimizer_weight_decay].col, 23);
    CHECK_INT_EQ(f.c.origin[TR_FID_model_hidden_size].line, 7);
    teardown(&f);
}

static void test_dotted_keys_inside_sections_and_skip_keys(void) {
    fixture f;
    setup(&f);
    tr_value root;
    const char *text = "base_recipe: llama32_1b_pretrain\ntrain: {global_batch_size: 32}\n";
    CHECK_INT_EQ(tr_yaml_parse_text(&f.c, text, strlen(text), "mem.yaml", &root, &f.d), TR_OK);
    const char *const skip[] = {"base_recipe", NULL};
    CHECK_INT_EQ(tr_yaml_apply(&f.c, &root, skip, &f.d), TR_OK);
    CHECK_INT_EQ(f.c.train.global_batch_size, 32);
    CHECK_STR_EQ(f.c.origin[TR_FID_train_global_batch_size].name, "mem.yaml");
    /* Without skip_keys the same key is unknown. */
    CHECK(tr_yaml_apply(&f.c, &root, NULL, &f.d) != TR_OK);
    CHECK(tr_diags_find(&f.d, "override.unknown_key") != NULL);
    tr_value_free(&root);
    teardown(&f);
}

static void test_every_error_of_a_file_in_one_pass(void) {
    fixture f;
    setup(&f);
    tr_status s = apply_text(&f, "model:\n"
                                 "  num_layrs: 4\n"            /* 2: unknown, suggestion */
                                 "  num_layers: {a: 1}\n"      /* 3: mapping for a scalar */
                                 "  hidden_size: 256\n"        /* 4: fine, still applied */
                                 "  hidden_size: 128\n"        /* 5: duplicate */
                                 "modle: {num_layers: 2}\n"    /* 6: unknown section */
                                 "train: {train_iters: abc}\n" /* 7: type error */
                                 "optimizer: 3\n"              /* 8: section with a value */
                                 "derived: {world_size: 8}\n"  /* 9: skipped with a note */
                                 "train.micro_batch_size: 2\n");
    CHECK_INT_EQ(s, TR_ERR_INVALID);
    const tr_diag *dg = expect(&f, "override.unknown_key", 2, 3);
    if (dg) CHECK_CONTAINS(dg->hint, "model.num_layers");
    dg = expect(&f, "override.yaml_mapping", 3, 3);
    dg = expect(&f, "override.yaml_duplicate", 5, 3);
    if (dg) CHECK_CONTAINS(dg->message, "line 4");
    CHECK_INT_EQ(f.c.model.hidden_size, 256);
    int unknown_section = 0;
    for (int i = 0; i < f.d.n; i++)
        if (!strcmp(f.d.items[i].id, "override.unknown_key") && f.d.items[i].origin.line == 6) {
            unknown_section++;
            CHECK_CONTAINS(f.d.items[i].hint, "model");
        }
    CHECK_INT_EQ(unknown_section, 1);
    dg = expect(&f, "override.type", 7, 9);
    dg = expect(&f, "override.section", 8, 1);
    const tr_diag *note = tr_diags_find(&f.d, "override.yaml_derived");
    CHECK(note && note->severity == TR_SEV_NOTE);
    CHECK_INT_EQ(f.c.derived.world_size, 1);
    CHECK_INT_EQ(f.c.train.micro_batch_size, 2);
    CHECK_INT_EQ(f.d.n_errors, 6);
    teardown(&f);
}

static void test_syntax_and_structure_errors(void) {
    struct {
        const char *text;
        const char *id;
        int line, col;
    } cases[] = {
        {"model:\n  num_layers: [1, 2\n", "override.yaml_syntax", 0, 0},
        {"model: {num_layers: 2\n", "override.yaml_syntax", 0, 0},
        {"model:\n\tnum_layers: 2\n", "override.yaml_syntax", 2, 0},
        {"- a\n- b\n", "override.yaml_top_level", 1, 1},
        {"just a string\n", "override.yaml_top_level", 1, 1},
        {"a: &x 1\nb: *x\n", "override.yaml_anchor", 1, 4},
        {"model: {num_layers: !!python/int 2}\n", "override.yaml_tag", 1, 21},
        {"checkpoint: {save: \"a\\0b\"}\n", "override.yaml_nul", 1, 20},
        {"checkpoint:\n  save: ${oc.env:HOME}/x\n", "override.interpolation", 2, 9},
        {"? [a, b]\n: 1\n", "override.yaml_key", 1, 3},
        {"train: {train_iters: 1}\n---\ntrain: {train_iters: 2}\n", "override.yaml_documents", 2,
         1},
        {"model: "
         "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
         "]]]]]]]]]]]]]]]\n",
         "override.yaml_depth", 1, 0},
        {"model: {num_layers: 1}\nx: \"\xc3\x28\"\n", "override.yaml_encoding", 2, 5},
        {"# only a comment\n\n", "override.yaml_empty", 0, 0},
        {"", "override.yaml_empty", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fixture f;
        setup(&f);
        tr_status s = apply_text(&f, cases[i].text);
        if (s == TR_OK || f.d.n_errors == 0) {
            fprintf(stderr, "  case %zu accepted: %s\n", i, cases[i].text);
            tr_test_failures++;
        }
        expect(&f, cases[i].id, cases[i].line, cases[i].col);
        teardown(&f);
    }
}

static void test_alias_bomb_is_rejected_quickly(void) {
    fixture f;
    setup(&f);
    char text[4096];
    size_t n = (size_t)snprintf(text, sizeof text, "a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
    for (int i = 1; i < 10; i++)
        n += (size_t)snprintf(text + n, sizeof text - n,
                              "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n",
                              i, i, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1);
    CHECK(apply_text(&f, text) != TR_OK);
    expect(&f, "override.yaml_anchor", 1, 0);
    teardown(&f);
}

static void test_file_errors_name_the_file(void) {
    fixture f;
    setup(&f);
    CHECK_INT_EQ(tr_config_apply_yaml_file(&f.c, "/nonexistent/dir/x.yaml", &f.d), TR_ERR_NOTFOUND);
    const tr_diag *dg = tr_diags_find(&f.d, "override.file");
    CHECK(dg != NULL);
    if (dg) CHECK_CONTAINS(dg->message, "/nonexistent/dir/x.yaml");
    tr_diags_clear(&f.d);
    CHECK(tr_config_apply_yaml_file(&f.c, f.dir, &f.d) != TR_OK);
    dg = tr_diags_find(&f.d, "override.file");
    if (dg) CHECK_CONTAINS(dg->message, "directory");
    tr_diags_clear(&f.d);
    if (geteuid() != 0) { /* root reads anything */
        const char *p = write_file(&f, "train: {train_iters: 1}\n", 0);
        chmod(p, 0);
        CHECK_INT_EQ(tr_config_apply_yaml_file(&f.c, p, &f.d), TR_ERR_IO);
    }
    teardown(&f);
}

/* recipe < file 1 < file 2 < CLI token 1 < CLI token 2, and ~key back to the recipe. */
static void test_precedence(void) {
    fixture f;
    setup(&f);
    tr_config before;
    CHECK_INT_EQ(tr_config_copy(&before, &f.c), TR_OK);
    f.c.train.train_iters = 100;
    f.c.model.num_layers = 16;
    f.c.optimizer.lr = 1e-4;
    f.c.rng.seed = 11;
    tr_origin recipe = tr_origin_make(TR_ORIGIN_RECIPE, "test_recipe");
    CHECK_INT_EQ(tr_config_mark_changes(&f.c, &before, &recipe), TR_OK);
    CHECK_INT_EQ(tr_config_snapshot_recipe(&f.c), TR_OK);
    tr_config_free(&before);

    CHECK_INT_EQ(apply_text(&f, "train: {train_iters: 200}\nmodel: {num_layers: 8}\n"
                                "optimizer: {lr: 2e-4}\n"),
                 TR_OK);
    CHECK_INT_EQ(apply_text(&f, "train: {train_iters: 300}\nmodel: {num_layers: 4}\n"), TR_OK);
    CHECK_INT_EQ(f.c.train.train_iters, 300);
    CHECK_INT_EQ(f.c.model.num_layers, 4);
    CHECK(f.c.optimizer.lr == 2e-4); /* file 2 does not touch it: file 1 stands */
    CHECK_INT_EQ(f.c.rng.seed, 11);  /* nobody touched it: the recipe stands */
    CHECK_INT_EQ(f.c.origin[TR_FID_rng_seed].kind, TR_ORIGIN_RECIPE);
    const char *toks[] = {"train.train_iters=400", "train.train_iters=500", "~model.num_layers"};
    int argi[] = {4, 5, 6};
    CHECK_INT_EQ(tr_overrides_apply_argv(&f.c, toks, argi, 3, &f.d), TR_OK);
    CHECK_INT_EQ(f.c.train.train_iters, 500);
    CHECK_INT_EQ(f.c.origin[TR_FID_train_train_iters].argi, 5);
    CHECK_INT_EQ(f.c.model.num_layers, 16); /* the recipe's, although both files changed it */
    CHECK_INT_EQ(f.d.n_errors, 0);
    teardown(&f);
}

static void set_text(tr_config *c, const char *key, const char *value, tr_diags *d) {
    tr_origin o = tr_origin_make(TR_ORIGIN_API, "test");
    if (tr_config_set_text(c, key, value, &o, d) != TR_OK) {
        fprintf(stderr, "  cannot set %s=%s\n", key, value);
        tr_test_failures++;
    }
}

static void test_dump_round_trip(void) {
    fixture f;
    setup(&f);
    tr_config *c = &f.c;
    set_text(c, "model.num_layers", "12", &f.d);
    set_text(c, "model.normalization", "RMSNorm", &f.d);
    set_text(c, "model.gated_linear_unit", "true", &f.d);
    set_text(c, "optimizer.lr", "3e-4", &f.d);
    set_text(c, "optimizer.clip_grad", "inf", &f.d);
    set_text(c, "optimizer.weight_decay", "1e-300", &f.d);
    set_text(c, "comm_overlap.tp_comm_overlap", "true", &f.d);
    set_text(c, "train.train_iters", "123456789012", &f.d);
    set_text(c, "model.window_size", "-1", &f.d);
    set_text(c, "peft.scheme", "dora", &f.d);
    set_text(c, "checkpoint.ckpt_format", "trestle", &f.d);
    const char *nasty[] = {"null",
                           "true",
                           "a: b",
                           "# hash",
                           "-dash",
                           " padded ",
                           "x,y",
                           "[br]",
                           "quo\"te",
                           "back\\slash",
                           "tab\there",
                           "line\nbreak",
                           "日本語",
                           "1e5",
                           "~",
                           "",
                           "'single'",
                           "%percent",
                           "del\x7f",
                           "nel\xc2\x85x",
                           "ls\xe2\x80\xa8x",
                           "${not_interp}",
                           "a${b}c"};
    CHECK_INT_EQ(tr_config_set_strlist(c, TR_FID_dataset_data_path, nasty,
                                       (int)(sizeof nasty / sizeof nasty[0])),
                 TR_OK);
    CHECK_INT_EQ(tr_config_set_str(c, TR_FID_checkpoint_save, "null"), TR_OK);
    CHECK_INT_EQ(tr_config_set_str(c, TR_FID_dataset_separator, "\n### Response: "), TR_OK);
    CHECK_INT_EQ(tr_config_set_strlist(c, TR_FID_model_recompute_modules, NULL, 0), TR_OK);
    CHECK_INT_EQ(tr_config_set_strlist(c, TR_FID_dataset_valid_data_path, nasty, 0), TR_OK);
    int64_t ints[] = {-5, 0, INT64_MAX};
    CHECK_INT_EQ(tr_config_set_intlist(c, TR_FID_model_window_size, ints, 3), TR_OK);
    CHECK_INT_EQ(f.d.n_errors, 0);

    char *dump = tr_config_dump_yaml_string(c);
    CHECK(dump != NULL);
    tr_config fresh;
    tr_diags d2;
    tr_diags_init(&d2);
    CHECK_INT_EQ(tr_config_init(&fresh, &d2), TR_OK);
    tr_value root;
    CHECK_INT_EQ(tr_yaml_parse_text(&fresh, dump, strlen(dump), "dump.yaml", &root, &d2), TR_OK);
    CHECK_INT_EQ(tr_yaml_apply(&fresh, &root, NULL, &d2), TR_OK);
    tr_value_free(&root);
    if (d2.n_errors) tr_diags_print_text(&d2, stderr, false);
    CHECK_INT_EQ(d2.n_errors, 0);
    for (int i = 0; i < tr_field_count; i++) {
        if (!tr_config_field_equal(c, &fresh, &tr_fields[i])) {
            fprintf(stderr, "  round trip changed %s\n", tr_fields[i].path);
            tr_test_failures++;
        }
    }
    CHECK(tr_config_fingerprint(c) == tr_config_fingerprint(&fresh));
    CHECK(isinf(fresh.optimizer.clip_grad));
    CHECK_STR_EQ(fresh.checkpoint.save, "null");
    free(dump);
    tr_config_free(&fresh);
    tr_diags_free(&d2);
    teardown(&f);
}

TR_TEST_MAIN(TR_TEST(test_nested_dotted_flow_and_block),
             TR_TEST(test_dotted_keys_inside_sections_and_skip_keys),
             TR_TEST(test_every_error_of_a_file_in_one_pass),
             TR_TEST(test_syntax_and_structure_errors),
             TR_TEST(test_alias_bomb_is_rejected_quickly), TR_TEST(test_file_errors_name_the_file),
             TR_TEST(test_precedence), TR_TEST(test_dump_round_trip))
