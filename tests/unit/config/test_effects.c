/* Holds the field table's effect marking honest against the sources, and checks the rules of
 * core/rules/effects.c through the same resolution a dry run uses.
 *
 * A field is "read" by a file when the file has `.name` or `->name` (name = the field's C
 * member) not followed by an identifier character. That over-approximates reads (a member of the
 * same name in another struct counts), which is the safe side for the first check and the weak
 * side for the second: a marked field must have no such match at all in the runtime, and an
 * unmarked one must have at least one where effects come from. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "recipes/resolve.h"
#include "tests/unit/harness.h"

typedef struct source {
    char *path, *text;
} source;

typedef struct tree {
    source *v;
    int n, cap;
} tree;

static bool is_source(const char *name) {
    static const char *const ext[] = {".c", ".h", ".cu", ".cuh"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t e = strlen(ext[i]);
        if (n > e && strcmp(name + n - e, ext[i]) == 0) return true;
    }
    return false;
}

static void add_file(tree *t, const char *path) {
    char *text = tr_test_read_file(path);
    if (!text) return;
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->v = realloc(t->v, (size_t)t->cap * sizeof *t->v);
    }
    t->v[t->n].path = strdup(path);
    t->v[t->n].text = text;
    t->n++;
}

/* path relative to the source root: a file, or a folder walked recursively; missing is fine (a
 * rule file another branch adds). */
static void add(tree *t, const char *rel) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", TRESTLE_SOURCE_DIR, rel);
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) {
        add_file(t, path);
        return;
    }
    DIR *dir = opendir(path);
    if (!dir) return;
    for (struct dirent *e; (e = readdir(dir));) {
        if (e->d_name[0] == '.') continue;
        char sub[4096], full[8192];
        snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
        snprintf(full, sizeof full, "%s/%s", TRESTLE_SOURCE_DIR, sub);
        if (stat(full, &st) != 0) continue;
        if (S_ISDIR(st.st_mode))
            add(t, sub);
        else if (is_source(e->d_name))
            add_file(t, full);
    }
    closedir(dir);
}

static void tree_free(tree *t) {
    for (int i = 0; i < t->n; i++) free(t->v[i].path), free(t->v[i].text);
    free(t->v);
}

static bool ident(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

/* The first file of t that reads member name, or NULL. */
static const char *reader(const tree *t, const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < t->n; i++)
        for (const char *p = t->v[i].text; (p = strstr(p, name)); p += n) {
            bool member = (p > t->v[i].text && p[-1] == '.') ||
                          (p - t->v[i].text >= 2 && p[-1] == '>' && p[-2] == '-');
            if (member && !ident(p[n])) return t->v[i].path;
        }
    return NULL;
}

/* Where a field's effect can come from: the runtime and kernels, the launch, finalize() (which
 * turns keys into other keys) and the rules that refuse a key outright. */
static void effect_tree(tree *t) {
    add(t, "runtime");
    add(t, "kernels");
    add(t, "scripts/cli_launch.c"); /* not cli_report.c: printing a key is not acting on it */
    add(t, "scripts/run_recipe.c");
    add(t, "core/finalize.c");
    add(t, "core/rules/effects.c");
    add(t, "core/rules/runtime.c");
}

static void test_scanner_sees_reads(void) {
    /* Without this the two checks below could pass on an empty or unreadable tree. */
    tree t = {0};
    effect_tree(&t);
    CHECK(t.n > 100);
    CHECK(reader(&t, "tensor_model_parallel_size") != NULL);
    CHECK(reader(&t, "multi_latent_attention") != NULL); /* by its refusal */
    CHECK(reader(&t, "tensor_model_parallel") == NULL);  /* a prefix is not a member */
    CHECK(reader(&t, "no_such_member_anywhere") == NULL);
    tree_free(&t);
}

static void test_marked_fields_are_not_read(void) {
    tree t = {0};
    add(&t, "runtime");
    add(&t, "kernels");
    add(&t, "scripts/cli_launch.c");
    int marked = 0;
    for (int i = 0; i < tr_field_count; i++) {
        const tr_field *f = &tr_fields[i];
        if (!(f->flags & (TR_F_NO_EFFECT | TR_F_UNBUILT))) continue;
        marked++;
        const char *where = reader(&t, f->name);
        if (where) fprintf(stderr, "  %s is marked but %s reads it\n", f->path, where);
        CHECK(where == NULL);
    }
    CHECK(marked > 100);
    tree_free(&t);
}

static void test_unmarked_fields_are_read(void) {
    tree t = {0};
    effect_tree(&t);
    for (int i = 0; i < tr_field_count; i++) {
        const tr_field *f = &tr_fields[i];
        /* Derived fields are outputs nobody sets; the dry run prints them. */
        if (f->flags & (TR_F_NO_EFFECT | TR_F_UNBUILT | TR_F_DERIVED)) continue;
        const char *where = reader(&t, f->name);
        if (!where)
            fprintf(stderr,
                    "  %s is not marked, refused or read by the runtime: mark it "
                    "no-effect/unbuilt or refuse it in core/rules/effects.c\n",
                    f->path);
        CHECK(where != NULL);
    }
    tree_free(&t);
}

static void test_flags_exclusive(void) {
    for (int i = 0; i < tr_field_count; i++) {
        unsigned fl = tr_fields[i].flags;
        CHECK(!((fl & TR_F_NO_EFFECT) && (fl & TR_F_UNBUILT)));
        CHECK(!((fl & TR_F_DERIVED) && (fl & (TR_F_NO_EFFECT | TR_F_UNBUILT))));
    }
}

/* Resolve llama_tiny_pretrain at world 2 with the ';'-separated overrides, as a dry run does. */
static tr_status resolve(const char *overrides, tr_config *c, tr_diags *d) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", overrides);
    const char *argv[16];
    int argi[16], n = 0;
    for (char *save = NULL, *kv = strtok_r(buf, ";", &save); kv && n < 16;
         kv = strtok_r(NULL, ";", &save)) {
        argi[n] = n + 1;
        argv[n++] = kv;
    }
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = "llama_tiny_pretrain";
    o.overrides = argv;
    o.override_argi = argi;
    o.n_overrides = n;
    o.world = (tr_world){2, 2};
    return tr_resolve(&o, c, d);
}

static const tr_diag *note_of(const tr_diags *d) {
    return tr_diags_find(d, "config.no_effect");
}

static bool lists(const tr_diag *g, const char *key) {
    size_t n = strlen(key);
    for (const char *k = g ? g->keys : NULL; k && (k = strstr(k, key)); k += n)
        if ((k == g->keys || k[-1] == ',') && (k[n] == ',' || k[n] == 0)) return true;
    return false;
}

static void test_note_names_what_was_set(void) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    tr_status s = resolve("model.tensor_model_parallel_size=2;model.sequence_parallel=true;"
                          "model.tp_comm_bulk_dgrad=false;comm_overlap.tp_comm_overlap=true;"
                          "model.recompute_granularity=full;"
                          "model.recompute_method=uniform;model.recompute_num_layers=1;"
                          "model.moe_grouped_gemm=true",
                          &c, &d);
    CHECK_INT_EQ(s, TR_OK);
    const tr_diag *g = note_of(&d);
    CHECK(g != NULL);
    if (g) {
        CHECK_INT_EQ(g->severity, TR_SEV_NOTE);
        CHECK(lists(g, "model.tp_comm_bulk_dgrad"));
        CHECK(lists(g, "model.moe_grouped_gemm"));
        CHECK_CONTAINS(g->message, "model.tp_comm_bulk_dgrad=false (argv[3])");
        CHECK_CONTAINS(g->message, "feature not built");
        /* finalize copied the overlap into model.tp_comm_overlap, which the runtime applies */
        CHECK(c.model.tp_comm_overlap);
        CHECK(!lists(g, "comm_overlap.tp_comm_overlap"));
        CHECK(!lists(g, "model.tp_comm_overlap"));
        /* read by the runtime: never in the note */
        CHECK(!lists(g, "model.recompute_granularity"));
        CHECK(!lists(g, "model.recompute_num_layers"));
        CHECK(!lists(g, "model.tensor_model_parallel_size"));
        CHECK(!lists(g, "model.sequence_parallel"));
    }
    CHECK_INT_EQ(d.n_errors, 0);
    tr_config_free(&c);
    tr_diags_free(&d);
}

static void test_note_ignores_default_values(void) {
    /* Set, but to the default: nothing changes, so there is nothing to say about it. */
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(resolve("model.masked_softmax_fusion=true;train.train_sync_interval=null", &c, &d),
                 TR_OK);
    const tr_diag *g = note_of(&d);
    CHECK(!lists(g, "model.masked_softmax_fusion"));
    CHECK(!lists(g, "train.train_sync_interval"));
    tr_config_free(&c);
    tr_diags_free(&d);
    tr_diags_init(&d);
    CHECK_INT_EQ(resolve("model.masked_softmax_fusion=false", &c, &d), TR_OK);
    CHECK(lists(note_of(&d), "model.masked_softmax_fusion"));
    tr_config_free(&c);
    tr_diags_free(&d);
}

static void expect_refused(const char *overrides, const char *id, const char *key) {
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(resolve(overrides, &c, &d), TR_ERR_CONFIG);
    const tr_diag *g = tr_diags_find(&d, id);
    if (!g) fprintf(stderr, "  %s: no %s\n", overrides, id);
    CHECK(g != NULL);
    if (g) {
        CHECK_INT_EQ(g->severity, TR_SEV_ERROR);
        CHECK_STR_EQ(g->keys, key);
        CHECK(g->hint != NULL);
    }
    tr_config_free(&c);
    tr_diags_free(&d);
}

static void test_refusals(void) {
    expect_refused("model.multi_latent_attention=true;model.normalization=LayerNorm",
                   "runtime.mla_layernorm", "model.normalization,model.multi_latent_attention");
    expect_refused("model.pipeline_model_parallel_size=2;model.virtual_pipeline_model_parallel_"
                   "size=1;model.overlap_p2p_comm=true;model.batch_p2p_comm=false;"
                   "model.overlap_p2p_comm_warmup_flush=true",
                   "runtime.p2p_warmup_flush", "model.overlap_p2p_comm_warmup_flush");
    expect_refused("dataset.dataloader_type=cyclic", "runtime.dataloader_type",
                   "dataset.dataloader_type");
    expect_refused("train.train_iters=null;train.num_epochs=1;dataset.dataloader_type=batch",
                   "runtime.num_epochs", "train.num_epochs");
    expect_refused("dataset.drop_last=false", "runtime.drop_last", "dataset.drop_last");
    expect_refused("ddp.check_for_large_grads=true", "runtime.gradient_checks",
                   "ddp.check_for_large_grads");
    expect_refused("train.skip_sync_grad_norm_across_mp=true", "runtime.grad_norm_across_mp",
                   "train.skip_sync_grad_norm_across_mp");
    expect_refused("rerun_state_machine.rerun_mode=validate_results", "runtime.rerun_state_machine",
                   "rerun_state_machine.rerun_mode");
    expect_refused("validation.multiple_validation_sets=true", "runtime.validation_sets",
                   "validation.multiple_validation_sets");
    expect_refused("scheduler.use_checkpoint_opt_param_scheduler=true",
                   "runtime.checkpoint_scheduler", "scheduler.use_checkpoint_opt_param_scheduler");
    expect_refused("checkpoint.non_persistent_save_interval=10",
                   "runtime.non_persistent_checkpoints", "checkpoint.non_persistent_save_interval");
    expect_refused("tokenizer.vocab_extra_ids=4", "runtime.tokenizer_options",
                   "tokenizer.vocab_extra_ids");
    expect_refused("rng.data_parallel_random_init=true", "runtime.init_and_adapter_dtype",
                   "rng.data_parallel_random_init");
}

static void test_recipe_without_marked_keys_is_quiet(void) {
    /* The same recipe and layout with nothing set has no note about the keys set above. */
    tr_config c;
    tr_diags d;
    tr_diags_init(&d);
    CHECK_INT_EQ(resolve("", &c, &d), TR_OK);
    const tr_diag *g = note_of(&d);
    CHECK(!lists(g, "comm_overlap.tp_comm_overlap"));
    CHECK(!lists(g, "model.moe_router_topk"));
    CHECK_INT_EQ(d.n_errors, 0);
    tr_config_free(&c);
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_scanner_sees_reads), TR_TEST(test_marked_fields_are_not_read),
             TR_TEST(test_unmarked_fields_are_read), TR_TEST(test_flags_exclusive),
             TR_TEST(test_note_names_what_was_set), TR_TEST(test_note_ignores_default_values),
             TR_TEST(test_refusals), TR_TEST(test_recipe_without_marked_keys_is_quiet))
