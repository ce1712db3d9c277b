/* Data files that are not regular files (a FIFO nobody writes to, a directory, /dev/zero) are
 * refused as bad input before the first read; none of them may block the run. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "overrides/overrides.h"
#include "runtime/data/datasets/indexed_dataset.h"
#include "runtime/io/json.h"
#include "tests/unit/harness.h"

static char dir[64];

static const char *in_dir(const char *name) {
    static char p[160];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static void make_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/trestle_hostile_XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
}

static void remove_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* The first error's status and message for an indexed dataset whose .idx is `kind`. */
static tr_status open_indexed_with_idx(const char *kind, tr_diags *d) {
    const char *idx = in_dir("ds.idx");
    if (!strcmp(kind, "fifo")) CHECK(mkfifo(idx, 0600) == 0);
    if (!strcmp(kind, "dir")) CHECK(mkdir(idx, 0755) == 0);
    if (!strcmp(kind, "zero")) CHECK(symlink("/dev/zero", idx) == 0);
    tr_indexed_dataset ds;
    memset(&ds, 0, sizeof ds);
    tr_test_deadline(5, "a read blocked on a file that is not regular");
    tr_status s = tr_indexed_open(&ds, in_dir("ds"), d);
    tr_test_deadline(0, NULL);
    if (s == TR_OK) tr_indexed_close(&ds);
    return s;
}

static void test_indexed_refuses_fifo_dir_and_device(void) {
    const char *kinds[] = {"fifo", "dir", "zero"};
    for (int i = 0; i < 3; i++) {
        make_dir();
        tr_diags d;
        tr_diags_init(&d);
        CHECK_INT_EQ(open_indexed_with_idx(kinds[i], &d), TR_ERR_INVALID);
        CHECK(d.n_errors == 1);
        if (d.n_errors) CHECK(strstr(d.items[0].message, "ds.idx") != NULL);
        tr_diags_free(&d);
        remove_dir();
    }
}

static void test_json_reader_refuses_fifo(void) {
    make_dir();
    CHECK(mkfifo(in_dir("tokenizer.json"), 0600) == 0);
    tr_diags d;
    tr_diags_init(&d);
    char *text = NULL;
    size_t len;
    tr_test_deadline(5, "a read blocked on a file that is not regular");
    tr_status s =
        tr_read_file(in_dir("tokenizer.json"), "tokenizer.tokenizer_model", &text, &len, &d);
    tr_test_deadline(0, NULL);
    CHECK_INT_EQ(s, TR_ERR_INVALID);
    if (d.n_errors) CHECK_CONTAINS(d.items[0].message, "not a regular file");
    free(text);
    tr_diags_free(&d);
    remove_dir();
}

static void test_config_file_refuses_fifo(void) {
    make_dir();
    CHECK(mkfifo(in_dir("run.yaml"), 0600) == 0);
    tr_diags d;
    tr_diags_init(&d);
    tr_config c;
    CHECK(tr_config_init(&c, &d) == TR_OK);
    tr_value root;
    tr_test_deadline(5, "a read blocked on a file that is not regular");
    tr_status s = tr_yaml_parse_file(&c, in_dir("run.yaml"), &root, &d);
    tr_test_deadline(0, NULL);
    CHECK_INT_EQ(s, TR_ERR_INVALID);
    if (d.n_errors) CHECK_CONTAINS(d.items[0].message, "not a regular file");
    if (s == TR_OK) tr_value_free(&root);
    tr_config_free(&c);
    tr_diags_free(&d);
    remove_dir();
}

TR_TEST_MAIN(TR_TEST(test_indexed_refuses_fifo_dir_and_device),
             TR_TEST(test_json_reader_refuses_fifo), TR_TEST(test_config_file_refuses_fifo))
