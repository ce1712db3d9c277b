/* Every recipe against recipes/megatron_bridge_values.md, the table of the values Megatron-Bridge's
 * recipe functions set (read off its source, not off Trestle's code): each recipe is resolved at
 * its minimum world size and every key=value of its row is checked, with the "Trestle differs"
 * column winning where Trestle deliberately departs (and then the catalog line says so). */
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "overrides/overrides.h"
#include "recipes/registry.h"
#include "recipes/resolve.h"
#include "tests/unit/harness.h"

static const struct {
    const char *abbrev, *keys[2];
} abbrevs[] = {
    {"tp", {"model.tensor_model_parallel_size"}},
    {"pp", {"model.pipeline_model_parallel_size"}},
    {"vpp", {"model.virtual_pipeline_model_parallel_size"}},
    {"cp", {"model.context_parallel_size"}},
    {"ep", {"model.expert_model_parallel_size"}},
    {"etp", {"model.expert_tensor_parallel_size"}},
    {"sp", {"model.sequence_parallel"}},
    {"seq", {"model.seq_length", "dataset.seq_length"}},
    {"mbs", {"train.micro_batch_size"}},
    {"gbs", {"train.global_batch_size"}},
    {"iters", {"train.train_iters"}},
    {"eval", {"validation.eval_interval"}},
    {"eval_iters", {"validation.eval_iters"}},
    {"lr", {"optimizer.lr"}},
    {"min_lr", {"optimizer.min_lr"}},
    {"warmup", {"scheduler.lr_warmup_iters"}},
    {"decay", {"scheduler.lr_decay_iters"}},
    {"b1", {"optimizer.adam_beta1"}},
    {"b2", {"optimizer.adam_beta2"}},
    {"eps", {"optimizer.adam_eps"}},
    {"wd", {"optimizer.weight_decay"}},
    {"clip", {"optimizer.clip_grad"}},
    {"wsd", {"scheduler.lr_wsd_decay_style"}},
    {"oops", {"scheduler.override_opt_param_scheduler"}},
    {"distopt", {"optimizer.use_distributed_optimizer", "ddp.use_distributed_optimizer"}},
    {"gradfp32", {"ddp.grad_reduce_in_fp32"}},
    {"ogr", {"ddp.overlap_grad_reduce"}},
    {"opg", {"ddp.overlap_param_gather"}},
    {"tp_overlap", {"model.tp_comm_overlap"}},
    {"recompute", {"model.recompute_granularity"}},
    {"ce_fusion", {"model.cross_entropy_loss_fusion"}},
    {"ce_impl", {"model.cross_entropy_fusion_impl"}},
    {"save", {"checkpoint.save_interval"}},
    {"seed", {"rng.seed"}},
    {"pad", {"dataset.pad_seq_to_mult"}},
    {"pack", {"dataset.packed_sequence_size"}},
    {"lora_dim", {"peft.dim"}},
    {"lora_alpha", {"peft.alpha"}},
    {"lora_dropout", {"peft.dropout"}},
    {"targets", {"peft.target_modules"}},
};

/* The full keys an abbreviation (or a key) stands for; n is set to their number. */
static const char *const *expand(const char *key, int *n) {
    for (size_t i = 0; i < sizeof abbrevs / sizeof abbrevs[0]; i++)
        if (!strcmp(abbrevs[i].abbrev, key)) {
            *n = abbrevs[i].keys[1] ? 2 : 1;
            return abbrevs[i].keys;
        }
    return NULL;
}

typedef struct row {
    char *name, *source, *values, *differs;
} row;

static char *trim(char *s) {
    while (*s == ' ') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n')) s[--n] = 0;
    if (n >= 2 && s[0] == '`' && s[n - 1] == '`') {
        s[n - 1] = 0;
        s++;
    }
    return s;
}

/* The rows of the table whose header starts "| recipe | Megatron-Bridge source". */
static int read_rows(char *text, row *rows, int cap) {
    char *p = strstr(text, "| recipe | Megatron-Bridge source");
    if (!p) return -1;
    p = strchr(p, '\n');
    p = p ? strchr(p + 1, '\n') : NULL; /* the |---| line */
    int n = 0;
    while (p && p[1] == '|' && n < cap) {
        char *line = p + 1;
        char *end = strchr(line, '\n');
        if (end) *end = 0;
        char *cols[5] = {0};
        int k = 0;
        for (char *q = line + 1; k < 5 && q && *q; k++) {
            char *bar = strchr(q, '|');
            if (!bar) break;
            *bar = 0;
            cols[k] = trim(q);
            q = bar + 1;
        }
        if (k < 4) return -1;
        rows[n++] = (row){cols[0], cols[1], cols[2], cols[3]};
        p = end;
    }
    return n;
}

/* The value of `key` in a space-separated key=value list, copied to buf; NULL when absent. */
static const char *lookup(const char *list, const char *key, char *buf, size_t cap) {
    size_t kl = strlen(key);
    for (const char *p = list; p && *p;) {
        while (*p == ' ') p++;
        const char *end = strchr(p, ' ');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > kl && !strncmp(p, key, kl) && p[kl] == '=') {
            size_t vl = len - kl - 1;
            if (vl >= cap) vl = cap - 1;
            memcpy(buf, p + kl + 1, vl);
            buf[vl] = 0;
            return buf;
        }
        p = end;
    }
    return NULL;
}

static tr_status resolve_at_min(const tr_recipe *r, tr_config *c, tr_diags *d) {
    int n = 0;
    while (r->catalog_overrides && r->catalog_overrides[n]) n++;
    tr_resolve_opts o;
    memset(&o, 0, sizeof o);
    o.recipe = r->name;
    o.overrides = r->catalog_overrides;
    o.n_overrides = n;
    int w = r->min_world_size;
    o.world = (tr_world){w, w < 8 ? w : 8};
    o.validate.catalog_mode = true;
    return tr_resolve(&o, c, d);
}

/* Check every key of `values` (differs winning) on the resolved config c. */
static int check_row(const row *w, const tr_config *c) {
    tr_config want;
    tr_diags d;
    tr_diags_init(&d);
    if (tr_config_copy(&want, c) != TR_OK) return 1;
    int bad = 0;
    char tok[512], alt[256];
    static char checked[128][128];
    int n_checked = 0;
    for (const char *p = w->values; *p;) {
        while (*p == ' ') p++;
        if (!*p) break;
        const char *end = strchr(p, ' ');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= sizeof tok) len = sizeof tok - 1;
        memcpy(tok, p, len);
        tok[len] = 0;
        p = end ? end : p + len;
        char *eq = strchr(tok, '=');
        if (!eq) {
            fprintf(stderr, "  %s: token '%s' is not key=value\n", w->name, tok);
            bad++;
            continue;
        }
        *eq = 0;
        const char *value = eq + 1;
        const char *trestle = lookup(w->differs, tok, alt, sizeof alt);
        if (trestle) {
            if (!strcmp(trestle, value)) {
                fprintf(stderr, "  %s: %s differs with the same value %s\n", w->name, tok, value);
                bad++;
            }
            value = trestle;
        }
        int nk = 1;
        const char *single[1] = {tok};
        const char *const *keys = expand(tok, &nk);
        if (!keys) keys = single;
        for (int k = 0; k < nk; k++) {
            char assign[600];
            snprintf(assign, sizeof assign, "%s=%s", keys[k], value);
            const char *argv[1] = {assign};
            if (tr_overrides_apply_argv(&want, argv, NULL, 1, &d) != TR_OK) {
                fprintf(stderr, "  %s: cannot apply %s\n", w->name, assign);
                tr_diags_print_text(&d, stderr, false);
                tr_diags_clear(&d);
                bad++;
                continue;
            }
            if (n_checked < 128) snprintf(checked[n_checked++], sizeof checked[0], "%s", keys[k]);
        }
    }
    for (int i = 0; i < n_checked; i++) {
        const tr_field *f;
        if (tr_override_resolve_key(checked[i], NULL, &f, &d) != TR_OK) {
            fprintf(stderr, "  %s: unknown key %s\n", w->name, checked[i]);
            bad++;
            continue;
        }
        if (tr_config_field_equal(&want, c, f)) continue;
        char a[256], b[256];
        tr_config_field_format(&want, f, a, sizeof a);
        tr_config_field_format(c, f, b, sizeof b);
        fprintf(stderr, "  %s: %s is %s, the table says %s\n", w->name, f->path, b, a);
        bad++;
    }
    /* Every differs key is one of the values. */
    for (const char *p = w->differs; *p;) {
        while (*p == ' ') p++;
        if (!*p) break;
        const char *eq = strchr(p, '=');
        if (!eq) break;
        char key[128];
        size_t kl = (size_t)(eq - p) < sizeof key ? (size_t)(eq - p) : sizeof key - 1;
        memcpy(key, p, kl);
        key[kl] = 0;
        if (!lookup(w->values, key, alt, sizeof alt)) {
            fprintf(stderr, "  %s: differs names %s, which the values column lacks\n", w->name,
                    key);
            bad++;
        }
        p = strchr(eq, ' ');
        if (!p) break;
    }
    tr_config_free(&want);
    tr_diags_free(&d);
    return bad;
}

static char *read_table(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/recipes/megatron_bridge_values.md", TRESTLE_SOURCE_DIR);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static void test_every_recipe_matches_the_table(void) {
    char *text = read_table();
    CHECK(text != NULL);
    if (!text) return;
    row rows[128];
    int n = read_rows(text, rows, 128);
    int n_recipes;
    const tr_recipe *list = tr_recipe_list(&n_recipes);
    CHECK_INT_EQ(n, n_recipes);
    for (int i = 0; i < n; i++) {
        const tr_recipe *r = tr_recipe_find(rows[i].name);
        if (!r || strcmp(r->name, rows[i].name)) {
            fprintf(stderr, "  table row %s is not a recipe\n", rows[i].name);
            CHECK(!"row names a recipe");
            continue;
        }
        for (int k = 0; k < i; k++) CHECK(strcmp(rows[k].name, rows[i].name) != 0);
        /* The source function is a Megatron-Bridge name of this very recipe. */
        const char *fn = strstr(rows[i].source, ": ");
        if (fn) {
            if (tr_recipe_find(fn + 2) != r)
                fprintf(stderr, "  %s: %s does not resolve to it\n", r->name, fn + 2);
            CHECK(tr_recipe_find(fn + 2) == r);
        } else {
            CHECK(strstr(rows[i].source, "Trestle addition") != NULL);
        }
        bool differs = rows[i].differs[0] != 0;
        CHECK_INT_EQ(differs, strstr(r->doc, "differs") != NULL);
        tr_config c;
        tr_diags d;
        tr_diags_init(&d);
        tr_status s = resolve_at_min(r, &c, &d);
        if (s != TR_OK) tr_diags_print_text(&d, stderr, false);
        CHECK_INT_EQ(s, TR_OK);
        if (s == TR_OK) CHECK_INT_EQ(check_row(&rows[i], &c), 0);
        tr_config_free(&c);
        tr_diags_free(&d);
    }
    (void)list;
    free(text);
}

/* The check can fail: a recipe resolved with one value changed no longer matches its row. */
static void test_a_changed_value_is_caught(void) {
    char *text = read_table();
    CHECK(text != NULL);
    if (!text) return;
    row rows[128];
    int n = read_rows(text, rows, 128);
    CHECK(n > 0);
    for (int i = 0; i < n; i++) {
        if (strcmp(rows[i].name, "llama3_8b_lora")) continue;
        tr_config c;
        tr_diags d;
        tr_diags_init(&d);
        CHECK_INT_EQ(resolve_at_min(tr_recipe_find("llama3_8b_lora"), &c, &d), TR_OK);
        CHECK_INT_EQ(check_row(&rows[i], &c), 0);
        c.peft.alpha = 32;
        c.scheduler.lr_wsd_decay_style = TR_WSD_EXPONENTIAL;
        fprintf(stderr, "  (two mismatches expected below)\n");
        CHECK_INT_EQ(check_row(&rows[i], &c), 2);
        tr_config_free(&c);
        tr_diags_free(&d);
    }
    free(text);
}

TR_TEST_MAIN(TR_TEST(test_every_recipe_matches_the_table), TR_TEST(test_a_changed_value_is_caught))
