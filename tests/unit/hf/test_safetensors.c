/* safetensors: a file the reference implementation wrote (tests/reference/
 * make_safetensors_fixtures.py) read value by value, Trestle's writer read back, and one hostile
 * header per check of the reader, each refused with the diagnostic that names the problem. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/hf/safetensors.h"
#include "tests/unit/harness.h"

static float half_to_float(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 1024), e - 25);
    return h & 0x8000 ? -v : v;
}

static void test_reads_the_reference_file(void) {
    tr_diags d = {0};
    tr_st_file f;
    CHECK(tr_st_open(&f, TRESTLE_SOURCE_DIR "/tests/reference/fixtures/small.safetensors", &d) ==
          TR_OK);
    CHECK_INT_EQ(f.n, 6);
    CHECK_STR_EQ(tr_st_meta(&f, "format"), "pt");
    CHECK_STR_EQ(tr_st_meta(&f, "trestle"), "fixture");
    CHECK(tr_st_meta(&f, "missing") == NULL);
    const tr_st_tensor *a = tr_st_find(&f, "a.f32"), *b = tr_st_find(&f, "b.f16"),
                       *c = tr_st_find(&f, "c.i64"), *u = tr_st_find(&f, "d.u8"),
                       *e = tr_st_find(&f, "e.f64"), *z = tr_st_find(&f, "f.empty");
    CHECK(a && b && c && u && e && z && !tr_st_find(&f, "a"));
    if (a && b && c && u && e && z) {
        CHECK(a->dtype == TR_ST_F32 && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3);
        for (int k = 0; k < 6; k++) {
            float v;
            memcpy(&v, (const char *)a->data + 4 * k, 4);
            CHECK(v == 0.5f * (float)k);
        }
        CHECK(b->dtype == TR_ST_F16 && tr_st_numel(b) == 4);
        for (int k = 0; k < 4; k++) {
            uint16_t h;
            memcpy(&h, (const char *)b->data + 2 * k, 2);
            CHECK(half_to_float(h) == ((float)k - 1.5f) / 4.0f);
        }
        int64_t want[3] = {1, -2, (int64_t)1 << 40}, got[3];
        memcpy(got, c->data, sizeof got);
        CHECK(c->dtype == TR_ST_I64 && memcmp(got, want, sizeof got) == 0);
        for (int k = 0; k < 5; k++) CHECK(((const uint8_t *)u->data)[k] == 250 + k);
        double s;
        memcpy(&s, e->data, 8);
        CHECK(e->ndim == 0 && tr_st_numel(e) == 1 && s == 3.25);
        CHECK(z->ndim == 2 && z->shape[0] == 0 && z->shape[1] == 7 && tr_st_numel(z) == 0);
    }
    tr_st_close(&f);
    CHECK_INT_EQ(d.n_errors, 0);
    tr_diags_free(&d);
}

static char *tmp_path(const char *name) {
    static char buf[256];
    snprintf(buf, sizeof buf, "/tmp/trestle_st_%ld_%s", (long)getpid(), name);
    return buf;
}

static void test_writes_what_it_reads_back(void) {
    float w[6] = {1, 2, 3, 4, 5, 6};
    uint16_t bf[3] = {0x3f80, 0xc000, 0x7f80}; /* 1, -2, +inf in bf16 */
    int64_t sw[2] = {2, 3}, sb[1] = {3}, se[1] = {0};
    const char *keys[] = {"format", "quote\"back\\slash\n"}, *values[] = {"pt", "x\ty"};
    tr_st_entry e[] = {{"model.embed_tokens.weight", TR_ST_F32, 2, sw, w},
                       {"lm_head.weight", TR_ST_BF16, 1, sb, bf},
                       {"empty", TR_ST_F32, 1, se, NULL}};
    tr_diags d = {0};
    const char *path = tmp_path("rt.safetensors");
    CHECK(tr_st_write(path, e, 3, keys, values, 2, &d) == TR_OK);
    tr_st_file f;
    CHECK(tr_st_open(&f, path, &d) == TR_OK);
    CHECK_INT_EQ(f.n, 3);
    const tr_st_tensor *tw = tr_st_find(&f, "model.embed_tokens.weight");
    const tr_st_tensor *tb = tr_st_find(&f, "lm_head.weight");
    CHECK(tw && tb && tr_st_find(&f, "empty"));
    if (tw && tb) {
        CHECK(tw->dtype == TR_ST_F32 && memcmp(tw->data, w, sizeof w) == 0);
        CHECK(tb->dtype == TR_ST_BF16 && memcmp(tb->data, bf, sizeof bf) == 0);
        /* The header is padded so the data starts 8-byte aligned in the file. */
        CHECK((((const char *)tw->data - (const char *)f.map) - (long)tw->begin) % 8 == 0);
    }
    CHECK_STR_EQ(tr_st_meta(&f, "quote\"back\\slash\n"), "x\ty");
    tr_st_close(&f);
    /* Names twice, or a tensor without data, are refused and leave the target as it was. */
    tr_st_entry dup[] = {{"x", TR_ST_F32, 1, sb, w}, {"x", TR_ST_F32, 1, sb, w}};
    CHECK(tr_st_write(path, dup, 2, NULL, NULL, 0, &d) != TR_OK);
    tr_st_entry nodata[] = {{"x", TR_ST_F32, 1, sb, NULL}};
    CHECK(tr_st_write(path, nodata, 1, NULL, NULL, 0, &d) != TR_OK);
    CHECK(tr_st_open(&f, path, &d) == TR_OK && f.n == 3);
    tr_st_close(&f);
    CHECK(tr_st_write("/nonexistent-dir/x.safetensors", e, 1, NULL, NULL, 0, &d) != TR_OK);
    CHECK(d.n_errors == 3);
    unlink(path);
    tr_diags_free(&d);
}

static unsigned char *slurp(const char *path, long *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)*len + 1);
    if (b && fread(b, 1, (size_t)*len, f) != (size_t)*len) *len = -1;
    fclose(f);
    return b;
}

/* The streamed writer puts the tensors in any order and leaves tr_st_write's exact bytes; until
 * it commits the target is absent, and a tensor never put refuses the commit. */
static void test_stream_writes_the_same_bytes(void) {
    float w[6] = {1, 2, 3, 4, 5, 6};
    uint16_t bf[3] = {0x3f80, 0xc000, 0x7f80};
    int64_t sw[2] = {2, 3}, sb[1] = {3}, se[1] = {0};
    const char *keys[] = {"format"}, *values[] = {"pt"};
    tr_st_entry e[] = {{"b.weight", TR_ST_F32, 2, sw, w},
                       {"a.weight", TR_ST_BF16, 1, sb, bf},
                       {"empty", TR_ST_F32, 1, se, NULL}};
    tr_diags d = {0};
    char one[4096], two[4096]; /* tmp_path's buffer is reused */
    snprintf(one, sizeof one, "%s", tmp_path("whole.safetensors"));
    snprintf(two, sizeof two, "%s", tmp_path("stream.safetensors"));
    CHECK(tr_st_write(one, e, 3, keys, values, 1, &d) == TR_OK);
    tr_st_stream s;
    CHECK(tr_st_stream_open(&s, two, e, 3, keys, values, 1, &d) == TR_OK);
    CHECK(tr_st_stream_put(&s, 1, bf, &d) == TR_OK);
    CHECK(tr_st_stream_put(&s, 2, NULL, &d) == TR_OK);
    CHECK(access(two, F_OK) != 0);
    CHECK(tr_st_stream_put(&s, 1, bf, &d) != TR_OK); /* twice */
    CHECK(tr_st_stream_put(&s, 0, w, &d) == TR_OK);
    CHECK(tr_st_stream_commit(&s, &d) == TR_OK);
    long n1 = 0, n2 = 0;
    unsigned char *b1 = slurp(one, &n1), *b2 = slurp(two, &n2);
    CHECK(b1 && b2 && n1 > 0 && n1 == n2 && memcmp(b1, b2, (size_t)n1) == 0);
    free(b1), free(b2);
    unlink(two);
    CHECK(tr_st_stream_open(&s, two, e, 3, NULL, NULL, 0, &d) == TR_OK);
    CHECK(tr_st_stream_put(&s, 0, w, &d) == TR_OK);
    CHECK(tr_st_stream_commit(&s, &d) != TR_OK);
    CHECK(access(two, F_OK) != 0);
    unlink(one);
    CHECK_INT_EQ(d.n_errors, 2);
    tr_diags_free(&d);
}

/* A tensor put in pieces, last piece first, leaves tr_st_write's bytes; a piece past its
 * tensor's end, or one more than its bytes, is refused, and it counts as put only when whole. */
static void test_stream_puts_pieces(void) {
    float w[6] = {1, 2, 3, 4, 5, 6};
    int64_t sw[2] = {2, 3};
    tr_st_entry e[] = {{"w", TR_ST_F32, 2, sw, w}};
    tr_diags d = {0};
    char one[4096], two[4096];
    snprintf(one, sizeof one, "%s", tmp_path("whole2.safetensors"));
    snprintf(two, sizeof two, "%s", tmp_path("pieces.safetensors"));
    CHECK(tr_st_write(one, e, 1, NULL, NULL, 0, &d) == TR_OK);
    tr_st_stream s;
    CHECK(tr_st_stream_open(&s, two, e, 1, NULL, NULL, 0, &d) == TR_OK);
    CHECK(tr_st_stream_put_range(&s, 0, 16, w + 4, 12, &d) != TR_OK); /* past the end */
    CHECK(tr_st_stream_put_range(&s, 0, 16, w + 4, 8, &d) == TR_OK);
    CHECK(tr_st_stream_put_range(&s, 0, 4, w + 1, 12, &d) == TR_OK);
    CHECK(!s.done[0]);
    CHECK(tr_st_stream_put_range(&s, 0, 0, w, 8, &d) != TR_OK); /* more than its bytes */
    CHECK(tr_st_stream_put_range(&s, 0, 0, w, 4, &d) == TR_OK);
    CHECK(s.done[0]);
    CHECK(tr_st_stream_put(&s, 0, w, &d) != TR_OK); /* twice */
    CHECK(tr_st_stream_commit(&s, &d) == TR_OK);
    long n1 = 0, n2 = 0;
    unsigned char *b1 = slurp(one, &n1), *b2 = slurp(two, &n2);
    CHECK(b1 && b2 && n1 > 0 && n1 == n2 && memcmp(b1, b2, (size_t)n1) == 0);
    free(b1), free(b2);
    unlink(one), unlink(two);
    CHECK_INT_EQ(d.n_errors, 3);
    tr_diags_free(&d);
}

/* A file of an 8-byte length and `header` (len bytes of it), then `data` bytes of zeros. */
static unsigned char *file_of(const char *header, size_t data, size_t *len) {
    size_t n = strlen(header);
    *len = 8 + n + data;
    unsigned char *b = calloc(*len + 1, 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(b + 8, header, n);
    return b;
}

static void expect_refused(const char *header, size_t data, const char *id, const char *word) {
    size_t len;
    unsigned char *b = file_of(header, data, &len);
    tr_diags d = {0};
    tr_st_file f;
    tr_status st = tr_st_parse(&f, b, len, "bad.safetensors", &d);
    bool named = d.n > 0 && strcmp(d.items[0].id, id) == 0 &&
                 (!word || strstr(d.items[0].message, word) != NULL);
    if (st == TR_OK || !named)
        fprintf(stderr, "  header %s: status %d, first diagnostic %s: %s\n", header, st,
                d.n ? d.items[0].id : "none", d.n ? d.items[0].message : "");
    CHECK(st != TR_OK && named);
    if (st == TR_OK) tr_st_close(&f);
    tr_diags_free(&d);
    free(b);
}

static void test_refuses_hostile_headers(void) {
    const char *ok = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t len;
    unsigned char *b = file_of(ok, 8, &len);
    tr_diags d = {0};
    tr_st_file f;
    CHECK(tr_st_parse(&f, b, len, "ok", &d) == TR_OK && f.n == 1);
    tr_st_close(&f);
    /* Truncations of a good file, and a header length past the end. */
    CHECK(tr_st_parse(&f, b, 5, "short", &d) == TR_ERR_INVALID);
    CHECK(tr_st_parse(&f, b, len - 1, "cut data", &d) == TR_ERR_INVALID);
    CHECK(tr_st_parse(&f, b, 20, "cut header", &d) == TR_ERR_INVALID);
    b[7] = 0x7f; /* a length of about 2^63 */
    CHECK(tr_st_parse(&f, b, len, "huge", &d) == TR_ERR_INVALID);
    CHECK_INT_EQ(d.n_errors, 4);
    tr_diags_free(&d);
    free(b);

    expect_refused("[1,2]", 0, "safetensors.header", "not a JSON object");
    expect_refused("{\"t\":", 0, "data.json_syntax", NULL);
    expect_refused("{\"t\":[]}", 0, "safetensors.header", "\"t\"");
    expect_refused("{\"t\":{\"dtype\":\"Q8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                   "safetensors.header", "unknown dtype");
    expect_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":"
                   "[0,4]}}",
                   4, "safetensors.header", "dimensions");
    expect_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
                   "safetensors.header", "dimension 0");
    expect_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
                   "safetensors.header", "dimension 0");
    expect_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":"
                   "[0,0]}}",
                   0, "safetensors.header", "overflows");
    expect_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4,
                   "safetensors.header", "begin <= end");
    expect_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 2,
                   "safetensors.layout", "past the 2 bytes");
    expect_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
                   "safetensors.header", "need 8");
    expect_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", 0, "safetensors.header", "missing");
    expect_refused("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
                   "safetensors.header", "unexpected field");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                   12, "safetensors.layout", "inside the tensor before it");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                   12, "safetensors.layout", "hole of 4 bytes");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
                   "safetensors.layout", "4 bytes of data follow");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                   8, "data.json_syntax", "appears twice");
    expect_refused("{\"__metadata__\":{\"format\":1}}", 0, "safetensors.header", "__metadata__");
    expect_refused("{\"__metadata__\":[]}", 0, "safetensors.header", "__metadata__");
    expect_refused("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                   "safetensors.header", "NUL");
}

static void test_open_refuses_what_is_not_a_regular_file(void) {
    tr_diags d = {0};
    tr_st_file f;
    CHECK(tr_st_open(&f, tmp_path("missing"), &d) == TR_ERR_NOTFOUND);
    CHECK(tr_st_open(&f, "/tmp", &d) == TR_ERR_IO);
    /* A FIFO nobody writes to: without O_NONBLOCK the open would wait forever. */
    const char *fifo = tmp_path("fifo");
    unlink(fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(tr_st_open(&f, fifo, &d) == TR_ERR_IO);
    unlink(fifo);
    const char *empty = tmp_path("empty");
    int fd = open(empty, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    CHECK(tr_st_open(&f, empty, &d) == TR_ERR_INVALID);
    unlink(empty);
    CHECK_INT_EQ(d.n_errors, 4);
    CHECK_STR_EQ(d.items[0].id, "safetensors.open");
    tr_diags_free(&d);
}

TR_TEST_MAIN(TR_TEST(test_reads_the_reference_file), TR_TEST(test_writes_what_it_reads_back),
             TR_TEST(test_stream_writes_the_same_bytes), TR_TEST(test_stream_puts_pieces),
             TR_TEST(test_refuses_hostile_headers),
             TR_TEST(test_open_refuses_what_is_not_a_regular_file))
