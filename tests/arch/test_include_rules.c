/* The house stays as drawn: every #include of the source tree obeys the include-rule table of
 * docs/architecture.md ("Include rules"), the table itself is a layering (no module may reach
 * itself through the modules it may include), every source file lies in a module of the table,
 * every include names its file from the repository root, and a module's internal.h is read only
 * inside that module. The checker is first run on made-up includes it must refuse, so a table
 * or parser that lets everything through fails here too. */
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/unit/harness.h"

#define MAX_MODULES 64
#define MAX_ALLOWED 32

typedef struct module {
    char path[96]; /* "runtime/model/" */
    char allowed[MAX_ALLOWED][96];
    int n_allowed;
    bool any; /* "*": may include every module but tests/ and bench/ */
} module;

typedef struct rules {
    module m[MAX_MODULES];
    int n;
} rules;

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)n + 1))) {
            size_t got = fread(s, 1, (size_t)n, f);
            s[got] = 0;
        }
    }
    fclose(f);
    return s;
}

/* The backticked words of one table cell, in order. */
static int backticked(const char *cell, size_t len, char out[][96], int max) {
    int n = 0;
    const char *end = cell + len;
    for (const char *p = cell; p < end && n < max; p++) {
        if (*p != '`') continue;
        const char *q = memchr(p + 1, '`', (size_t)(end - p - 1));
        if (!q) break;
        size_t w = (size_t)(q - p - 1);
        if (w > 0 && w < 96) {
            memcpy(out[n], p + 1, w);
            out[n++][w] = 0;
        }
        p = q;
    }
    return n;
}

/* Rows "| `module/` | what it holds | `a/` `b/` |" of the table under "## Include rules"; a row
 * whose first cell holds no backticked path (the header, the separator) is skipped. */
static bool parse_rules(const char *doc, rules *r) {
    memset(r, 0, sizeof *r);
    const char *at = strstr(doc, "\n## Include rules");
    if (!at) return false;
    const char *line = strchr(at + 1, '\n');
    bool in_table = false;
    while (line && *++line) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        if (len > 0 && line[0] == '|') {
            in_table = true;
            const char *cells[8];
            size_t lens[8];
            int nc = 0;
            const char *c = line + 1;
            while (nc < 8 && c < line + len) {
                const char *bar = memchr(c, '|', (size_t)(line + len - c));
                if (!bar) break;
                cells[nc] = c;
                lens[nc++] = (size_t)(bar - c);
                c = bar + 1;
            }
            char words[MAX_ALLOWED][96];
            if (nc >= 3 && backticked(cells[0], lens[0], words, 1) == 1 && r->n < MAX_MODULES) {
                module *m = &r->m[r->n++];
                snprintf(m->path, sizeof m->path, "%s", words[0]);
                int n = backticked(cells[nc - 1], lens[nc - 1], m->allowed, MAX_ALLOWED);
                for (int i = 0; i < n; i++)
                    if (strcmp(m->allowed[i], "*") == 0) m->any = true;
                m->n_allowed = n;
            }
        } else if (in_table) {
            break;
        }
        line = eol;
    }
    return r->n > 0;
}

static bool has_prefix(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The module a repository path lies in: the longest module path that prefixes it. */
static const module *module_of(const rules *r, const char *path) {
    const module *best = NULL;
    for (int i = 0; i < r->n; i++)
        if (has_prefix(path, r->m[i].path) && (!best || strlen(r->m[i].path) > strlen(best->path)))
            best = &r->m[i];
    return best;
}

static const module *module_named(const rules *r, const char *path) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->m[i].path, path) == 0) return &r->m[i];
    return NULL;
}

static bool is_internal_header(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    return strcmp(base, "internal.h") == 0 || (n > 11 && strcmp(base + n - 11, "_internal.h") == 0);
}

static size_t dir_len(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path) + 1 : 0;
}

/* Why `file` may not include `inc` (a repository path), or NULL when it may. */
static const char *violation(const rules *r, const char *file, const char *inc, char *why,
                             size_t cap) {
    const module *from = module_of(r, file), *to = module_of(r, inc);
    if (!from) return snprintf(why, cap, "%s lies in no module of the table", file), why;
    if (!to) return snprintf(why, cap, "%s lies in no module of the table", inc), why;
    bool white_box = strcmp(from->path, "tests/") == 0;
    /* A subfolder that the table does not name is part of its module, and reads its internals. */
    if (is_internal_header(inc) && !white_box &&
        (from != to || strncmp(inc, file, dir_len(inc)) != 0))
        return snprintf(why, cap, "%s is internal to %.*s", inc, (int)dir_len(inc), inc), why;
    if (from == to) return NULL;
    if (from->any && strcmp(to->path, "tests/") != 0 && strcmp(to->path, "bench/") != 0)
        return NULL;
    for (int i = 0; i < from->n_allowed; i++)
        if (strcmp(from->allowed[i], to->path) == 0) return NULL;
    snprintf(why, cap, "module %s may not include module %s", from->path, to->path);
    return why;
}

typedef struct walk {
    const rules *r;
    int files, includes, bad;
} walk;

static bool is_source(const char *name) {
    static const char *const ext[] = {".c", ".h", ".cu", ".cuh", ".cpp", ".inc"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t e = strlen(ext[i]);
        if (n > e && strcmp(name + n - e, ext[i]) == 0) return true;
    }
    return false;
}

static void check_file(walk *w, const char *rel) {
    char full[2048];
    snprintf(full, sizeof full, "%s/%s", TRESTLE_SOURCE_DIR, rel);
    char *text = read_text(full);
    if (!text) {
        fprintf(stderr, "  cannot read %s\n", rel);
        w->bad++;
        return;
    }
    w->files++;
    char why[512];
    if (!module_of(w->r, rel)) {
        fprintf(stderr, "  %s lies in no module of docs/architecture.md's include table\n", rel);
        w->bad++;
    }
    int line_no = 0;
    for (char *line = text; line && *line; line_no++) {
        char *eol = strchr(line, '\n');
        if (eol) *eol = 0;
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '#') {
            p++;
            while (*p == ' ' || *p == '\t') p++;
            char inc[512];
            if (strncmp(p, "include", 7) == 0 && sscanf(p + 7, " \"%511[^\"]\"", inc) == 1) {
                w->includes++;
                char target[2048];
                struct stat st;
                snprintf(target, sizeof target, "%s/%s", TRESTLE_SOURCE_DIR, inc);
                if (stat(target, &st) != 0) {
                    fprintf(stderr,
                            "  %s:%d: #include \"%s\" names no file from the repository "
                            "root (write the whole path, e.g. \"runtime/model/model.h\")\n",
                            rel, line_no + 1, inc);
                    w->bad++;
                } else if (violation(w->r, rel, inc, why, sizeof why)) {
                    fprintf(stderr,
                            "  %s:%d: #include \"%s\": %s (docs/architecture.md, "
                            "\"Include rules\")\n",
                            rel, line_no + 1, inc, why);
                    w->bad++;
                }
            }
        }
        line = eol ? eol + 1 : NULL;
    }
    free(text);
}

static void walk_dir(walk *w, const char *rel) {
    char full[2048];
    snprintf(full, sizeof full, "%s/%s", TRESTLE_SOURCE_DIR, rel);
    DIR *d = opendir(full);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char child[1024];
        if (snprintf(child, sizeof child, "%s/%s", rel, e->d_name) >= (int)sizeof child) continue;
        char child_full[2048];
        snprintf(child_full, sizeof child_full, "%s/%s", TRESTLE_SOURCE_DIR, child);
        struct stat st;
        if (lstat(child_full, &st) != 0) continue;
        if (S_ISDIR(st.st_mode))
            walk_dir(w, child);
        else if (S_ISREG(st.st_mode) && is_source(e->d_name))
            check_file(w, child);
    }
    closedir(d);
}

/* Depth-first search for a module that reaches itself; 0 white, 1 on the stack, 2 done. */
static bool reaches_itself(const rules *r, int i, int *color, int *stack, int depth) {
    color[i] = 1;
    stack[depth] = i;
    const module *m = &r->m[i];
    for (int k = 0; k < m->n_allowed; k++) {
        const module *to = module_named(r, m->allowed[k]);
        if (!to) continue;
        int j = (int)(to - r->m);
        if (color[j] == 1) {
            fprintf(stderr, "  the table has a circle:");
            for (int s = 0; s <= depth; s++) fprintf(stderr, " %s ->", r->m[stack[s]].path);
            fprintf(stderr, " %s\n", to->path);
            return true;
        }
        if (color[j] == 0 && reaches_itself(r, j, color, stack, depth + 1)) return true;
    }
    color[i] = 2;
    return false;
}

static rules table;

/* Each test reads the table itself, so any one of them can run alone. */
static bool load_table(void) {
    char *doc = read_text(TRESTLE_SOURCE_DIR "/docs/architecture.md");
    bool ok = doc && parse_rules(doc, &table);
    free(doc);
    if (!ok) fprintf(stderr, "  docs/architecture.md has no \"## Include rules\" table\n");
    return ok;
}

static void test_table_parses_and_is_a_layering(void) {
    CHECK(load_table());
    CHECK(table.n >= 20);
    int color[MAX_MODULES] = {0}, stack[MAX_MODULES];
    for (int i = 0; i < table.n; i++) {
        const module *m = &table.m[i];
        char full[2048];
        struct stat st;
        snprintf(full, sizeof full, "%s/%s", TRESTLE_SOURCE_DIR, m->path);
        if (stat(full, &st) != 0 || !S_ISDIR(st.st_mode))
            fprintf(stderr, "  table row %s: no such folder\n", m->path), tr_test_failures++;
        for (int k = 0; k < m->n_allowed; k++)
            if (!m->any && !module_named(&table, m->allowed[k]))
                fprintf(stderr, "  table row %s: %s is not a module of the table\n", m->path,
                        m->allowed[k]),
                    tr_test_failures++;
        /* core/ is the ground floor. */
        if (strcmp(m->path, "core/") == 0) CHECK(m->n_allowed == 0);
    }
    for (int i = 0; i < table.n; i++)
        if (color[i] == 0) CHECK(!reaches_itself(&table, i, color, stack, 0));
}

/* The checker refuses what it must: an arrow from the ground floor up, one across the runtime's
 * layers, a peek at another module's internal.h; and lets the allowed ones through. */
static void test_checker_refuses_wrong_includes(void) {
    CHECK(load_table());
    char why[512];
    CHECK(violation(&table, "core/finalize.c", "providers/provider.h", why, sizeof why));
    CHECK(violation(&table, "core/config.c", "runtime/model/model.h", why, sizeof why));
    CHECK(violation(&table, "runtime/comm/comm.c", "runtime/model/model.h", why, sizeof why));
    CHECK(violation(&table, "runtime/model/forward.c", "runtime/train/train.h", why, sizeof why));
    CHECK(violation(&table, "kernels/cpu/gemm.c", "runtime/device/device.h", why, sizeof why));
    CHECK(violation(&table, "runtime/peft/lora.c", "runtime/model/internal.h", why, sizeof why));
    CHECK(violation(&table, "runtime/nowhere.c", "core/config.h", why, sizeof why));
    CHECK(
        !violation(&table, "runtime/model/forward.c", "runtime/model/internal.h", why, sizeof why));
    CHECK(!violation(&table, "runtime/model/adapters/dora.c", "runtime/model/internal.h", why,
                     sizeof why));
    /* kernels/cpu/simd/ is a module of its own inside kernels/cpu/. */
    CHECK(violation(&table, "kernels/cpu/simd/x.c", "kernels/cpu/internal.h", why, sizeof why));
    CHECK(!violation(&table, "runtime/train/train.c", "runtime/model/model.h", why, sizeof why));
    CHECK(!violation(&table, "runtime/peft/lora.c", "runtime/model/linear.h", why, sizeof why));
    CHECK(
        !violation(&table, "tests/unit/model/test_lora.c", "runtime/peft/lora.h", why, sizeof why));
    CHECK(!violation(&table, "tests/unit/model/test_lora.c", "runtime/model/internal.h", why,
                     sizeof why));
    CHECK(violation(&table, "scripts/run_recipe.c", "tests/unit/harness.h", why, sizeof why));
    CHECK(violation(&table, "scripts/run_recipe.c", "runtime/model/internal.h", why, sizeof why));
}

static void test_every_include_follows_the_table(void) {
    CHECK(load_table());
    walk w = {.r = &table};
    static const char *const roots[] = {"core",    "overrides", "providers", "recipes", "kernels",
                                        "runtime", "scripts",   "bench",     "tests"};
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) walk_dir(&w, roots[i]);
    printf("  %d files, %d project includes checked, %d violations\n", w.files, w.includes, w.bad);
    CHECK(w.files > 300 && w.includes > 500);
    CHECK_INT_EQ(w.bad, 0);
}

TR_TEST_MAIN(TR_TEST(test_table_parses_and_is_a_layering),
             TR_TEST(test_checker_refuses_wrong_includes),
             TR_TEST(test_every_include_follows_the_table))
