/* Catalog validation (--validate-all): zero failures over 8..16384 GPUs, failures reported one
 * line each, layouts that do not fit skipped, launch inputs kept apart, and the catalog table in
 * docs/recipes.md kept in sync with the registry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "recipes/catalog.h"
#include "recipes/registry.h"
#include "tests/unit/harness.h"

static const int worlds[] = {8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

static void test_whole_catalog_passes(void) {
    char *fail_text = NULL, *req_text = NULL;
    size_t fl = 0, rl = 0;
    FILE *fails = open_memstream(&fail_text, &fl);
    FILE *reqs = open_memstream(&req_text, &rl);
    tr_catalog_opts o;
    memset(&o, 0, sizeof o);
    o.world_sizes = worlds;
    o.n_world_sizes = 12;
    o.failures = fails;
    o.requirements = reqs;
    tr_catalog_result r;
    int failures = tr_catalog_validate(&o, &r);
    fclose(fails);
    fclose(reqs);
    if (failures) fprintf(stderr, "%s", fail_text);
    CHECK_INT_EQ(failures, 0);
    int n;
    tr_recipe_list(&n);
    CHECK_INT_EQ(r.recipes, n);
    CHECK(r.checks >= n);
    CHECK(r.skipped > 0); /* deepseek_v3 cannot run on 8 GPUs, for one */
    /* Fine-tuning recipes need data and a checkpoint at launch: requirements, not failures. */
    CHECK(r.requirements > 0);
    CHECK_CONTAINS(req_text, "llama32_1b_lora: needs at launch: launch.");
    free(fail_text);
    free(req_text);
}

static void test_failures_are_reported(void) {
    char path[] = "/tmp/trestle_catalog_XXXXXX.yaml";
    int fd = mkstemps(path, 5);
    CHECK(fd >= 0);
    FILE *y = fdopen(fd, "w");
    /* 32 heads do not split over TP 3: a real rule violation. */
    fputs("base_recipe: llama32_1b_pretrain\nmodel:\n  tensor_model_parallel_size: 3\n", y);
    fclose(y);
    const char *files[] = {path};
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    tr_catalog_opts o;
    memset(&o, 0, sizeof o);
    o.world_sizes = worlds;
    o.n_world_sizes = 2;
    o.yaml_recipes = files;
    o.n_yaml_recipes = 1;
    o.failures = out;
    tr_catalog_result r;
    int failures = tr_catalog_validate(&o, &r);
    fclose(out);
    CHECK(failures > 0);
    CHECK_INT_EQ(failures, r.failures);
    /* "<recipe> @ world N: <rule id>: <message>", with the minimum world size 3 first. */
    char expect[600];
    snprintf(expect, sizeof expect, "%s @ world 3: ", path);
    CHECK_CONTAINS(text, expect);
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        CHECK(nl != NULL);
        if (!nl) break;
        *nl = '\0';
        CHECK(strncmp(line, path, strlen(path)) == 0);
        CHECK_CONTAINS(line, " @ world ");
        line = nl + 1;
    }
    free(text);
    unlink(path);

    /* An unreadable YAML recipe is a failure too, not a crash. */
    const char *missing[] = {"/nonexistent/trestle/recipe.yaml"};
    o.yaml_recipes = missing;
    o.failures = NULL;
    o.n_world_sizes = 0;
    CHECK(tr_catalog_validate(&o, &r) >= 1);
}

/* Layout fit: a size the grid does not divide is skipped, not failed. */
static void test_layout_skip(void) {
    static const int odd[] = {3, 5, 7};
    tr_catalog_opts o;
    memset(&o, 0, sizeof o);
    o.world_sizes = odd;
    o.n_world_sizes = 3;
    tr_catalog_result r;
    CHECK_INT_EQ(tr_catalog_validate(&o, &r), 0);
    int n;
    const tr_recipe *list = tr_recipe_list(&n);
    int min_is_one = 0;
    for (int i = 0; i < n; i++) min_is_one += list[i].min_world_size == 1;
    /* Recipes with a minimum of 1 may fit odd sizes; all others must be skipped at 3, 5 and 7. */
    CHECK(r.skipped >= 3 * (n - min_is_one));
}

/* docs/recipes.md embeds the catalog table between markers; regenerate it with
 *   TRESTLE_UPDATE_DOCS=1 ./test_catalog   (writes the table into the file). */
static void test_docs_table_fresh(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/docs/recipes.md", TRESTLE_SOURCE_DIR);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) return;
    char *doc = NULL;
    size_t cap = 0;
    ssize_t got = getdelim(&doc, &cap, '\0', f);
    fclose(f);
    CHECK(got > 0);
    FILE *mem;
    size_t len = 0;
    char *table = NULL;
    mem = open_memstream(&table, &len);
    tr_catalog_markdown(mem);
    fclose(mem);
    const char *begin_mark = "<!-- catalog:begin -->\n", *end_mark = "<!-- catalog:end -->";
    char *b = doc ? strstr(doc, begin_mark) : NULL;
    char *e = b ? strstr(b, end_mark) : NULL;
    CHECK(b && e);
    if (b && e) {
        b += strlen(begin_mark);
        bool fresh = (size_t)(e - b) == strlen(table) && !strncmp(b, table, strlen(table));
        if (!fresh && getenv("TRESTLE_UPDATE_DOCS")) {
            FILE *w = fopen(path, "w");
            CHECK(w != NULL);
            if (w) {
                fwrite(doc, 1, (size_t)(b - doc), w);
                fputs(table, w);
                fputs(e, w);
                fclose(w);
            }
            fresh = true;
        }
        if (!fresh)
            fprintf(stderr, "  docs/recipes.md is stale; run TRESTLE_UPDATE_DOCS=1 test_catalog\n");
        CHECK(fresh);
    }
    free(doc);
    free(table);
}

TR_TEST_MAIN(TR_TEST(test_whole_catalog_passes), TR_TEST(test_failures_are_reported),
             TR_TEST(test_layout_skip), TR_TEST(test_docs_table_fresh))
