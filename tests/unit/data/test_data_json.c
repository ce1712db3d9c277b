/* The JSON reader: values, escapes and UTF-8 exactly as RFC 8259 says; errors with line:column. */
#include <stdlib.h>
#include <string.h>

#include "runtime/io/json.h"
#include "tests/unit/harness.h"

static tr_status parse(const char *s, tr_json *v, tr_diags *d) {
    return tr_json_parse(s, strlen(s), "x.json", v, d);
}

static void parses_values_and_escapes(void) {
    tr_json v;
    CHECK(parse(" {\"a\": [1, -2.5e1, true, false, null], \"s\": \"q\\\"\\\\\\/\\n\\u00e9"
                "\\ud83d\\ude00\"} ",
                &v, NULL) == TR_OK);
    const tr_json *a = tr_json_get(&v, "a"), *s = tr_json_get(&v, "s");
    CHECK(a && a->type == TR_JSON_ARRAY && a->n == 5);
    if (a && a->n == 5) {
        CHECK_CLOSE(a->items[1].number, -25.0, 0, 0);
        CHECK_INT_EQ(a->items[2].type, TR_JSON_TRUE);
        CHECK_INT_EQ(a->items[4].type, TR_JSON_NULL);
    }
    CHECK(s && s->type == TR_JSON_STRING);
    if (s) CHECK_STR_EQ(s->str, "q\"\\/\n\xc3\xa9\xf0\x9f\x98\x80");
    CHECK(tr_json_get(&v, "missing") == NULL);
    int64_t i;
    CHECK(tr_json_int(&a->items[0], 0, 10, &i) && i == 1);
    CHECK(!tr_json_int(&a->items[1], 0, 100, &i)); /* -25 is below the range */
    tr_json_free(&v);
    CHECK(parse("\"\\u0000x\"", &v, NULL) == TR_OK);
    CHECK_INT_EQ(v.len, 2); /* an escaped NUL is kept; len says so */
    tr_json_free(&v);
}

static const char *error_of(const char *s, char *msg, size_t cap) {
    tr_json v;
    tr_diags d;
    tr_diags_init(&d);
    tr_status st = parse(s, &v, &d);
    snprintf(msg, cap, "%s", st == TR_OK ? "ok" : d.n ? d.items[0].message : "?");
    if (st == TR_OK)
        tr_json_free(&v);
    else
        CHECK(tr_diags_find(&d, "data.json_syntax") != NULL);
    tr_diags_free(&d);
    return msg;
}

static void rejects_invalid_json_with_position(void) {
    char m[512];
    CHECK_CONTAINS(error_of("{\"a\":1,}", m, sizeof m), "x.json:1:8");
    CHECK_CONTAINS(error_of("{\n  \"a\" 1}", m, sizeof m), "x.json:2:7");
    CHECK_CONTAINS(error_of("[1 2]", m, sizeof m), "expected ','");
    CHECK_CONTAINS(error_of("\"abc", m, sizeof m), "unterminated");
    CHECK_CONTAINS(error_of("\"\\ud800\"", m, sizeof m), "surrogate");
    CHECK_CONTAINS(error_of("\"\\udc00\"", m, sizeof m), "surrogate");
    CHECK_CONTAINS(error_of("\"\xc3\"", m, sizeof m), "UTF-8");
    CHECK_CONTAINS(error_of("\"\xed\xa0\x80\"", m, sizeof m), "UTF-8"); /* encoded surrogate */
    CHECK_CONTAINS(error_of("\"\xc0\xaf\"", m, sizeof m), "UTF-8");     /* overlong */
    CHECK_CONTAINS(error_of("\"a\tb\"", m, sizeof m), "control");
    CHECK_CONTAINS(error_of("01", m, sizeof m), "after the JSON value");
    CHECK_CONTAINS(error_of("1.", m, sizeof m), "invalid number");
    CHECK_CONTAINS(error_of("tru", m, sizeof m), "unexpected");
    CHECK_CONTAINS(error_of("", m, sizeof m), "end of input");
    CHECK_CONTAINS(error_of("{} {}", m, sizeof m), "after the JSON value");
    char deep[600];
    memset(deep, '[', 300);
    memset(deep + 300, ']', 300);
    deep[599] = '\0';
    deep[598] = ']';
    CHECK_CONTAINS(error_of(deep, m, sizeof m), "nesting");
    CHECK_STR_EQ(error_of("[[[[1]]]]", m, sizeof m), "ok");
}

/* A repeated key (a tokenizer.json vocabulary with one token twice) is an error with its line;
 * keys that differ only after an embedded NUL are distinct. A 200k-key object stays linear. */
static void rejects_duplicate_keys(void) {
    tr_diags d;
    tr_diags_init(&d);
    tr_json v;
    CHECK(parse("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 1,\n \"a\": 2}}}", &v, &d) != TR_OK);
    const tr_diag *g = tr_diags_find(&d, "data.json_syntax");
    CHECK(g != NULL);
    if (g) CHECK_CONTAINS(g->message, "x.json:2:");
    if (g) CHECK_CONTAINS(g->message, "key 'a' appears twice");
    tr_diags_free(&d);
    CHECK(parse("{\"a\\u0000x\": 1, \"a\\u0000y\": 2}", &v, NULL) == TR_OK);
    tr_json_free(&v);

    enum { KEYS = 200000 };
    size_t cap = (size_t)KEYS * 20 + 16, n = 0;
    char *text = malloc(cap);
    text[n++] = '{';
    for (int i = 0; i < KEYS; i++)
        n += (size_t)snprintf(text + n, cap - n, "%s\"t%d\": %d", i ? ", " : "", i, i);
    text[n++] = '}';
    tr_test_deadline(30, "the JSON reader is not linear in the number of keys");
    CHECK(tr_json_parse(text, n, "big.json", &v, NULL) == TR_OK);
    tr_test_deadline(0, NULL);
    CHECK_INT_EQ(v.n, KEYS);
    tr_json_free(&v);
    free(text);
}

TR_TEST_MAIN(TR_TEST(parses_values_and_escapes), TR_TEST(rejects_invalid_json_with_position),
             TR_TEST(rejects_duplicate_keys))
