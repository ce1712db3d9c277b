/* tr_resolve: the order recipe < YAML files < CLI, `~key`, error collection, unknown recipes,
 * skip_validate and bad world sizes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "recipes/resolve.h"
#include "tests/unit/harness.h"

typedef struct run {
    tr_config c;
    tr_diags d;
    tr_status s;
} run;

static void resolve(run *r, const char *recipe, const char *const *files, int n_files,
                    const char *const *cli, int n_cli, int world, bool skip_validate) {
    tr_diags_init(&r->d);
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = recipe;
    o.config_files = files;
    o.n_config_files = n_files;
    o.overrides = cli;
    o.n_overrides = n_cli;
    o.world = (tr_world){world, world < 8 ? world : 8};
    o.validate.catalog_mode = true;
    o.skip_validate = skip_validate;
    r->s = tr_resolve(&o, &r->c, &r->d);
}

static void done(run *r) {
    tr_config_free(&r->c);
    tr_diags_free(&r->d);
}

static char *temp_yaml(const char *text) {
    char *path = strdup("/tmp/trestle_resolve_XXXXXX.yaml");
    int fd = mkstemps(path, 5);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static void test_plain_recipe(void) {
    run r;
    resolve(&r, "llama_tiny_pretrain", NULL, 0, NULL, 0, 1, false);
    CHECK(r.s == TR_OK);
    CHECK(r.c.finalized);
    CHECK_STR_EQ(r.c.recipe_name, "llama_tiny_pretrain");
    CHECK(r.c.recipe_snapshot != NULL);
    CHECK(r.c.derived.num_params > 0);
    done(&r);
}

/* recipe < file < CLI, each recorded with its origin. */
static void test_precedence(void) {
    char *y = temp_yaml("train:\n  train_iters: 5\n  global_batch_size: 16\n");
    const char *files[] = {y};
    const char *cli[] = {"train.train_iters=9"};
    run r;
    resolve(&r, "llama_tiny_pretrain", files, 1, cli, 1, 1, false);
    CHECK(r.s == TR_OK);
    CHECK_INT_EQ(r.c.train.train_iters, 9);
    CHECK(r.c.origin[TR_FID_train_train_iters].kind == TR_ORIGIN_CLI);
    CHECK_INT_EQ(r.c.train.global_batch_size, 16);
    CHECK(r.c.origin[TR_FID_train_global_batch_size].kind == TR_ORIGIN_FILE);
    CHECK(r.c.origin[TR_FID_train_micro_batch_size].kind == TR_ORIGIN_RECIPE);
    CHECK(r.c.origin[TR_FID_model_hidden_size].kind == TR_ORIGIN_PROVIDER);
    done(&r);
    /* `~key` restores the recipe's value even after a file changed it. */
    const char *reset[] = {"~train.global_batch_size"};
    resolve(&r, "llama_tiny_pretrain", files, 1, reset, 1, 1, false);
    CHECK(r.s == TR_OK);
    CHECK_INT_EQ(r.c.train.global_batch_size, 8);
    done(&r);
    unlink(y);
    free(y);
}

static void test_unknown_recipe(void) {
    run r;
    resolve(&r, "llama32_1b_pretrian", NULL, 0, NULL, 0, 1, false);
    CHECK(r.s == TR_ERR_NOTFOUND);
    const tr_diag *g = tr_diags_find(&r.d, "recipe.unknown");
    CHECK(g != NULL);
    if (g) {
        CHECK_CONTAINS(g->message, "llama32_1b_pretrian");
        CHECK_CONTAINS(g->hint, "llama32_1b_pretrain");
    }
    done(&r);
    resolve(&r, "no_such_thing_whatsoever_at_all", NULL, 0, NULL, 0, 1, false);
    g = tr_diags_find(&r.d, "recipe.unknown");
    CHECK(g != NULL);
    if (g) CHECK_CONTAINS(g->hint, "--list-recipes");
    done(&r);
}

static void test_no_recipe(void) {
    run r;
    resolve(&r, NULL, NULL, 0, NULL, 0, 1, false);
    CHECK(r.s == TR_ERR_INVALID);
    CHECK(tr_diags_find(&r.d, "resolve.no_recipe") != NULL);
    done(&r);
}

/* Every input error is reported in one pass; finalize() never sees a broken config. */
static void test_errors_accumulate(void) {
    char *y = temp_yaml("train:\n  train_itres: 5\n");
    const char *files[] = {y};
    const char *cli[] = {"model.num_layerz=3", "train.global_batch_size=abc"};
    run r;
    resolve(&r, "llama_tiny_pretrain", files, 1, cli, 2, 1, false);
    CHECK(r.s == TR_ERR_INVALID);
    CHECK_INT_EQ(r.d.n_errors, 3);
    CHECK(!r.c.finalized);
    done(&r);
    unlink(y);
    free(y);
}

/* A rule violation: TR_ERR_CONFIG from validate(), or TR_OK with skip_validate. */
static void test_validate_and_skip(void) {
    const char *cli[] = {"model.tensor_model_parallel_size=3"};
    run r;
    resolve(&r, "llama_tiny_pretrain", NULL, 0, cli, 1, 3, false);
    CHECK(r.s == TR_ERR_CONFIG);
    CHECK(r.d.n_errors > 0);
    CHECK(r.c.finalized);
    done(&r);
    resolve(&r, "llama_tiny_pretrain", NULL, 0, cli, 1, 3, true);
    CHECK(r.s == TR_OK);
    CHECK_INT_EQ(r.d.n_errors, 0);
    CHECK(r.c.finalized);
    done(&r);
}

static void test_bad_world(void) {
    run r;
    resolve(&r, "llama_tiny_pretrain", NULL, 0, NULL, 0, 0, false);
    CHECK(r.s == TR_ERR_INVALID);
    CHECK(tr_diags_find(&r.d, "resolve.world") != NULL);
    done(&r);
}

/* Megatron-Bridge spellings resolve to the same recipe and mode. */
static void test_megatron_spelling(void) {
    run r;
    resolve(&r, "llama32_1b_peft_config", NULL, 0, NULL, 0, 1, false);
    CHECK(r.s == TR_OK);
    CHECK_STR_EQ(r.c.recipe_name, "llama32_1b_lora");
    CHECK(r.c.derived.mode == TR_MODE_LORA);
    done(&r);
}

/* The same inputs give the same fingerprint (resolution is deterministic). */
static void test_deterministic(void) {
    run a, b;
    resolve(&a, "qwen3_30b_a3b_pretrain", NULL, 0, NULL, 0, 16, false);
    resolve(&b, "qwen3_30b_a3b_pretrain", NULL, 0, NULL, 0, 16, false);
    CHECK(a.s == TR_OK && b.s == TR_OK);
    CHECK(tr_config_fingerprint(&a.c) == tr_config_fingerprint(&b.c));
    done(&a);
    resolve(&a, "qwen3_30b_a3b_pretrain", NULL, 0, NULL, 0, 32, false);
    CHECK(tr_config_fingerprint(&a.c) != tr_config_fingerprint(&b.c));
    done(&a);
    done(&b);
}

TR_TEST_MAIN(TR_TEST(test_plain_recipe), TR_TEST(test_precedence), TR_TEST(test_unknown_recipe),
             TR_TEST(test_no_recipe), TR_TEST(test_errors_accumulate),
             TR_TEST(test_validate_and_skip), TR_TEST(test_bad_world),
             TR_TEST(test_megatron_spelling), TR_TEST(test_deterministic))
