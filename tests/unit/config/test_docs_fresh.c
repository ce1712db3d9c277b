/* The checked-in reference docs are what the field and rule tables generate today. A stale
 * file fails with the first differing line and the command that regenerates it. */
#include <stdlib.h>

#include "core/config.h"
#include "core/docs_gen.h"
#include "core/validate.h"
#include "tests/unit/harness.h"

static char *render(tr_status (*write)(FILE *), size_t *len) {
    char *text = NULL;
    FILE *mem = open_memstream(&text, len);
    if (!mem) return NULL;
    tr_status s = write(mem);
    fclose(mem);
    if (s != TR_OK) {
        free(text);
        return NULL;
    }
    return text;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    char buf[65536];
    size_t got;
    while (mem && (got = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, got, mem);
    fclose(f);
    if (mem) fclose(mem);
    return text;
}

/* 0 when equal, else the 1-based number of the first line that differs. */
static int first_difference(const char *a, const char *b) {
    int line = 1;
    for (; *a && *a == *b; a++, b++)
        if (*a == '\n') line++;
    return *a == *b ? 0 : line;
}

static void check_fresh(const tr_docs_file *doc) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", TRESTLE_SOURCE_DIR, doc->path);
    size_t len = 0;
    char *want = render(doc->write, &len);
    char *have = slurp(path);
    CHECK(want != NULL);
    if (!have) {
        fprintf(stderr, "  %s is missing: run build/trestle_gen_docs\n", path);
        tr_test_failures++;
    } else if (want) {
        int line = first_difference(have, want);
        if (line) {
            fprintf(stderr, "  %s is stale from line %d: run build/trestle_gen_docs\n", path, line);
            tr_test_failures++;
        }
    }
    free(want);
    free(have);
}

static void test_config_reference_is_fresh(void) {
    check_fresh(&tr_docs_files[0]);
}

static void test_validation_rules_are_fresh(void) {
    check_fresh(&tr_docs_files[1]);
}

/* The comparison itself: an edit anywhere is found, on the right line. */
static void test_a_changed_doc_is_stale(void) {
    size_t len = 0;
    char *text = render(tr_docs_config_reference, &len);
    CHECK(text != NULL);
    if (!text) return;
    CHECK_INT_EQ(first_difference(text, text), 0);
    char *edited = strdup(text);
    char *row = strstr(edited, "model.num_layers");
    CHECK(row != NULL);
    if (row) {
        int line = 1;
        for (const char *p = edited; p < row; p++) line += *p == '\n';
        row[0] = 'M';
        CHECK_INT_EQ(first_difference(edited, text), line);
    }
    free(edited);
    free(text);
}

/* Every field and every rule is documented, each under its own row. */
static void test_docs_cover_the_tables(void) {
    size_t len = 0;
    char *ref = render(tr_docs_config_reference, &len);
    char *rules = render(tr_docs_validation_rules, &len);
    CHECK(ref && rules);
    if (!ref || !rules) goto out;
    for (int i = 0; i < tr_field_count; i++) {
        char cell[256];
        snprintf(cell, sizeof cell, "| `%s` |", tr_fields[i].path);
        CHECK_CONTAINS(ref, cell);
    }
    for (int s = 0; s < tr_section_count; s++) {
        char heading[128];
        snprintf(heading, sizeof heading, "\n## %s\n", tr_sections[s].name);
        CHECK_CONTAINS(ref, heading);
    }
    for (int i = 0; i < tr_rule_count; i++) {
        char cell[256];
        static const char *const sev[] = {
            [TR_SEV_NOTE] = "note", [TR_SEV_WARNING] = "warning", [TR_SEV_ERROR] = "error"};
        snprintf(cell, sizeof cell, "| `%s` | %s |", tr_rules[i].id, sev[tr_rules[i].severity]);
        CHECK_CONTAINS(rules, cell);
    }
    /* Every marked field is listed among the keys without their effect, and every capability
     * refusal (runtime.*) there too. */
    char *effects = render(tr_docs_effects, &len);
    CHECK(effects != NULL);
    for (int i = 0; effects && i < tr_field_count; i++) {
        if (!(tr_fields[i].flags & (TR_F_NO_EFFECT | TR_F_UNBUILT))) continue;
        char cell[256];
        snprintf(cell, sizeof cell, "`%s`", tr_fields[i].path);
        CHECK_CONTAINS(effects, cell);
    }
    for (int i = 0; effects && i < tr_rule_count; i++) {
        if (!tr_rule_is_capability(&tr_rules[i])) continue;
        char cell[256];
        snprintf(cell, sizeof cell, "| `%s` |", tr_rules[i].id);
        CHECK_CONTAINS(effects, cell);
    }
    free(effects);
out:
    free(ref);
    free(rules);
}

/* A '|' inside a description would split the row: it must be escaped. */
static void test_rows_have_seven_cells(void) {
    for (int i = 0; i < tr_field_count; i++) {
        char *row = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&row, &len);
        tr_docs_field_row(mem, &tr_fields[i]);
        fclose(mem);
        int bars = 0;
        for (const char *p = row; *p; p++) bars += *p == '|' && (p == row || p[-1] != '\\');
        if (bars != 8)
            fprintf(stderr, "  row of %s has %d cell borders\n", tr_fields[i].path, bars);
        CHECK_INT_EQ(bars, 8);
        free(row);
    }
}

TR_TEST_MAIN(TR_TEST(test_config_reference_is_fresh), TR_TEST(test_validation_rules_are_fresh),
             TR_TEST(test_a_changed_doc_is_stale), TR_TEST(test_docs_cover_the_tables),
             TR_TEST(test_rows_have_seven_cells))
