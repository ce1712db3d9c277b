/* YAML recipes: base_recipe chains, the dump round trip, the shipped examples, and clean errors
 * (ids, and file:line locations) for every way a YAML recipe can be wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "recipes/resolve.h"
#include "tests/unit/harness.h"

static char dir[256];

static void make_dir(void) {
    if (dir[0]) return;
    snprintf(dir, sizeof dir, "/tmp/trestle_yaml_recipe_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
}

/* Write dir/name and return its path (static buffer per call slot). */
static const char *write_file(const char *name, const char *text) {
    static char paths[16][512];
    static int next;
    make_dir();
    char *p = paths[next++ % 16];
    snprintf(p, 512, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return p;
}

typedef struct run {
    tr_config c;
    tr_diags d;
    tr_status s;
} run;

static void resolve_world(run *r, const char *recipe, const char *const *files, int n,
                          const char *const *cli, int n_cli, int world) {
    tr_diags_init(&r->d);
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = recipe;
    o.config_files = files;
    o.n_config_files = n;
    o.overrides = cli;
    o.n_overrides = n_cli;
    o.world = (tr_world){world, world < 8 ? world : 8};
    o.validate.catalog_mode = true;
    r->s = tr_resolve(&o, &r->c, &r->d);
}

static void resolve_files(run *r, const char *recipe, const char *const *files, int n,
                          const char *const *cli, int n_cli) {
    resolve_world(r, recipe, files, n, cli, n_cli, 1);
}

static void done(run *r) {
    tr_config_free(&r->c);
    tr_diags_free(&r->d);
}

static const tr_diag *expect_diag(const run *r, const char *id, const char *origin_part) {
    const tr_diag *g = tr_diags_find(&r->d, id);
    if (!g) {
        fprintf(stderr, "  expected diagnostic %s; got:\n", id);
        tr_diags_print_text(&r->d, stderr, false);
        CHECK(g != NULL);
        return NULL;
    }
    CHECK(g->severity == TR_SEV_ERROR);
    if (origin_part) CHECK_CONTAINS(g->origin_text, origin_part);
    return g;
}

/* A chain: child.yaml -> parent.yaml -> llama_tiny_pretrain; later files win. */
static void test_chain(void) {
    write_file("parent.yaml", "base_recipe: llama_tiny_pretrain\n"
                              "train:\n  train_iters: 5\n  global_batch_size: 16\n");
    const char *child = write_file("child.yaml", "base_recipe: parent.yaml\n"
                                                 "train:\n  train_iters: 7\n");
    run r;
    const char *files[] = {child};
    resolve_files(&r, NULL, files, 1, NULL, 0);
    CHECK(r.s == TR_OK);
    CHECK_INT_EQ(r.c.train.train_iters, 7);
    CHECK_INT_EQ(r.c.train.global_batch_size, 16);
    CHECK_INT_EQ(r.c.model.num_layers, 2);
    CHECK_STR_EQ(r.c.recipe_name, "llama_tiny_pretrain");
    CHECK(r.c.origin[TR_FID_train_train_iters].kind == TR_ORIGIN_FILE);
    CHECK_CONTAINS(r.c.origin[TR_FID_train_train_iters].name, "child.yaml");
    CHECK_INT_EQ(r.c.origin[TR_FID_train_train_iters].line, 3);
    done(&r);

    /* `~key` goes back to the YAML recipe's value, not the registry recipe's. */
    const char *cli[] = {"train.train_iters=100", "~train.global_batch_size"};
    resolve_files(&r, NULL, files, 1, cli, 2);
    CHECK(r.s == TR_OK);
    CHECK_INT_EQ(r.c.train.train_iters, 100);
    CHECK_INT_EQ(r.c.train.global_batch_size, 16);
    done(&r);
}

/* --recipe plus a file naming the same recipe is fine; a different one is an error. */
static void test_recipe_and_base(void) {
    const char *same = write_file("same.yaml", "base_recipe: llama_tiny_pretrain\n"
                                               "train:\n  train_iters: 9\n");
    const char *other = write_file("other.yaml", "base_recipe: gpt_tiny_pretrain\n");
    run r;
    const char *f1[] = {same};
    resolve_files(&r, "llama_tiny_pretrain", f1, 1, NULL, 0);
    CHECK(r.s == TR_OK);
    CHECK_INT_EQ(r.c.train.train_iters, 9);
    done(&r);
    /* Megatron-Bridge's spelling of the same recipe counts as the same recipe. */
    resolve_files(&r, "llama_tiny_pretrain_config", f1, 1, NULL, 0);
    CHECK(r.s == TR_OK);
    done(&r);
    const char *f2[] = {other};
    resolve_files(&r, "llama_tiny_pretrain", f2, 1, NULL, 0);
    CHECK(r.s == TR_ERR_INVALID);
    const tr_diag *g = expect_diag(&r, "recipe.base_conflict", "other.yaml:1");
    if (g) CHECK_CONTAINS(g->message, "gpt_tiny_pretrain");
    done(&r);
    /* Only the first file may choose the recipe. */
    const char *f3[] = {same, other};
    resolve_files(&r, NULL, f3, 2, NULL, 0);
    CHECK(r.s == TR_ERR_INVALID);
    expect_diag(&r, "recipe.base_conflict", "other.yaml:1");
    done(&r);
}

static void test_unknown_base(void) {
    const char *f = write_file("typo.yaml", "train:\n  train_iters: 3\n"
                                            "base_recipe: llama_tiny_pretrian\n");
    run r;
    const char *files[] = {f};
    resolve_files(&r, NULL, files, 1, NULL, 0);
    CHECK(r.s != TR_OK);
    const tr_diag *g = expect_diag(&r, "recipe.unknown", "typo.yaml:3");
    if (g) {
        CHECK_CONTAINS(g->message, "llama_tiny_pretrian");
        CHECK_CONTAINS(g->hint, "llama_tiny_pretrain");
    }
    done(&r);
}

static void test_unknown_key_and_wrong_type(void) {
    const char *f = write_file("badkeys.yaml", "base_recipe: llama_tiny_pretrain\n"
                                               "train:\n"
                                               "  train_iterz: 3\n"
                                               "  global_batch_size: lots\n");
    run r;
    const char *files[] = {f};
    resolve_files(&r, NULL, files, 1, NULL, 0);
    CHECK(r.s == TR_ERR_INVALID);
    /* Both errors of the file are reported, each at its line. */
    const tr_diag *g = expect_diag(&r, "override.unknown_key", "badkeys.yaml:3");
    if (g) CHECK_CONTAINS(g->hint ? g->hint : g->message, "train_iters");
    expect_diag(&r, "override.type", "badkeys.yaml:4");
    CHECK(!r.c.finalized);
    done(&r);
}

static void test_cycle(void) {
    write_file("a.yaml", "base_recipe: b.yaml\n");
    const char *b = write_file("b.yaml", "train:\n  train_iters: 3\nbase_recipe: a.yaml\n");
    run r;
    const char *files[] = {b};
    resolve_files(&r, NULL, files, 1, NULL, 0);
    CHECK(r.s != TR_OK);
    const tr_diag *g = expect_diag(&r, "recipe.base_cycle", "a.yaml:1");
    if (g) {
        CHECK_CONTAINS(g->message, "a.yaml");
        CHECK_CONTAINS(g->message, "b.yaml");
    }
    done(&r);
    /* A file naming itself. */
    const char *self = write_file("self.yaml", "base_recipe: self.yaml\n");
    const char *f2[] = {self};
    resolve_files(&r, NULL, f2, 1, NULL, 0);
    expect_diag(&r, "recipe.base_cycle", "self.yaml:1");
    done(&r);
}

static void test_base_not_a_string(void) {
    const char *cases[][2] = {
        {"list.yaml", "base_recipe: [llama_tiny_pretrain]\n"},
        {"map.yaml", "base_recipe:\n  name: llama_tiny_pretrain\n"},
        {"null.yaml", "base_recipe: null\n"},
    };
    for (size_t i = 0; i < 3; i++) {
        const char *f = write_file(cases[i][0], cases[i][1]);
        run r;
        const char *files[] = {f};
        resolve_files(&r, NULL, files, 1, NULL, 0);
        CHECK(r.s == TR_ERR_INVALID);
        char where[64];
        snprintf(where, sizeof where, "%s:", cases[i][0]);
        expect_diag(&r, "recipe.base_type", where);
        done(&r);
    }
}

static void test_missing_files(void) {
    run r;
    make_dir();
    char missing[512];
    snprintf(missing, sizeof missing, "%s/does_not_exist.yaml", dir);
    const char *files[] = {missing};
    resolve_files(&r, NULL, files, 1, NULL, 0);
    CHECK(r.s != TR_OK);
    const tr_diag *g = expect_diag(&r, "recipe.yaml_missing", "does_not_exist.yaml");
    if (g) CHECK_CONTAINS(g->message, "does_not_exist.yaml");
    done(&r);
    /* A missing base is reported where the base is named. */
    const char *f = write_file("dangling.yaml", "\nbase_recipe: nowhere/base.yaml\n");
    const char *f2[] = {f};
    resolve_files(&r, NULL, f2, 1, NULL, 0);
    CHECK(r.s != TR_OK);
    g = expect_diag(&r, "recipe.yaml_missing", "dangling.yaml:2");
    if (g) CHECK_CONTAINS(g->message, "nowhere/base.yaml");
    done(&r);
}

/* Resolve a recipe with overrides, dump it, load the dump as the recipe: same fingerprint. The
 * dump has no base_recipe, so it loads over the table defaults; it holds every field, and its
 * derived: section is recomputed. */
static void test_dump_round_trip(void) {
    const char *recipes[] = {"llama32_1b_pretrain", "llama3_70b_pretrain", "qwen3_30b_a3b_sft",
                             "llama_tiny_lora", "deepseek_v3_pretrain"};
    for (size_t i = 0; i < sizeof recipes / sizeof recipes[0]; i++) {
        const char *cli[] = {"train.train_iters=123", "optimizer.lr=0.0002",
                             "model.recompute_granularity=full", "model.recompute_method=uniform",
                             "model.recompute_num_layers=1"};
        int world = tr_recipe_find(recipes[i])->min_world_size;
        run a;
        resolve_world(&a, recipes[i], NULL, 0, cli, 5, world);
        CHECK(a.s == TR_OK);
        if (a.s != TR_OK) tr_diags_print_text(&a.d, stderr, false);
        char *text = tr_config_dump_yaml_string(&a.c);
        CHECK(text != NULL);
        char name[128];
        snprintf(name, sizeof name, "dump_%s.yaml", recipes[i]);
        const char *path = write_file(name, text ? text : "");
        free(text);
        run b;
        const char *files[] = {path};
        resolve_world(&b, NULL, files, 1, NULL, 0, world);
        CHECK(b.s == TR_OK);
        if (b.s != TR_OK) tr_diags_print_text(&b.d, stderr, false);
        uint64_t fa = tr_config_fingerprint(&a.c), fb = tr_config_fingerprint(&b.c);
        if (fa != fb) {
            fprintf(stderr, "  %s: fingerprints differ; first differing fields:\n", recipes[i]);
            int shown = 0;
            for (int f = 0; f < tr_field_count && shown < 8; f++) {
                if (tr_config_field_equal(&a.c, &b.c, &tr_fields[f])) continue;
                char va[256], vb[256];
                tr_config_field_format(&a.c, &tr_fields[f], va, sizeof va);
                tr_config_field_format(&b.c, &tr_fields[f], vb, sizeof vb);
                fprintf(stderr, "    %s: %s vs %s\n", tr_fields[f].path, va, vb);
                shown++;
            }
        }
        CHECK(fa == fb);
        done(&a);
        done(&b);
    }
}

/* The example recipes shipped in recipes/yaml resolve without errors. */
static void test_examples(void) {
    const char *names[] = {"llama32_1b_short.yaml", "llama32_1b_short_cp2.yaml",
                           "llama_tiny_text.yaml"};
    for (size_t i = 0; i < 3; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/recipes/yaml/%s", TRESTLE_SOURCE_DIR, names[i]);
        run r;
        const char *files[] = {path};
        const char *cli[] = {"dataset.data_path=[corpus.txt]"};
        int n_cli = strstr(names[i], "text") ? 1 : 0;
        resolve_world(&r, NULL, files, 1, cli, n_cli, strstr(names[i], "cp2") ? 2 : 1);
        if (r.s != TR_OK || r.d.n_errors) tr_diags_print_text(&r.d, stderr, false);
        CHECK(r.s == TR_OK);
        done(&r);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/recipes/yaml/llama32_1b_short_cp2.yaml", TRESTLE_SOURCE_DIR);
    run r;
    const char *files[] = {path};
    resolve_world(&r, NULL, files, 1, NULL, 0, 2);
    CHECK(r.s == TR_OK);
    CHECK_INT_EQ(r.c.model.context_parallel_size, 2);
    CHECK_INT_EQ(r.c.model.seq_length, 4096);
    CHECK_INT_EQ(r.c.train.train_iters, 200);
    done(&r);
}

static void cleanup(void) {
    if (!dir[0]) return;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

TR_TEST_MAIN(TR_TEST(test_chain), TR_TEST(test_recipe_and_base), TR_TEST(test_unknown_base),
             TR_TEST(test_unknown_key_and_wrong_type), TR_TEST(test_cycle),
             TR_TEST(test_base_not_a_string), TR_TEST(test_missing_files),
             TR_TEST(test_dump_round_trip), TR_TEST(test_examples), TR_TEST(cleanup))
