/* YAML recipes: a YAML override file that names what it builds on with a top-level
 * `base_recipe:` (a registry recipe or another YAML file), so a recipe can be written without C. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/field_parse.h"
#include "overrides/overrides.h"
#include "recipes/resolve.h"

#define MAX_CHAIN 16

typedef struct chain {
    char *paths[MAX_CHAIN]; /* canonical paths of the files being loaded, outermost first */
    int n;
} chain;

static bool names_a_file(const char *base) {
    size_t n = strlen(base);
    return strchr(base, '/') || (n > 5 && !strcmp(base + n - 5, ".yaml")) ||
           (n > 4 && !strcmp(base + n - 4, ".yml"));
}

/* A base file is relative to the directory of the file that names it. */
static char *relative_to(const char *naming_file, const char *base) {
    if (base[0] == '/') return strdup(base);
    const char *slash = strrchr(naming_file, '/');
    size_t dir = slash ? (size_t)(slash - naming_file) + 1 : 0;
    char *out = malloc(dir + strlen(base) + 1);
    if (!out) return NULL;
    memcpy(out, naming_file, dir);
    strcpy(out + dir, base);
    return out;
}

static void chain_text(const chain *ch, const char *last, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < ch->n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s -> ", ch->paths[i]);
    if (used < cap) snprintf(buf + used, cap - used, "%s", last);
}

static const tr_value *find_key(const tr_value *root, const char *key) {
    if (root->kind != TR_VALUE_MAP) return NULL;
    for (int i = 0; i < root->n; i++)
        if (!strcmp(root->keys[i], key)) return &root->items[i];
    return NULL;
}

static tr_status load(tr_config *c, const char *path, const tr_origin *named_at, chain *ch,
                      bool fixed_base, const tr_recipe *applied, const tr_recipe **root,
                      tr_diags *d);

/* Apply what `base` (the base_recipe value at `at`) names. */
static tr_status apply_base(tr_config *c, const char *file, const tr_value *base, chain *ch,
                            bool fixed_base, const tr_recipe *applied, const tr_recipe **root,
                            tr_diags *d) {
    const tr_origin *at = &base->origin;
    bool is_null = base->kind == TR_VALUE_NULL ||
                   (base->kind == TR_VALUE_SCALAR && !base->quoted && tr_text_is_null(base->text));
    if (base->kind != TR_VALUE_SCALAR || is_null || !base->text[0]) {
        char got[128];
        tr_value_format(base, got, sizeof got);
        return tr_diag_add(d, TR_SEV_ERROR, "recipe.base_type", at, "base_recipe",
                           "write `base_recipe: llama32_1b_pretrain` or `base_recipe: other.yaml`",
                           "base_recipe must name a recipe or a YAML file, got %s", got);
    }
    if (names_a_file(base->text)) {
        char *next = relative_to(file, base->text);
        if (!next) return TR_ERR_NOMEM;
        tr_status s = load(c, next, at, ch, fixed_base, applied, root, d);
        free(next);
        return s;
    }
    const tr_recipe *r = tr_recipe_find(base->text);
    if (!r) return tr_recipe_unknown(base->text, at, d);
    if (fixed_base) {
        if (r == applied) return TR_OK;
        char hint[256];
        snprintf(hint, sizeof hint,
                 "drop --recipe (the file then builds on %s), or make base_recipe name %s", r->name,
                 applied ? applied->name : "no recipe");
        return tr_diag_add(d, TR_SEV_ERROR, "recipe.base_conflict", at, "base_recipe", hint,
                           "%s builds on recipe %s, but %s is already in effect", file, r->name,
                           applied ? applied->name : "a config without a recipe");
    }
    TR_TRY(r->fill(c, d));
    *root = r;
    return TR_OK;
}

static tr_status load(tr_config *c, const char *path, const tr_origin *named_at, chain *ch,
                      bool fixed_base, const tr_recipe *applied, const tr_recipe **root,
                      tr_diags *d) {
    tr_origin file_origin = tr_origin_make(TR_ORIGIN_FILE, path);
    const tr_origin *where = named_at ? named_at : &file_origin;
    char canon[PATH_MAX];
    if (!realpath(path, canon)) {
        return tr_diag_add(d, TR_SEV_ERROR, "recipe.yaml_missing", where, "base_recipe",
                           "check the path (a base file is relative to the file naming it)",
                           "cannot open YAML recipe %s: %s", path, strerror(errno));
    }
    for (int i = 0; i < ch->n; i++) {
        if (strcmp(ch->paths[i], canon) != 0) continue;
        char text[2 * PATH_MAX];
        chain_text(ch, canon, text, sizeof text);
        return tr_diag_add(d, TR_SEV_ERROR, "recipe.base_cycle", where, "base_recipe",
                           "make one file in the chain build on a registry recipe",
                           "base_recipe chain loops: %s", text);
    }
    if (ch->n == MAX_CHAIN) {
        return tr_diag_add(d, TR_SEV_ERROR, "recipe.base_depth", where, "base_recipe", NULL,
                           "base_recipe chain deeper than %d files at %s", MAX_CHAIN, path);
    }
    ch->paths[ch->n] = strdup(canon);
    if (!ch->paths[ch->n]) return TR_ERR_NOMEM;
    ch->n++;

    tr_value tree;
    memset(&tree, 0, sizeof tree);
    tr_status s = tr_yaml_parse_file(c, path, &tree, d);
    if (s == TR_OK) {
        const tr_value *base = find_key(&tree, "base_recipe");
        if (base) s = apply_base(c, path, base, ch, fixed_base, applied, root, d);
        /* The file's own keys are reported even when its base failed: all errors at once. */
        if (s != TR_ERR_NOMEM && s != TR_ERR_INTERNAL) {
            static const char *const skip[] = {"base_recipe", NULL};
            tr_status t = tr_yaml_apply(c, &tree, skip, d);
            if (s == TR_OK) s = t;
        }
    }
    tr_value_free(&tree);
    free(ch->paths[--ch->n]);
    return s;
}

tr_status tr_yaml_recipe_apply(tr_config *c, const char *path, bool fixed_base,
                               const tr_recipe *applied, const tr_recipe **root, tr_diags *d) {
    chain ch = {{NULL}, 0};
    const tr_recipe *found = NULL;
    tr_status s = load(c, path, NULL, &ch, fixed_base, applied, &found, d);
    if (root) *root = fixed_base ? applied : found;
    return s;
}
